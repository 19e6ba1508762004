"""Enqueueing `advance`: a trigger only (the task re-reads durable state).

A trigger that cannot be sent (the broker is down) is logged, not raised:
the state it points at is already committed, and the sweeper re-enqueues
every runnable session without a live owner once the broker is back. Raising
here would tell a caller that its committed change failed.
"""

from __future__ import annotations

import logging

from celery import current_app
from django.db import transaction

log = logging.getLogger(__name__)

# Redis priorities, 0 served first (CELERY_TASK_DEFAULT_PRIORITY is routine).
URGENT = 0
ADVANCE = "agents.advance_session"


def enqueue(session_id: int, countdown: float | None = None, *, urgent: bool = False) -> None:
    """Trigger `advance` for a session. `urgent` jumps the routine backlog:
    for a session whose worker died mid-turn (its recovery bound must not
    depend on how much routine work is queued). Sent by the task's name
    (agents/tasks.py), which the runtime does not import."""
    options = {"priority": URGENT} if urgent else {}
    try:
        current_app.send_task(ADVANCE, (session_id,), countdown=countdown, retry=False, **options)
    except Exception:  # kombu/redis errors: the sweeper is the backstop
        log.warning(
            "could not enqueue advance for session %s; the sweeper will", session_id, exc_info=True
        )


def enqueue_on_commit(session_id: int) -> None:
    """Enqueue once the caller's transaction commits (never for a rollback)."""
    transaction.on_commit(lambda: enqueue(session_id))
