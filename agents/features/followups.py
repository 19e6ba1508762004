"""Follow-ups: "check back in 24 hours if the customer has not replied".

A follow-up is a durable row (agents.models.FollowUp), not a Celery countdown:
Redis is a delivery path, and a countdown lives in one worker's memory. Beat
runs `followups_fire_due` every few seconds; it claims each due row with
FOR UPDATE SKIP LOCKED and, in the same transaction, posts the follow-up's
message into the session (services.message_post, the code path every input
takes) and marks the row fired. So:

- two beat processes (or two workers running the task at once) never fire a
  row twice: the second skips the locked row, or finds it fired;
- a restart or a redeploy never loses one: until that commit it is pending,
  and the next tick after the restart finds it due.

Lock order is the runtime's (agents/runtime/store/lock.py::lock_session): the
session lock first, then rows below it. The firing path takes the follow-up
row first (SKIP LOCKED), so it must not wait on the session lock while
holding it (a customer reply holds the session lock and then cancels this
session's follow-ups): it takes the session lock with SKIP LOCKED too, and a
busy session is simply tried again on the next tick.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents import events
from agents.errors import Conflict, Invalid, ServiceError
from agents.events import EventSpec
from agents.models import FollowUp, Session, SessionRuntime, Turn
from agents.runtime import store
from agents.services import message_post

log = logging.getLogger(__name__)
F = FollowUp.Status

MAX_DELAY = timedelta(days=90)
RETRY_REFUSED_S = 60  # a session that refused the message (reject policy) is tried again


def followup_schedule(
    *,
    session_key: str,
    key: str,
    note: str,
    due_at: datetime,
    cancel_on_reply: bool = True,
    created_by: str = "agent",
) -> tuple[FollowUp, bool]:
    """Schedule a follow-up once per `key`; returns (row, created).

    The same key again (a re-sent tool call) returns the first row unchanged.
    """
    now = timezone.now()
    if due_at - now > MAX_DELAY:
        raise Invalid("a follow-up can be at most 90 days ahead")
    existing = FollowUp.objects.filter(key=key).first()
    if existing is not None:
        return existing, False
    session_id = Session.objects.values_list("id", flat=True).get(key=session_key)
    try:
        with transaction.atomic():
            runtime = store.lock_session(session_id)
            row = FollowUp.objects.create(
                session_id=session_id,
                key=key,
                note=note,
                due_at=max(due_at, now),
                cancel_on_reply=cancel_on_reply,
                created_by=created_by,
            )
            data = {"followup_id": row.id, "due_at": row.due_at.isoformat(), "note": note[:500]}
            data["cancel_on_reply"] = cancel_on_reply
            spec = EventSpec("followup.scheduled", data, runtime.current_turn_id, created_by)
            events.append(runtime, [spec])
    except IntegrityError:  # the same key, scheduled concurrently: that one counts
        return FollowUp.objects.get(key=key), False
    return row, True


def followups_fire_due(*, now: datetime | None = None, limit: int = 200) -> int:
    """Fire the follow-ups that are due; returns how many this call fired."""
    fired, skipped = 0, []
    for _ in range(limit):
        outcome = _fire_one(now or timezone.now(), skipped)
        if outcome is None:
            break
        fired += outcome
    return fired


def _fire_one(now: datetime, skipped: list[int]) -> int | None:
    """Claim and fire one due follow-up: 1 fired, 0 passed over, None: none due."""
    with transaction.atomic():
        row = (
            FollowUp.objects.select_for_update(skip_locked=True)
            .filter(status=F.PENDING, due_at__lte=now)
            .exclude(pk__in=skipped)
            .order_by("due_at", "id")
            .first()
        )
        if row is None:
            return None
        # The session lock without waiting: we hold the follow-up row, and a
        # customer reply takes the session lock and then wants this row.
        runtime = (
            SessionRuntime.objects.select_for_update(no_key=True, skip_locked=True)
            .select_related("session")
            .filter(pk=row.session_id)
            .first()
        )
        if runtime is None:
            skipped.append(row.id)  # busy this instant; the next tick retries
            return 0
        try:
            with transaction.atomic():
                turn = _post(row, runtime)
        except ServiceError as exc:  # e.g. the session rejects messages mid-turn
            row.attempts += 1
            row.last_error = exc.message[:2000]
            row.due_at = now + timedelta(seconds=RETRY_REFUSED_S)
            row.save(update_fields=["attempts", "last_error", "due_at"])
            skipped.append(row.id)
            return 0
        runtime = store.lock_session(row.session_id)  # held already; fresh last_seq
        row.status, row.fired_at, row.fired_turn_id = F.FIRED, timezone.now(), turn.id
        row.save(update_fields=["status", "fired_at", "fired_turn_id"])
        data = {"followup_id": row.id, "turn_number": turn.number}
        events.append(runtime, [EventSpec("followup.fired", data, turn.id, "beat")])
    log.info("follow-up %s fired into session %s (turn %s)", row.id, row.session_id, turn.number)
    return 1


def _post(row: FollowUp, runtime: SessionRuntime) -> Turn:
    scheduled = timezone.localtime(row.created_at).strftime("%Y-%m-%d %H:%M %Z")
    text = f"Scheduled follow-up (set {scheduled}): {row.note}"
    return message_post(key=runtime.session.key, text=text, trigger=Turn.Trigger.SCHEDULED)


def followups_cancel_on_reply(runtime: SessionRuntime, specs: list[EventSpec]) -> int:
    """A customer replied: cancel the session's pending follow-ups that asked
    for it. The caller holds the session lock and appends `specs`."""
    now = timezone.now()
    rows = list(
        FollowUp.objects.select_for_update()
        .filter(session_id=runtime.session_id, status=F.PENDING, cancel_on_reply=True)
        .order_by("id")
    )
    for row in rows:
        row.status, row.canceled_at = F.CANCELED, now
        row.canceled_by, row.cancel_reason = "customer", "The customer replied."
        row.save(update_fields=["status", "canceled_at", "canceled_by", "cancel_reason"])
        data = {"followup_id": row.id, "reason": row.cancel_reason}
        specs.append(EventSpec("followup.canceled", data, None, "customer"))
    return len(rows)


def followup_cancel(*, followup_id: int, user: AbstractBaseUser, reason: str = "") -> FollowUp:
    """A person cancels a pending follow-up. A second click finds it canceled
    (409 with the current state); one that fired meanwhile is a 409 too."""
    session_id = FollowUp.objects.values_list("session_id", flat=True).get(pk=followup_id)
    with transaction.atomic():
        runtime = store.lock_session(session_id)  # lock order: session, then the row
        row = FollowUp.objects.select_for_update().get(pk=followup_id)
        if row.status != F.PENDING:
            raise Conflict(f"this follow-up was already {row.status}", current=row.status)
        who = user.get_username()
        row.status, row.canceled_at, row.canceled_by = F.CANCELED, timezone.now(), who
        row.cancel_reason = reason.strip()[:300] or f"Canceled by {who}."
        row.save(update_fields=["status", "canceled_at", "canceled_by", "cancel_reason"])
        data = {"followup_id": row.id, "reason": row.cancel_reason}
        events.append(runtime, [EventSpec("followup.canceled", data, None, who)])
    return row
