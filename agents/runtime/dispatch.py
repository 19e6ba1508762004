"""Enqueueing `advance`: a trigger only (the task re-reads durable state)."""

from __future__ import annotations

from django.db import transaction


def enqueue(session_id: int, countdown: float | None = None) -> None:
    from agents.tasks import advance_session

    advance_session.apply_async((session_id,), countdown=countdown)


def enqueue_on_commit(session_id: int) -> None:
    """Enqueue once the caller's transaction commits (never for a rollback)."""
    transaction.on_commit(lambda: enqueue(session_id))
