"""Enqueueing `advance`: a trigger only (the task re-reads durable state).

A trigger that cannot be sent (the broker is down) is logged, not raised:
the state it points at is already committed, and the sweeper re-enqueues
every runnable session without a live owner once the broker is back. Raising
here would tell a caller that its committed change failed.

Every trigger leaves a mark in Redis (a key with a short TTL) until its task
starts: the sweeper leaves a marked session alone, so a burst whose triggers
wait a few seconds in the queue is not sent a duplicate of each. A trigger
that is lost (Redis restarted, or prefetched by a worker that then died) is
resent once its mark expires.
"""

from __future__ import annotations

import logging

import redis
from celery import current_app
from django.db import transaction

from agents.runtime.live import redis_client

log = logging.getLogger(__name__)

# How long a trigger may stay unstarted before the sweeper sends another.
# Short on purpose: it bounds how long a lost trigger goes unnoticed.
MARK_TTL_S = 10

# Redis priorities, 0 served first (CELERY_TASK_DEFAULT_PRIORITY is routine).
URGENT = 0
ADVANCE = "agents.advance_session"


def enqueue(session_id: int, countdown: float | None = None, *, urgent: bool = False) -> None:
    """Trigger `advance` for a session. `urgent` jumps the routine backlog:
    for a session whose worker died mid-turn (its recovery bound must not
    depend on how much routine work is queued)."""
    # Marked before the send: the task clears the mark when it starts, which
    # may be before a mark set after the send would land.
    try:
        redis_client().set(mark_key(session_id), 1, ex=MARK_TTL_S + int(countdown or 0))
    except redis.RedisError:
        pass  # unmarked: the sweeper may send a duplicate, which is harmless
    send(session_id, countdown, urgent=urgent)


def send(session_id: int, countdown: float | None = None, *, urgent: bool = False) -> None:
    """The trigger itself, without its mark (the sweeper marks its own).
    Sent by the task's name (agents/tasks.py), which the runtime does not
    import."""
    options = {"priority": URGENT} if urgent else {}
    try:
        current_app.send_task(ADVANCE, (session_id,), countdown=countdown, retry=False, **options)
    except Exception:  # kombu/redis errors: the sweeper is the backstop
        clear_mark(session_id)
        log.warning(
            "could not enqueue advance for session %s; the sweeper will", session_id, exc_info=True
        )


def mark_key(session_id: int) -> str:
    return f"agentdesk:trigger:{session_id}"


def mark_unmarked(session_ids: list[int]) -> list[int]:
    """Mark those of `session_ids` that no trigger is on its way to (one
    round trip), and return them: the sessions to send a trigger."""
    if not session_ids:
        return []
    try:
        pipe = redis_client().pipeline(transaction=False)
        for session_id in session_ids:
            pipe.set(mark_key(session_id), 1, nx=True, ex=MARK_TTL_S)
        fresh = pipe.execute()
    except redis.RedisError:
        return list(session_ids)  # no mark store: a duplicate trigger is harmless
    return [sid for sid, new in zip(session_ids, fresh, strict=True) if new]


def clear_mark(session_id: int) -> None:
    """The trigger arrived (its task starts)."""
    try:
        redis_client().delete(mark_key(session_id))
    except redis.RedisError:
        pass


def enqueue_on_commit(session_id: int) -> None:
    """Enqueue once the caller's transaction commits (never for a rollback)."""
    transaction.on_commit(lambda: enqueue(session_id))
