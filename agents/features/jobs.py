"""Jobs: long-running or bulk work run as queued Celery work, not in a turn.

A Job row is the source of truth; the Celery task `agents.run_job` is only a
trigger (like `advance`). One attempt:

1. claim (short transaction, the job row locked with SKIP LOCKED): queued or
   failed-and-due -> running, attempts + 1;
2. run the kind's handler outside any long transaction: each item is done in
   its own short transaction that also records the item as done, so a
   retried attempt skips what an earlier one finished (idempotent per item);
3. record: succeeded; or failed with a backoff (the next attempt is enqueued
   with that countdown); or dead once attempts reach max_attempts. Dead jobs
   wait for a person: the desk's retry puts one back in the queue.

Beat (`jobs_sweep`) re-enqueues jobs whose trigger was lost (queued or due
for a retry but nobody on them) and gives up on attempts whose worker died
(running, not touched for AGENTDESK_JOB_STALE_S): Redis is a delivery path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from agents.backoff import backoff_s
from agents.errors import Conflict, Invalid
from agents.models import Job, Session, Turn
from agents.services import message_post

log = logging.getLogger(__name__)
J = Job.Status
OPEN_JOB = [J.QUEUED, J.RUNNING, J.FAILED]


class JobItemFailed(Exception):
    """One item of a job could not be done; the attempt fails."""


# --- Starting and retrying -------------------------------------------------------------


def job_start(
    *, kind: str, arguments: dict[str, Any], user: AbstractBaseUser | None = None
) -> tuple[Job, bool]:
    """Queue a job; returns (job, created). The same kind and arguments while
    one is still open return that one (a double click queues one job)."""
    if kind not in HANDLERS:
        raise Invalid(f"unknown job kind {kind!r}")
    with transaction.atomic():
        # Serialize starts of the same kind: without it two clicks could each
        # see no open job and both insert one.
        _advisory_xact_lock(f"job:{kind}")
        open_job = (
            Job.objects.filter(kind=kind, arguments=arguments, status__in=OPEN_JOB)
            .order_by("id")
            .first()
        )
        if open_job is not None:
            return open_job, False
        job = Job.objects.create(
            kind=kind,
            arguments=arguments,
            created_by=user if user is not None and user.is_authenticated else None,
            max_attempts=settings.AGENTDESK_JOB_MAX_ATTEMPTS,
        )
        _enqueue_on_commit(job.id)
    return job, True


def job_retry(*, job_id: int, user: AbstractBaseUser) -> Job:
    """A person sends a dead (or failed-and-waiting) job back to the queue,
    with a fresh set of attempts. A second click finds it queued: 409."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status not in (J.DEAD, J.FAILED):
            raise Conflict(
                f"this job is {job.status}; only a dead job is retried", current=job.status
            )
        job.status, job.next_attempt_at = J.QUEUED, None
        job.max_attempts = job.attempts + settings.AGENTDESK_JOB_MAX_ATTEMPTS
        job.last_error = f"{job.last_error}\n(retried by {user.get_username()})".strip()
        job.save(update_fields=["status", "next_attempt_at", "max_attempts", "last_error"])
        _enqueue_on_commit(job.id)
    return job


# --- Running ---------------------------------------------------------------------------


def job_run(*, job_id: int) -> str | None:
    """One attempt of a job (what the task calls); returns the status it ended
    in, or None when there was nothing to do (a duplicate trigger)."""
    job = _claim(job_id)
    if job is None:
        return None
    try:
        HANDLERS[job.kind](job)
    except Exception as exc:  # the attempt failed, whatever the reason: record it
        if not isinstance(exc, JobItemFailed):
            log.exception("job %s (%s) attempt %s raised", job.id, job.kind, job.attempts)
        return _record_failure(job, f"{type(exc).__name__}: {exc}")
    Job.objects.filter(pk=job.id, status=J.RUNNING).update(
        status=J.SUCCEEDED, finished_at=timezone.now(), updated_at=timezone.now()
    )
    return J.SUCCEEDED


def _claim(job_id: int) -> Job | None:
    now = timezone.now()
    with transaction.atomic():
        job = (
            Job.objects.select_for_update(skip_locked=True)
            .filter(pk=job_id)
            .filter(Q(status=J.QUEUED) | Q(status=J.FAILED, next_attempt_at__lte=now))
            .first()
        )
        if job is None:
            return None
        job.status, job.attempts, job.next_attempt_at = J.RUNNING, job.attempts + 1, None
        job.started_at = job.started_at or now
        job.save(
            update_fields=["status", "attempts", "next_attempt_at", "started_at", "updated_at"]
        )
    return job


