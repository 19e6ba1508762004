"""Enqueueing `advance`: a trigger only (the task re-reads durable state).

A trigger that cannot be sent (the broker is down) is logged, not raised:
the state it points at is already committed, and the sweeper re-enqueues
every runnable session without a live owner once the broker is back. Raising
here would tell a caller that its committed change failed.
"""

from __future__ import annotations

import logging

from django.db import transaction

log = logging.getLogger(__name__)


def enqueue(session_id: int, countdown: float | None = None) -> None:
    from agents.tasks import advance_session

    try:
        advance_session.apply_async((session_id,), countdown=countdown, retry=False)
    except Exception:  # kombu/redis errors: the sweeper is the backstop
        log.warning(
            "could not enqueue advance for session %s; the sweeper will", session_id, exc_info=True
        )


def enqueue_on_commit(session_id: int) -> None:
    """Enqueue once the caller's transaction commits (never for a rollback)."""
    transaction.on_commit(lambda: enqueue(session_id))
