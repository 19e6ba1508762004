"""How many event streams a user and a token may hold open at once.

Each open stream is a lease in two Redis sorted sets (the user's and the
token's), scored by when it lapses. Taking one is one Lua call: drop the
lapsed leases, count, add if both counts are under their limit. A stream
gives its lease back when its response closes; a Daphne that dies
mid-stream leaves its leases to lapse after the longest a stream lasts.
Redis being away lets the stream through, as the write rate limit does
(api/ratelimit.py): the cap guards shared resources, it is not a gate of
correctness.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass

import redis
from django.conf import settings

from api.ratelimit import _client
from api.tokens import Principal

log = logging.getLogger(__name__)

# KEYS: user set, token set. ARGV: now, lapses at, member, user limit, token limit.
# Answers 0 (taken), 1 (the user is at the limit), 2 (the token is).
_TAKE = """
for i = 1, 2 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', ARGV[1]) end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 1 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 2 end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], ARGV[2], ARGV[3])
  redis.call('EXPIREAT', KEYS[i], math.ceil(tonumber(ARGV[2])))
end
return 0
"""


@dataclass(frozen=True)
class Lease:
    keys: tuple[str, ...]
    member: str

    def release(self) -> None:
        if not self.keys:
            return
        try:
            pipe = _client(settings.REDIS_URL).pipeline()
            for key in self.keys:
                pipe.zrem(key, self.member)
            pipe.execute()
        except redis.RedisError:
            log.warning("stream cap: Redis unavailable; the lease lapses by itself")


@dataclass(frozen=True)
class Refused:
    scope: str  # "user" or "token"
    limit: int
    retry_after: int


def acquire(principal: Principal) -> Lease | Refused:
    user = f"agentdesk:streams:user:{principal.user.pk if principal.user else 'service'}"
    token = f"agentdesk:streams:{principal.rate_key}"
    per_user = settings.AGENTDESK_SSE_MAX_PER_USER
    per_token = settings.AGENTDESK_SSE_MAX_PER_TOKEN
    now = time.time()
    member = secrets.token_hex(8)
    try:
        taken = _client(settings.REDIS_URL).eval(
            _TAKE, 2, user, token, now, now + settings.AGENTDESK_SSE_MAX_S + 30, member,
            per_user, per_token,
        )  # fmt: skip
    except redis.RedisError:
        log.warning("stream cap: Redis unavailable; letting the stream through")
        return Lease((), member)
    if taken == 0:
        return Lease((user, token), member)
    # A stream ends within AGENTDESK_SSE_MAX_S; most end sooner.
    retry = max(1, min(30, int(settings.AGENTDESK_SSE_MAX_S)))
    if taken == 1:
        return Refused("user", per_user, retry)
    return Refused("token", per_token, retry)
