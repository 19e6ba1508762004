"""The production model client: the official `anthropic` SDK, streaming.

Without an API key, settings point the same SDK at the sandbox's Messages API
stand-in, so demos and tests run exactly this code over real HTTP and SSE.
The SDK retries 429/529/5xx with backoff and honours `retry-after`.
"""

from __future__ import annotations

import json
import math
import ssl
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2
from django.conf import settings

from agents.llm.base import Abort, ModelAborted, ModelReply, ModelRequest, ModelUnavailable
from agents.observability import tracing

READ_TIMEOUT_MARGIN_S = 2.0
# A slot makes one call at a time: one connection, kept alive between calls.
SLOT_LIMITS = httpx2.Limits(max_connections=2, max_keepalive_connections=1, keepalive_expiry=30)


class _NotFinite(ValueError):
    pass


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text[:40])
    return value


def _no_constant(name: str) -> float:
    raise _NotFinite(name)


class AnthropicModel:
    """One SDK client per slot (thread), each with a connection pool of its own.

    With hundreds of slots in one process, a single shared client put every
    stream through one httpx pool whose request assignment scans all waiting
    requests under one lock: at 500 sessions in flight it was the largest
    single cost in the process (py-spy --gil, bench/latency.py). A slot runs
    one call at a time, so its own client needs one kept-alive connection;
    the SSL context (costly to build) is shared.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._ssl = ssl.create_default_context()
        # Asked once per process, not by every slot's new client: the SDK's
        # client reads the proxy variables by walking os.environ, a quarter
        # of a fresh worker's CPU while a burst filled its slots (py-spy).
        # Without proxy variables there is nothing for it to find (and the
        # SSL context is ours), so the clients skip the look.
        self._env_proxies = bool(urllib.request.getproxies())

    @property
    def client(self) -> anthropic.Anthropic:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = anthropic.Anthropic(
                api_key=settings.ANTHROPIC_API_KEY or "sk-ant-sandbox",
                base_url=settings.ANTHROPIC_BASE_URL or None,
                # The engine cuts the whole call at AGENTDESK_MODEL_TIMEOUT_S
                # (agents/runtime/cancel.py); the SDK's per-read timeout is only
                # a backstop just behind it, so the engine's deadline speaks first.
                timeout=settings.AGENTDESK_MODEL_TIMEOUT_S + READ_TIMEOUT_MARGIN_S,
                max_retries=settings.AGENTDESK_MODEL_MAX_RETRIES,
                http_client=anthropic.DefaultHttpxClient(
                    verify=self._ssl, limits=SLOT_LIMITS, trust_env=self._env_proxies
                ),
                # The SDK's own spans only when we trace (then they nest under
                # our model.call span); off, they cost ~5% of a busy process.
                open_telemetry={"traces": tracing.enabled()},
            )
        return client

    def complete(
        self,
        request: ModelRequest,
        *,
        on_text: Callable[[str], None],
        abort: Abort,
    ) -> ModelReply:
        assembler = _Assembler()
        try:
            # The SDK sends the request (auth, headers, retries on 429/529/5xx
            # before the stream starts); the events are read here as JSON.
            # Its typed stream built a pydantic object per event: most of the
            # CPU a model call cost this process (bench/latency.py), and a busy
            # worker's CPU is what bounds the sessions it keeps moving.
            with self.client.messages.with_streaming_response.create(
                model=settings.AGENTDESK_MODEL,
                max_tokens=request.max_tokens,
                system=request.system,
                # No tools at all (a memory summary) is left out, not sent as [].
                **({"tools": request.tools} if request.tools else {}),
                **_effort(),
                messages=request.messages,
                stream=True,
            ) as response:
                abort.on_abort(response.http_response.close)  # ends even a stalled stream
                for kind, data in _sse(response.iter_lines()):
                    if abort.is_set():
                        raise ModelAborted("the model stream was aborted")
                    delta = assembler.feed(kind, data)
                    if delta:
                        on_text(delta)
        except (ModelAborted, ModelUnavailable):
            raise
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as exc:
            if abort.is_set():  # the stream was closed under us by a cancel
                raise ModelAborted("the model stream was aborted") from exc
            raise ModelUnavailable(_describe(exc)) from exc
        except Exception as exc:  # a broken stream mid-way: same as no answer
            if abort.is_set():
                raise ModelAborted("the model stream was aborted") from exc
            raise ModelUnavailable(f"model stream broke: {exc!r}") from exc
        return assembler.reply()


def _effort() -> dict[str, Any]:
    effort = settings.AGENTDESK_MODEL_EFFORT
    return {"output_config": {"effort": effort}} if effort else {}


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Server-sent events as (event name, JSON data)."""
    kind, data = "", []
    for line in lines:
        if not line:
            if data:
                yield kind, json.loads("\n".join(data))
            kind, data = "", []
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    if data:
        yield kind, json.loads("\n".join(data))


