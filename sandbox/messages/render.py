"""A policy Reply as a Messages-API response: one JSON message, or SSE events.

Both forms come from the same event list, so the streamed message and the
non-streamed one are the same message.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from sandbox.messages.policy import Reply
from sandbox.messages.thinking import sign

WORDS_PER_CHUNK = 3
JSON_CHUNKS = 4


@dataclass(frozen=True)
class Pacing:
    delay: float = 0.0  # seconds slept after each delta
    min_text_chunks: int = 1
    # A real model's pace: before the first delta, and per output token.
    ttft: float = 0.0
    per_token: float = 0.0

    def after(self, event: Event) -> float:
        """Seconds to sleep after sending `event`."""
        if not event.pause_after:
            return 0.0
        return self.delay + self.per_token * estimate_tokens(event.delta_text)


@dataclass(frozen=True)
class Event:
    name: str
    data: dict[str, Any]
    pause_after: bool = False

    @property
    def delta_text(self) -> str:
        delta = self.data.get("delta", {})
        return delta.get("text") or delta.get("partial_json") or ""

    def frame(self) -> bytes:
        return (
            f"event: {self.name}\ndata: {json.dumps(self.data, separators=(',', ':'))}\n\n".encode()
        )


def estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


def text_chunks(text: str, min_chunks: int = 1) -> list[str]:
    """A chunk every few words; evenly sliced characters if that gives too few."""
    words = re.findall(r"\S+\s*", text) or [text]
    chunks = [
        "".join(words[i : i + WORDS_PER_CHUNK]) for i in range(0, len(words), WORDS_PER_CHUNK)
    ]
    if len(chunks) >= min_chunks or len(text) < min_chunks:
        return chunks
    size = len(text) / min_chunks
    return [text[round(i * size) : round((i + 1) * size)] for i in range(min_chunks)]


def json_chunks(raw: str) -> list[str]:
    size = max(1, math.ceil(len(raw) / JSON_CHUNKS))
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def output_tokens(reply: Reply) -> int:
    tool_text = reply.tool_use.json_text() if reply.tool_use else ""
    return estimate_tokens(reply.thinking + reply.text + tool_text)


def message_json(reply: Reply, *, message_id: str, model: str, input_tokens: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.thinking:
        signature = "" if reply.thinking_cut else sign(reply.thinking)
        content.append({"type": "thinking", "thinking": reply.thinking, "signature": signature})
    if not reply.thinking_cut:
        content.append({"type": "text", "text": reply.text})
    if reply.tool_use is not None:
        use = reply.tool_use
        # Deliberately broken input goes out as the raw (non-object) string.
        tool_input: Any = use.input if use.raw_json is None else use.raw_json
        content.append({"type": "tool_use", "id": use.id, "name": use.name, "input": tool_input})
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": _usage(input_tokens, output_tokens(reply)),
    }


def _usage(input_tokens: int, output: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output,
    }


def stream_events(
    reply: Reply, *, message_id: str, model: str, input_tokens: int, pacing: Pacing
) -> list[Event]:
    start = message_json(reply, message_id=message_id, model=model, input_tokens=input_tokens)
    start.update(content=[], stop_reason=None, usage=_usage(input_tokens, 1))
    events = [Event("message_start", {"type": "message_start", "message": start})]
    index = 0
    if reply.thinking:
        events += _thinking_block_events(index, reply.thinking, signed=not reply.thinking_cut)
        index += 1
    if not reply.thinking_cut:
        events += _text_block_events(index, reply.text, pacing)
    if reply.tool_use is not None:
        events += _tool_block_events(index + 1, reply)
    events.append(
        Event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens(reply)},
            },
        )
    )
    events.append(Event("message_stop", {"type": "message_stop"}))
    return events


def _thinking_block_events(index: int, thinking: str, *, signed: bool = True) -> list[Event]:
    """As the real API streams thinking: the text in deltas, then its signature
    (none when the reply is cut at max_tokens while thinking)."""
    block = {"type": "thinking", "thinking": "", "signature": ""}
    events = [
        Event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        )
    ]
    deltas = [{"type": "thinking_delta", "thinking": chunk} for chunk in text_chunks(thinking)]
    if signed:
        deltas.append({"type": "signature_delta", "signature": sign(thinking)})
    for delta in deltas:
        data = {"type": "content_block_delta", "index": index, "delta": delta}
        events.append(Event("content_block_delta", data))
    events.append(Event("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def _text_block_events(index: int, text: str, pacing: Pacing) -> list[Event]:
    events = [
        Event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        # The real API sends a ping early in every stream.
        Event("ping", {"type": "ping"}),
    ]
    for chunk in text_chunks(text, pacing.min_text_chunks):
        delta = {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": chunk},
        }
        events.append(Event("content_block_delta", delta, pause_after=True))
    events.append(Event("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def _tool_block_events(index: int, reply: Reply) -> list[Event]:
    use = reply.tool_use
    assert use is not None
    block = {"type": "tool_use", "id": use.id, "name": use.name, "input": {}}
    events = [
        Event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        )
    ]
    # Like the real API: an empty first delta, then the JSON in pieces.
    for chunk in ["", *json_chunks(use.json_text())]:
        delta = {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "input_json_delta", "partial_json": chunk},
        }
        events.append(Event("content_block_delta", delta, pause_after=bool(chunk)))
    events.append(Event("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def total_delay(events: list[Event], pacing: Pacing) -> float:
    return pacing.ttft + sum(pacing.after(e) for e in events)
