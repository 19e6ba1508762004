"""Per-token rate limit on writes: a fixed window counted in Redis.

A fixed window (INCR + EXPIRE on `<prefix>:<token>:<window>`) is one round
trip and lets at most twice the limit through across a window boundary,
which is all a guard against a runaway client needs. Redis being away lets
the request through: the limit protects the runtime, it is not a gate of
correctness.
"""

from __future__ import annotations

import functools
import logging
import time

import redis
from django.conf import settings

log = logging.getLogger(__name__)


@functools.cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)


def retry_after(key: str) -> int:
    """0 when the request may go ahead (and it is counted); else the seconds
    until the window ends, for Retry-After."""
    limit = settings.AGENTDESK_API_RATE_LIMIT
    window = settings.AGENTDESK_API_RATE_WINDOW_S
    if limit <= 0:
        return 0
    now = time.time()
    slot = int(now // window)
    name = f"agentdesk:ratelimit:{key}:{slot}"
    try:
        pipe = _client(settings.REDIS_URL).pipeline()
        pipe.incr(name)
        pipe.expire(name, window + 1)
        count = pipe.execute()[0]
    except redis.RedisError:
        log.warning("rate limit: Redis unavailable; letting the request through")
        return 0
    if count <= limit:
        return 0
    return max(1, int((slot + 1) * window - now + 0.999))
