"""What a desk WebSocket accepts from its client: bounded, typed, paced.

A frame the consumers did not expect (not JSON, binary, a wrong type, 1 MiB
of text) ended the connection with 1011 from an unhandled error, and an
unknown action was silently ignored. Now every frame is checked in this
order, each step before any work is done on it:

1. pace: a token bucket per connection (FRAME_BURST frames, refilled at
   FRAME_RATE a second); a flood closes that socket with CLOSE_POLICY (4008:
   1008, policy violation, in the range a server may send: Daphne's
   WebSocket library refuses to send 1008, 1009 or 1011 and logs a
   traceback instead) rather than queueing behind it; other sockets are
   untouched;
2. kind and size: binary frames get an error frame; text over
   MAX_FRAME_CHARS closes with CLOSE_TOO_BIG (4009) before it is parsed (Daphne's
   own --websocket_max_message_size, 1 MiB by default, ends the connection
   for bigger ones at the protocol level);
3. JSON, an object, with a known `type` and fields of the right types; any
   problem is answered with {"type": "error", "error": why} and the
   connection stays open.

The client (static/js/desk.js) sends a hello when it connects, a sync every
15 s and a stream request now and then; static/js/presence.js a "here" every
5 s and when what the tab shows changes: far below these limits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from dashboard.presence import MAX_TOPICS, MAX_WATCHED, parse_topic

# Close codes a server may send (1000, or 3000-4999): 40xx mirrors the
# standard 10xx a client library knows.
CLOSE_POLICY = 4008  # 1008 policy violation
CLOSE_TOO_BIG = 4009  # 1009 message too big
CLOSE_ERROR = 4011  # 1011 internal error
MAX_FRAME_CHARS = 16_384
FRAME_RATE = 5.0  # frames per second, sustained
FRAME_BURST = 20
MAX_SHOWN = 1000

Check = Callable[[Any], bool]


def _non_negative_int(value: Any) -> bool:
    return type(value) is int and 0 <= value <= 2**63 - 1


def _id_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) <= MAX_SHOWN
        and all(type(i) is int and 0 < i <= 2**63 - 1 for i in value)
    )


def _topics(most: int) -> Check:
    """What a tab looks at: "session:<id>" / "approval:<id>" (dashboard/presence.py)."""

    def check(value: Any) -> bool:
        return (
            isinstance(value, list)
            and len(value) <= most
            and all(parse_topic(t) is not None for t in value)
        )

    return check


# Per consumer: action -> {field: check}. Fields not listed are refused.
SESSION_ACTIONS: dict[str, dict[str, Check]] = {
    "hello": {"after": _non_negative_int},
    "sync": {},
    "stream": {},
}
APPROVALS_ACTIONS: dict[str, dict[str, Check]] = {"hello": {"shown": _id_list}, "sync": {}}
DESK_ACTIONS: dict[str, dict[str, Check]] = {"sync": {}}
PRESENCE_ACTIONS: dict[str, dict[str, Check]] = {
    "here": {"topics": _topics(MAX_TOPICS), "watch": _topics(MAX_WATCHED)}
}


class Bucket:
    def __init__(self, rate: float = FRAME_RATE, burst: int = FRAME_BURST) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = float(burst), time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(text: str, actions: dict[str, dict[str, Check]]) -> tuple[dict[str, Any] | None, str]:
    """(message, "") or (None, why it is refused). `text` is already known
    to be at most MAX_FRAME_CHARS long."""
    try:
        content = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None, "a frame must be a JSON object"
    if not isinstance(content, dict):
        return None, "a frame must be a JSON object"
    kind = content.get("type")
    if kind is None:
        return None, 'a frame needs a "type"'
    if not isinstance(kind, str) or kind not in actions:
        shown = kind if isinstance(kind, str) else type(kind).__name__
        known = ", ".join(sorted(actions))
        return None, f"unknown action {shown[:40]!r}; this socket takes: {known}"
    fields = actions[kind]
    for key, value in content.items():
        if key == "type":
            continue
        check = fields.get(key)
        if check is None:
            return None, f"{kind}: unexpected field {str(key)[:40]!r}"
        if not check(value):
            return None, f"{kind}: {key} has the wrong type or is out of range"
    return content, ""