def _unsigned_thinking(block: dict[str, Any]) -> bool:
    return block.get("type") == "thinking" and not block.get("signature")


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"model API error{f' {status}' if status else ''}: {exc}"


class _Assembler:
    """Builds content blocks from the stream's events (JSON, as sent).

    Done by hand rather than with the SDK's accumulator so that tool input
    that is not valid JSON becomes a recorded, explainable error instead of
    an exception in the middle of the stream.
    """

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []
        self.partial_json: dict[int, str] = {}
        self.malformed: dict[str, str] = {}
        self.stop_reason = ""
        self.input_tokens = 0
        self.output_tokens = 0
        self.model = ""
        self.finished = False

    def feed(self, kind: str, event: dict[str, Any]) -> str:
        kind = event.get("type", kind)
        if kind == "message_start":
            message = event["message"]
            self.model = message.get("model", "")
            usage = message.get("usage") or {}
            self.input_tokens = usage.get("input_tokens") or 0
            self.output_tokens = usage.get("output_tokens") or 0
        elif kind == "content_block_start":
            self._start(event["index"], event["content_block"])
        elif kind == "content_block_delta":
            return self._delta(event["index"], event["delta"])
        elif kind == "content_block_stop":
            self._stop(event["index"])
        elif kind == "message_stop":
            self.finished = True
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            usage = event.get("usage") or {}
            if usage.get("output_tokens") is not None:
                self.output_tokens = usage["output_tokens"]
        elif kind == "error":  # overloaded mid-stream, say: no answer
            error = event.get("error") or {}
            raise ModelUnavailable(
                f"model stream error: {error.get('type', '?')}: {error.get('message', '')}"
            )
        return ""

    def _start(self, index: int, block: dict[str, Any]) -> None:
        while len(self.blocks) <= index:
            self.blocks.append({})
        if block["type"] == "text":
            self.blocks[index] = {"type": "text", "text": block.get("text") or ""}
        elif block["type"] == "tool_use":
            self.blocks[index] = {"type": "tool_use", "id": block["id"], "name": block["name"]}
            self.partial_json[index] = ""
        else:  # thinking and other blocks are kept as the API gives them
            self.blocks[index] = {k: v for k, v in block.items() if v is not None}

    def _delta(self, index: int, delta: dict[str, Any]) -> str:
        kind = delta["type"]
        if kind == "text_delta":
            self.blocks[index]["text"] += delta["text"]
            return delta["text"]
        if kind == "input_json_delta":
            self.partial_json[index] += delta["partial_json"]
        elif kind == "thinking_delta":
            # A model that thinks (Claude Sonnet 5 does by default) streams its
            # thinking, then a signature over it: the block goes back to the API
            # whole in the next request (after a tool call), or it is refused.
            block = self.blocks[index]
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta":
            self.blocks[index]["signature"] = delta["signature"]
        return ""

    def _stop(self, index: int) -> None:
        block = self.blocks[index]
        if block.get("type") != "tool_use":
            return
        raw = self.partial_json.pop(index, "")
        why = "is not a JSON object"
        try:
            value = (
                json.loads(raw, parse_float=_finite, parse_constant=_no_constant)
                if raw.strip()
                else {}
            )
        except _NotFinite as exc:
            # 1e400, NaN: no JSON number the tool could be sent, and nothing
            # Postgres would store (the reply would fail its record again and
            # again): the call is refused as any malformed input is.
            value, why = None, f"has a number JSON cannot carry ({exc})"
        except ValueError:
            value = None
        if not isinstance(value, dict):
            self.malformed[block["id"]] = f"tool input {why}: {raw[:500]!r}"
            value = {}
        block["input"] = value

    def reply(self) -> ModelReply:
        if not self.finished:
            raise ModelUnavailable("the model stream ended before message_stop")
        return ModelReply(
            # A thinking block without its signature was cut (max_tokens) before
            # the signature came: the API refuses it sent back, so it is not kept.
            content=[b for b in self.blocks if b and not _unsigned_thinking(b)],
            stop_reason=self.stop_reason or "end_turn",
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            model=self.model,
            malformed_inputs=self.malformed,
        )
