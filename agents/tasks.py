"""Celery tasks: thin triggers around runtime and service calls.

Time limits, acks_late and prefetch live in settings (CELERY_*).
"""

from __future__ import annotations

from celery import shared_task

from agents.features.followups import followups_fire_due
from agents.features.jobs import job_run, jobs_sweep
from agents.features.retention import sessions_prune
from agents.runtime import engine, sweeper


@shared_task(name="agents.advance_session", acks_late=True)
def advance_session(session_id: int) -> None:
    engine.advance(session_id)


@shared_task(name="agents.sweep_sessions", ignore_result=True)
def sweep_sessions() -> None:
    sweeper.sweep()


@shared_task(name="agents.fire_followups", ignore_result=True)
def fire_followups() -> None:
    followups_fire_due()


@shared_task(name="agents.run_job", acks_late=True, ignore_result=True)
def run_job(job_id: int) -> None:
    job_run(job_id=job_id)


@shared_task(name="agents.sweep_jobs", ignore_result=True)
def sweep_jobs() -> None:
    jobs_sweep()


@shared_task(name="agents.prune_sessions", ignore_result=True)
def prune_sessions() -> None:
    sessions_prune()
