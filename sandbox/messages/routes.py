"""`POST /v1/messages`: the Messages-API stand-in, streaming and not."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from sandbox.messages import memory, thinking
from sandbox.messages.policy import Reply, decide
from sandbox.messages.render import (
    Event,
    Pacing,
    estimate_tokens,
    message_json,
    stream_events,
    total_delay,
)
from sandbox.messages.transcript import TranscriptError, Turn, parse_turn
from sandbox.responses import anthropic_error, json_body, json_response, random_id
from sandbox.state import Sandbox, sandbox_of

EFFORTS = ("low", "medium", "high", "xhigh", "max")
# [[sandbox:slow]]: slow enough to cancel mid-stream and watch in a browser.
SLOW_PACING = Pacing(delay=0.150, min_text_chunks=20)


def _authenticated(request: Request) -> bool:
    # Any key is accepted; a request without one is refused as the real API does.
    return bool(request.headers.get("x-api-key") or request.headers.get("authorization"))


def _validate(body: dict[str, Any] | None) -> str | None:
    """The first problem with the request body, or None."""
    if body is None:
        return "Request body must be a JSON object."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        return "max_tokens: Field required (a positive integer)"
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return "messages: at least one message is required"
    output_config = body.get("output_config", {})
    if not isinstance(output_config, dict):
        return "output_config: Input should be an object"
    if output_config.get("effort", "high") not in EFFORTS:
        return f"output_config.effort: Input should be {', '.join(map(repr, EFFORTS))}"
    return None


def input_tokens(body: dict[str, Any]) -> int:
    # ~4 characters per token over everything the model would read.
    seen = {k: body.get(k) for k in ("system", "messages", "tools")}
    return estimate_tokens(json.dumps(seen))


async def _read_request(request: Request) -> tuple[dict[str, Any], Turn] | Response:
    if not _authenticated(request):
        return anthropic_error(401, "x-api-key header is required")
    body = await json_body(request)
    problem = _validate(body)
    if problem is None:
        assert body is not None
        try:
            return body, parse_turn(body)
        except TranscriptError as exc:
            problem = str(exc)
    return anthropic_error(400, problem)


def _pacing(request: Request, turn: Turn, body: dict[str, Any]) -> Pacing:
    if "slow" in turn.directives or (memory.is_summary_request(body) and memory.wants_slow(body)):
        return SLOW_PACING
    sandbox = sandbox_of(request)
    pace = sandbox.pace
    return Pacing(
        delay=sandbox.options.model_chunk_delay_ms / 1000,
        ttft=pace.ttft_ms / 1000,
        per_token=1 / pace.tokens_per_s if pace.tokens_per_s > 0 else 0.0,
    )


async def create_message(request: Request) -> Response:
    sandbox = sandbox_of(request)
    counters = sandbox.counters
    parsed = await _read_request(request)
    if isinstance(parsed, Response):
        counters.incr(f"model.outcome.error_{parsed.status_code}")
        return parsed
    body, turn = parsed
    sandbox.requests.add(body)
    if memory.is_summary_request(body):  # a memory snapshot (sandbox/messages/memory.py)
        counters.incr("model.summary.requests")
        reply = Reply(memory.summarize(body))
    else:
        reply = _reply(turn, body, sandbox)
    message_id = random_id("msg_")
    tokens = input_tokens(body)
    pacing = _pacing(request, turn, body)
    events = stream_events(
        reply, message_id=message_id, model=body["model"], input_tokens=tokens, pacing=pacing
    )
    headers = {"request-id": random_id("req_")}
    if body.get("stream"):
        counters.incr("model.mode.stream")
        stream = _stream(events, pacing, reply, sandbox, body, _client(request))
        return StreamingResponse(
            stream, media_type="text/event-stream", headers={**headers, "cache-control": "no-cache"}
        )
    counters.incr("model.mode.non_stream")
    # Same pacing as the stream would have, so [[sandbox:slow]] is slow either way.
    await anyio.sleep(total_delay(events, pacing))
    counters.incr(f"model.outcome.{reply.stop_reason}")
    sandbox.completed.completed(body, _client(request))
    return json_response(
        message_json(reply, message_id=message_id, model=body["model"], input_tokens=tokens),
        headers=headers,
    )


def _reply(turn: Turn, body: dict[str, Any], sandbox: Sandbox) -> Reply:
    """The policy's reply; thinking first when a directive asks for it
    (sandbox/messages/thinking.py)."""
    wanted = [d for d in turn.directives if d in thinking.DIRECTIVES]
    if not wanted:
        return decide(turn)
    thought = thinking.thought(turn.text, len(turn.calls))
    first = not turn.calls and not turn.continues and not sandbox.completed.seen(body)
    if "thinking_cut" in wanted and first:
        return Reply("", stop="max_tokens", thinking=thought, thinking_cut=True)
    return replace(decide(turn), thinking=thought)


def _client(request: Request) -> str:
    return request.client.host if request.client else ""


async def _stream(
    events: list[Event],
    pacing: Pacing,
    reply: Reply,
    sandbox: Sandbox,
    body: dict[str, Any],
    client: str,
) -> AsyncIterator[bytes]:
    finished = False
    try:
        for index, event in enumerate(events):
            yield event.frame()
            if index == 0 and pacing.ttft:  # message_start goes at once, like the real API
                await anyio.sleep(pacing.ttft)
            if pause := pacing.after(event):
                await anyio.sleep(pause)
        finished = True
    finally:
        # A client that hangs up mid-stream (a cancel) shows up in /_stats.
        outcome = reply.stop_reason if finished else "stream_aborted"
        sandbox.counters.incr(f"model.outcome.{outcome}")
        if finished:
            sandbox.completed.completed(body, client)


async def count_tokens(request: Request) -> Response:
    if not _authenticated(request):
        return anthropic_error(401, "x-api-key header is required")
    body = await json_body(request)
    if body is None or not isinstance(body.get("messages"), list):
        return anthropic_error(400, "messages: Field required")
    return json_response({"input_tokens": input_tokens(body)})


routes = [
    Route("/v1/messages", create_message, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]
