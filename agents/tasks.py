"""Celery tasks: thin triggers around runtime and service calls.

Time limits, acks_late and prefetch live in settings (CELERY_*).
"""

from __future__ import annotations

from celery import shared_task

from agents.runtime import engine, sweeper


@shared_task(name="agents.advance_session", acks_late=True)
def advance_session(session_id: int) -> None:
    sweeper.clear_marker(session_id)
    engine.advance(session_id)


@shared_task(name="agents.sweep_sessions", ignore_result=True)
def sweep_sessions() -> None:
    sweeper.sweep()
