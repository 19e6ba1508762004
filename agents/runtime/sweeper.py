"""Re-enqueue sessions that have runnable work and no live owner.

Redis is a delivery path, not the source of truth: a message can be lost
(Redis restarted) or stuck on a dead worker until its visibility timeout.
Postgres knows which sessions have work (status `running`) and, through the
worker processes' liveness locks (runtime/ownership.py), which have a live
owner: one query finds every session of a dead process at once. The recovery
bound after a worker dies is about AGENTDESK_SWEEP_GRACE_S + the sweep
interval.

A trigger on its way leaves a mark (runtime/dispatch.py): the sweeper sends
a session a trigger only when none is marked, so a long queue is not flooded
with one duplicate per sweep, and a burst's triggers waiting a few seconds in
the queue are not sent twice.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection

from agents.runtime import dispatch, ownership
from agents.runtime.ownership import LIVE_PROCESSES_SQL

log = logging.getLogger(__name__)
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


def orphaned_sessions() -> list[tuple[int, bool]]:
    """(session id, whether its owner died) for runnable sessions nobody holds."""
    with connection.cursor() as cursor:
        cursor.execute(ORPHANS_SQL, [settings.AGENTDESK_SWEEP_GRACE_S])
        return [(row[0], row[1]) for row in cursor.fetchall()]


def sweep() -> list[int]:
    orphans = orphaned_sessions()
    if any(dead for _, dead in orphans) and ownership.rejoining_now():
        # Every owner may have lost its lock with ours: give the live ones a
        # moment to take theirs again (ownership.rejoining; store.claim looks the same way).
        log.info("sweeper: owners' locks just went with ours; taking over nothing for now")
        orphans = [(session_id, dead) for session_id, dead in orphans if not dead]
    urgent = frozenset(session_id for session_id, dead_owner in orphans if dead_owner)
    enqueued = dispatch.mark_unmarked([session_id for session_id, _ in orphans], urgent)
    for session_id in enqueued:
        dispatch.enqueue(session_id, urgent=session_id in urgent)
    if enqueued:
        log.info("sweeper re-enqueued %d session(s): %s", len(enqueued), enqueued[:20])
    return enqueued
