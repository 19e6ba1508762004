"""Follow-ups: scheduled once per tool call, fired exactly once (two beats, two
workers, concurrent firing on the real database), not lost across a worker
restart, canceled by a customer reply."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.features.followups import followup_schedule, followups_fire_due
from agents.models import Event, FollowUp, Session, ToolCall, Turn
from agents.tools.base import ToolContext
from capabilities.connectors import SCHEDULE_FOLLOWUP
from tests.agents.helpers import at_once, deliver_ticket, wait_turn
from tests.dashboard import factories
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _due(session: Session, n: int, *, seconds: float = -1, cancel_on_reply=True) -> FollowUp:
    row, created = followup_schedule(
        session_key=session.key,
        key=f"{session.key}:toolu_{n}",
        note=f"Check whether the customer answered ({n}).",
        due_at=timezone.now() + timedelta(seconds=seconds),
        cancel_on_reply=cancel_on_reply,
    )
    assert created
    return row


def _scheduled_turns(session: Session) -> int:
    return Turn.objects.filter(session=session, trigger=Turn.Trigger.SCHEDULED).count()


def _fired_events(session: Session) -> list[int]:
    rows = Event.objects.filter(session=session, kind="followup.fired")
    return sorted(e.data["followup_id"] for e in rows)


def test_a_resent_schedule_call_makes_one_row(broker):
    session = factories.session(key="ticket:4812")
    ctx = ToolContext(session.key, f"{session.key}:toolu_abc", 1)
    args = {"delay_minutes": 1440, "note": "Nudge the customer if they have not replied."}

    first = SCHEDULE_FOLLOWUP.run(ctx, args)
    again = SCHEDULE_FOLLOWUP.run(ctx, {**args, "delay_minutes": 5})  # re-sent after a crash

    rows = FollowUp.objects.filter(session=session)
    assert rows.count() == 1
    row = rows.get()
    assert row.key == ctx.idempotency_key and row.status == "pending"
    assert timedelta(hours=23) < row.due_at - timezone.now() <= timedelta(hours=24)
    assert first.external_id == again.external_id == f"followup:{row.id}"
    assert '"already_scheduled": true' in again.content
    assert [e.kind for e in Event.objects.filter(session=session)] == ["followup.scheduled"]


def test_concurrent_firing_fires_each_due_followup_exactly_once(broker):
    sessions = [factories.session() for _ in range(5)]
    rows = [_due(s, i * 10 + j) for i, s in enumerate(sessions) for j in range(4)]
    results = at_once(followups_fire_due)

    # A row whose session another thread held at that instant was passed over,
    # not waited for (no lock wait while holding a row): the next tick fires it.
    assert sum(results) + followups_fire_due() == len(rows)
    assert followups_fire_due() == 0  # nothing left, nothing fired again
    assert set(FollowUp.objects.values_list("status", flat=True)) == {"fired"}
    for session in sessions:
        assert _scheduled_turns(session) == 4
        mine = sorted(r.id for r in rows if r.session_id == session.id)
        assert _fired_events(session) == mine
    turn_ids = list(FollowUp.objects.values_list("fired_turn_id", flat=True))
    assert len(set(turn_ids)) == len(rows)


def _ticks(proc, n_before: int = 0) -> int:
    return proc.log().count("agents.fire_followups") - n_before


def test_two_beats_and_two_workers_fire_each_followup_once(workers):
    workers.env["AGENTDESK_FOLLOWUP_INTERVAL_S"] = "0.2"
    workers.start("w1")
    workers.start("w2")
    beats = [workers.beat(), workers.beat()]
    sessions = [factories.session(key=f"customer:{70 + i}", context={}) for i in range(3)]
    rows = [_due(s, i * 10 + j, seconds=1) for i, s in enumerate(sessions) for j in range(3)]

    wait_for(
        lambda: not FollowUp.objects.filter(status="pending").exists(),
        timeout=30,
        what="every follow-up fired",
    )
    # Let both beats tick many more times after the last one fired.
    seen = [_ticks(b) for b in beats]
    wait_for(
        lambda: all(_ticks(b, s) >= 10 for b, s in zip(beats, seen, strict=True)),
        timeout=30,
        what="ten more ticks from each beat",
    )

    for session in sessions:
        assert _scheduled_turns(session) == 3, workers.logs()
        assert _fired_events(session) == sorted(r.id for r in rows if r.session_id == session.id)
    for session in sessions:  # the woken sessions ran their turns on the workers
        for number in (1, 2, 3):
            assert wait_turn(session, number).trigger == "scheduled"


def test_a_followup_due_while_the_worker_is_down_fires_once_after_restart(workers):
    workers.env["AGENTDESK_FOLLOWUP_INTERVAL_S"] = "0.2"
    first = workers.start("w1")
    first_beat = workers.beat()
    session = factories.session(key="customer:77", context={})
    row = _due(session, 1, seconds=2)

    first.kill(signal.SIGKILL)  # a crash, and the beat goes with the deploy
    first_beat.kill(signal.SIGKILL)
    first.popen.wait(10)
    first_beat.popen.wait(10)
    wait_for(lambda: timezone.now() > row.due_at, timeout=10, what="the follow-up to be due")
    row.refresh_from_db()
    assert row.status == "pending"  # nobody fired it, and it is not lost

    workers.start("w2")
    workers.beat()
    turn = wait_turn(session, 1)

    row.refresh_from_db()
    assert row.status == "fired" and row.fired_turn_id == turn.id
    assert turn.trigger == "scheduled" and "Check whether the customer answered" in turn.input
    assert _scheduled_turns(session) == 1


def test_a_customer_reply_cancels_the_followups_that_asked_for_it(broker):
    session = factories.session(key="ticket:4813")
    chase = _due(session, 1, seconds=3600)
    keep = _due(session, 2, seconds=3600, cancel_on_reply=False)
    ticket = {"id": 4813, "subject": "Where is my parcel", "customer_email": "a@example.com"}

    deliver_ticket({**ticket, "body": "Any news?"}, kind="ticket.replied")

    chase.refresh_from_db()
    keep.refresh_from_db()
    assert chase.status == "canceled" and chase.canceled_by == "customer"
    assert keep.status == "pending"
    canceled = Event.objects.get(session=session, kind="followup.canceled")
    assert canceled.data["followup_id"] == chase.id
    assert followups_fire_due(now=timezone.now() + timedelta(hours=2)) == 1  # only `keep`
    chase.refresh_from_db()
    assert chase.status == "canceled"


def test_a_staff_message_does_not_cancel_a_followup(broker, alice):
    from agents.services import message_post

    session = factories.session(key="ticket:4814")
    row = _due(session, 1, seconds=3600)
    message_post(key=session.key, text="Any update?", trigger=Turn.Trigger.STAFF, user=alice)
    row.refresh_from_db()
    assert row.status == "pending"


def test_the_agent_schedules_a_followup_and_beat_wakes_the_session(sandbox, workers):
    workers.env["AGENTDESK_FOLLOWUP_INTERVAL_S"] = "0.2"
    workers.start()
    workers.beat()
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Parcel not here",
        body="My parcel for order ORD-1001 has not arrived. Please check back in 2 hours.",
        order_id="ORD-1001",
    )
    session = deliver_ticket(ticket)
    assert wait_turn(session, 1).status == "succeeded", workers.logs()

    call = ToolCall.objects.get(session=session, name="schedule_followup")
    row = FollowUp.objects.get(session=session)
    assert call.status == "succeeded" and row.key == call.idempotency_key
    assert call.input["delay_minutes"] == 120 and row.status == "pending"

    FollowUp.objects.filter(pk=row.pk).update(due_at=timezone.now())  # two hours later
    second = wait_turn(session, 2)

    assert second.trigger == "scheduled" and second.status == "succeeded", workers.logs()
    row.refresh_from_db()
    assert row.status == "fired" and row.fired_turn_id == second.id
