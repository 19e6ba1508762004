"""Re-enqueue sessions that have runnable work and no live owner.

Redis is a delivery path, not the source of truth: a message can be lost
(Redis restarted) or stuck on a dead worker until its visibility timeout.
Postgres knows which sessions have work (status `running`) and, through the
worker processes' liveness locks (runtime/ownership.py), which have a live
owner: one query finds every session of a dead process at once. The recovery
bound after a worker dies is about AGENTDESK_SWEEP_GRACE_S + the sweep
interval.

A Redis marker (SET NX with a TTL) keeps a long queue from being flooded
with one duplicate per sweep; the task clears it when it starts.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db import connection

from agents.runtime import dispatch
from agents.runtime.live import _redis
from agents.runtime.ownership import LIVE_PROCESSES_SQL

log = logging.getLogger(__name__)
# Short on purpose: if the trigger the marker stands for is never consumed
# (prefetched by a worker that then died), the session is swept again after
# this long rather than after the broker's visibility timeout.
MARKER_TTL_S = 10

# A session with work and an `owner` whose process holds no liveness lock was
# owned by a worker that died (every clean stop clears `owner`): urgent.
# One with no owner is waiting for its trigger, which is usually still in
# the queue; re-sending it is a backstop for a lost message, not urgent.
ORPHANS_SQL = f"""
    SELECT s.id, r.owner <> '' AS dead_owner FROM agents_session s
    JOIN agents_sessionruntime r ON r.session_id = s.id
    WHERE s.status = 'running'
      AND r.updated_at < now() - make_interval(secs => %s)
      AND (r.wake_at IS NULL OR r.wake_at <= now())
      AND (r.owner = '' OR r.owner_process NOT IN ({LIVE_PROCESSES_SQL}))
    ORDER BY r.owner <> '' DESC, r.updated_at
    LIMIT 500
"""  # noqa: S608 (a constant, no input)


def marker_key(session_id: int) -> str:
    return f"agentdesk:swept:{session_id}"


def orphaned_sessions() -> list[tuple[int, bool]]:
    """(session id, whether its owner died) for runnable sessions nobody holds."""
    with connection.cursor() as cursor:
        cursor.execute(ORPHANS_SQL, [settings.AGENTDESK_SWEEP_GRACE_S])
        return [(row[0], row[1]) for row in cursor.fetchall()]


def sweep() -> list[int]:
    enqueued = []
    for session_id, dead_owner in orphaned_sessions():
        try:
            fresh = _redis().set(marker_key(session_id), 1, nx=True, ex=MARKER_TTL_S)
        except redis.RedisError:
            fresh = True  # no marker store: a duplicate trigger is harmless
        if fresh:
            dispatch.enqueue(session_id, urgent=dead_owner)
            enqueued.append(session_id)
    if enqueued:
        log.info("sweeper re-enqueued %d session(s): %s", len(enqueued), enqueued[:20])
    return enqueued


def clear_marker(session_id: int) -> None:
    try:
        _redis().delete(marker_key(session_id))
    except redis.RedisError:
        pass
