"""Model text as it streams: ephemeral, outside the event log.

Deltas are not events (they would flood the log); the recorded reply is.
While a reply streams, its text so far is kept in Redis (for a page loaded
mid-stream) and pushed to viewers in small batches. A reply that arrives in
one go publishes nothing here: its model.replied event carries it.
"""

from __future__ import annotations

import logging
import time
from functools import cache

import redis
from django.conf import settings

from agents import events
from agents.observability.outages import Outage

log = logging.getLogger(__name__)
FLUSH_S = 0.1
_unbuffered = Outage(log, "streamed text not buffered")
TTL_S = 3600


@cache
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def stream_key(session_id: int, turn_id: int) -> str:
    return f"agentdesk:stream:{session_id}:{turn_id}"


def partial_text(session_id: int, turn_id: int) -> str:
    try:
        raw = redis_client().get(stream_key(session_id, turn_id))
    except redis.RedisError:
        return ""
    return raw.decode() if raw else ""


class TextStream:
    def __init__(self, session_id: int, turn_id: int) -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        self.sent = 0  # characters already pushed
        self.buffer = ""
        # The clock starts with the first text, not with the request: a reply
        # that arrives in one go after a long time to first token is still
        # one go (nothing to show that model.replied will not).
        self.last_flush: float | None = None

    def push(self, text: str) -> None:
        self.buffer += text
        now = time.monotonic()
        if self.last_flush is None:
            self.last_flush = now
        elif now - self.last_flush >= FLUSH_S:
            self._flush()
            self.last_flush = now

    def close(self) -> None:
        if self.sent:  # only a reply that was shown while streaming
            self._flush()

    def discard(self) -> None:
        """Drop the text so far: the reply is recorded, or will be asked again."""
        if self.sent:
            try:
                redis_client().delete(stream_key(self.session_id, self.turn_id))
            except redis.RedisError:
                pass

    def _flush(self) -> None:
        if not self.buffer:
            return
        text, self.buffer = self.buffer, ""
        key = stream_key(self.session_id, self.turn_id)
        try:
            pipe = redis_client().pipeline()
            pipe.append(key, text.encode())
            pipe.expire(key, TTL_S)
            pipe.execute()
        except redis.RedisError:
            _unbuffered.failed()  # a page loaded mid-stream shows less until the reply is recorded
        else:
            _unbuffered.ok()
        delta = {"kind": "delta", "turn_id": self.turn_id, "offset": self.sent, "text": text}
        events.publish_delta(self.session_id, delta)
        self.sent += len(text)