def _record_failure(job: Job, error: str) -> str:
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.id)
        if job.status != J.RUNNING:
            return job.status
        job.last_error = error[:4000]
        if job.attempts >= job.max_attempts:
            job.status, job.finished_at = J.DEAD, timezone.now()
            log.warning("job %s (%s) is dead after %s attempts", job.id, job.kind, job.attempts)
        else:
            delay = job_backoff_s(job.attempts)
            job.status, job.next_attempt_at = J.FAILED, timezone.now() + timedelta(seconds=delay)
            transaction.on_commit(lambda: _enqueue(job.id, countdown=delay))
        job.save()
    return job.status


def job_backoff_s(attempt: int) -> float:
    return backoff_s(
        attempt, base=settings.AGENTDESK_JOB_BACKOFF_S, cap=settings.AGENTDESK_JOB_BACKOFF_MAX_S
    )


def jobs_sweep() -> list[int]:
    """Re-enqueue jobs nobody is on; fail attempts whose worker died."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.AGENTDESK_JOB_STALE_S)
    for job in Job.objects.filter(status=J.RUNNING, updated_at__lt=stale).only("id"):
        _record_failure(job, "the worker running this attempt stopped (no progress)")
    quiet = now - timedelta(seconds=settings.AGENTDESK_JOB_STALE_S / 4)
    due = Job.objects.filter(
        Q(status=J.QUEUED, updated_at__lt=quiet) | Q(status=J.FAILED, next_attempt_at__lte=now)
    ).values_list("id", flat=True)[:500]
    ids = list(due)
    for job_id in ids:
        _enqueue(job_id)
    return ids


# --- Kinds -----------------------------------------------------------------------------


def _retriage_customer(job: Job) -> None:
    """Post a re-triage message into every open ticket session of a customer,
    once per session (a retried attempt skips the sessions already done)."""
    customer = str(job.arguments.get("customer", ""))
    if not customer:
        raise JobItemFailed("no customer given")
    rows = (
        Session.objects.filter(customer=customer, key__startswith="ticket:")
        .order_by("id")
        .values_list("id", "key", "context")
    )
    # In Python: a JSON key that is absent would make an SQL NOT IN drop the row.
    sessions = [(i, k) for i, k, c in rows if (c or {}).get("status") not in ("closed", "solved")]
    Job.objects.filter(pk=job.id).update(items_total=len(sessions), updated_at=timezone.now())
    reason = str(job.arguments.get("reason", "")).strip()
    text = "Please re-triage this ticket: check its classification and priority again."
    if reason:
        text += f"\n\nWhy: {reason}"
    failures = []
    for session_id, key in sessions:
        try:
            _item(job, str(session_id), lambda key=key: _post_retriage(key, text, job.id))
        except Conflict as exc:
            failures.append(f"{key}: {exc.message}")
    if failures:
        raise JobItemFailed(
            f"{len(failures)} of {len(sessions)} failed: " + "; ".join(failures)[:3000]
        )


def _post_retriage(key: str, text: str, job_id: int) -> None:
    message_post(key=key, text=f"{text}\n\n(job {job_id})", trigger=Turn.Trigger.API)


def _item(job: Job, item_key: str, do: Callable[[], None]) -> None:
    """Do one item at most once per job: under the job row's lock, skip it if
    done, else do it and record it done in the same transaction."""
    with transaction.atomic():
        row = Job.objects.select_for_update().get(pk=job.id)
        if item_key in row.done_keys:
            return
        do()
        row.done_keys = [*row.done_keys, item_key]
        row.items_done = len(row.done_keys)
        row.save(update_fields=["done_keys", "items_done", "updated_at"])


HANDLERS: dict[str, Callable[[Job], None]] = {
    "retriage_customer": _retriage_customer,
}


# --- Plumbing --------------------------------------------------------------------------


def _advisory_xact_lock(name: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])


def _enqueue(job_id: int, countdown: float | None = None) -> None:
    try:  # by name: agents/tasks.py imports this module
        current_app.send_task("agents.run_job", (job_id,), countdown=countdown, retry=False)
    except Exception:  # the broker is down: jobs_sweep re-enqueues from Postgres
        log.warning("could not enqueue job %s; the sweep will", job_id, exc_info=True)


def _enqueue_on_commit(job_id: int) -> None:
    transaction.on_commit(lambda: _enqueue(job_id))
