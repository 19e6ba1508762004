"""Who is looking at a session or an approval card right now.

Each open tab is one *viewer* (a random id per socket). A viewer says what
it is looking at (topics: "session:12", "approval:7") when it connects and
again every AGENTDESK_PRESENCE_HEARTBEAT_S (5 s); the consumer records it
in Redis, one sorted set per topic whose scores are expiry times:

    agentdesk:presence:<topic>     ZSET    viewer -> expires at (unix s)
    agentdesk:presence:v:<viewer>  STRING  {"user": id, "name": ...}, expires

Several Daphne processes share these keys, so a viewer on another process
is seen. A closed tab is removed at once (the socket's disconnect); one
whose process died, or whose heartbeat stopped, drops out when its score
passes (AGENTDESK_PRESENCE_TTL_S, 15 s). Every change is announced on the
topic's channel-layer group, and each consumer re-reads its topics every
heartbeat anyway: the layer is at-most-once, so a lost announcement costs a
few seconds, no more. Nothing here is durable or trusted: it is a hint for
people ("bob is on this card too"), never a lock; decisions are checked
server-side.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import weakref
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from django.conf import settings

MAX_TOPICS = 20  # what one tab is on
MAX_WATCHED = 200  # what it shows viewers for (the inbox's cards)
TOPIC = re.compile(r"(session|approval):([1-9][0-9]{0,18})")
GROUP_PREFIX = "presence."


def heartbeat_s() -> float:
    return settings.AGENTDESK_PRESENCE_HEARTBEAT_S


def ttl_s() -> float:
    return settings.AGENTDESK_PRESENCE_TTL_S


def group(topic: str) -> str:
    return GROUP_PREFIX + topic.replace(":", ".")


def parse_topic(topic: str) -> tuple[str, int] | None:
    found = TOPIC.fullmatch(topic) if isinstance(topic, str) else None
    return (found.group(1), int(found.group(2))) if found else None


@dataclass(frozen=True)
class Viewer:
    id: str
    user_id: int
    name: str

    @property
    def initials(self) -> str:
        return initials(self.name)


def initials(name: str) -> str:
    """Two letters for an avatar: "Bob Stone" -> "BS", "carol" -> "CA"."""
    words = [w for w in re.split(r"[\s._@-]+", name) if w]
    if len(words) >= 2:
        return (words[0][0] + words[1][0]).upper()
    return (words[0][:2] if words else "?").upper()


def display_name(user: Any) -> str:
    return (user.get_full_name() or user.get_username())[:80]


def _prefix() -> str:
    # The stack's Redis db is in REDIS_URL already; the prefix keeps the keys
    # apart from the cache's and Celery's and says what they are.
    return "agentdesk:presence:"


# One client per event loop (Daphne has one; tests start a loop per test).
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = (
    weakref.WeakKeyDictionary()
)


def _redis() -> aioredis.Redis:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = aioredis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
    return client


async def here(viewer: Viewer, topics: list[str], *, gone: list[str] = ()) -> None:
    """Record that `viewer` looks at `topics` (for the next TTL), and no
    longer at `gone`."""
    ttl = ttl_s()
    prefix, until = _prefix(), time.time() + ttl
    pipe = _redis().pipeline(transaction=False)
    who = json.dumps({"user": viewer.user_id, "name": viewer.name})
    pipe.set(prefix + "v:" + viewer.id, who, ex=max(1, int(ttl * 2)))
    for topic in topics:
        pipe.zadd(prefix + topic, {viewer.id: until})
        pipe.expire(prefix + topic, max(1, int(ttl * 4)))  # an abandoned set goes too
    for topic in gone:
        pipe.zrem(prefix + topic, viewer.id)
    await pipe.execute()


async def leave(viewer_id: str, topics: list[str]) -> None:
    prefix = _prefix()
    pipe = _redis().pipeline(transaction=False)
    for topic in topics:
        pipe.zrem(prefix + topic, viewer_id)
    pipe.delete(prefix + "v:" + viewer_id)
    await pipe.execute()


async def viewers(topics: list[str]) -> dict[str, list[dict[str, Any]]]:
    """topic -> the people viewing it now (one entry per person, however
    many tabs), by name."""
    if not topics:
        return {}
    prefix, now = _prefix(), time.time()
    client = _redis()
    pipe = client.pipeline(transaction=False)
    for topic in topics:
        pipe.zremrangebyscore(prefix + topic, "-inf", now)
        pipe.zrange(prefix + topic, 0, -1)
    answers = await pipe.execute()
    ids_by_topic = {t: [i.decode() for i in answers[2 * n + 1]] for n, t in enumerate(topics)}
    every = sorted({i for ids in ids_by_topic.values() for i in ids})
    found = await client.mget([prefix + "v:" + i for i in every]) if every else []
    names = dict(zip(every, found, strict=True))
    out: dict[str, list[dict[str, Any]]] = {}
    for topic, ids in ids_by_topic.items():
        people: dict[int, dict[str, Any]] = {}
        for viewer_id in ids:
            raw = names.get(viewer_id)
            if raw is None:
                continue
            who = json.loads(raw)
            entry = people.setdefault(
                who["user"], {"user": who["user"], "name": who["name"], "tabs": 0}
            )
            entry["tabs"] += 1
        ordered = sorted(people.values(), key=lambda p: (p["name"].lower(), p["user"]))
        out[topic] = [{**p, "initials": initials(p["name"])} for p in ordered]
    return out
