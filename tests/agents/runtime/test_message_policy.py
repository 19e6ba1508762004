"""A message that arrives while a turn runs: queued, interrupting, or refused
by the session's policy; never two turns running at once."""

from __future__ import annotations

import pytest

from agents.errors import Conflict
from agents.models import Event, Session, Turn
from agents.services import message_post
from tests.agents.helpers import assert_invariants, deliver_ticket, wait_turn
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SLOW = {
    "email": "bob.okafor@example.net",
    "subject": "Where is it",
    "body": "Where is order ORD-1003? [[sandbox:slow]]",
    "order_id": "ORD-1003",
}


def _running(session: Session) -> Turn:
    return wait_for(
        lambda: Turn.objects.filter(session=session, number=1, status="running").first(),
        what="turn 1 running",
    )


def _never_two_at_once(session: Session) -> None:
    starts = Event.objects.filter(
        session=session, kind__in=["turn.started", "turn.succeeded", "turn.canceled", "turn.failed"]
    )
    open_turns = 0
    for event in starts.order_by("seq"):
        open_turns += 1 if event.kind == "turn.started" else -1
        assert open_turns <= 1, "two turns ran at once"


def test_queue_runs_the_follow_up_after_the_running_turn(sandbox, workers):
    workers.start()
    session = deliver_ticket(sandbox.ticket(**SLOW))
    _running(session)
    follow_up = message_post(key=session.key, text="Also, can you check ORD-1003's tracking?")
    assert follow_up.status == "accepted"

    assert wait_turn(session, number=1, timeout=60).status == "succeeded", workers.logs()
    assert wait_turn(session, number=2, timeout=60).status == "succeeded", workers.logs()
    _never_two_at_once(session)
    assert_invariants(session)


def test_interrupt_cancels_the_running_turn_then_starts_the_new_one(sandbox, workers):
    workers.start()
    session = deliver_ticket(sandbox.ticket(**SLOW))
    Session.objects.filter(pk=session.pk).update(message_policy="interrupt")
    _running(session)

    message_post(key=session.key, text="Never mind, where is ORD-1003 now?")

    assert wait_turn(session, number=1, timeout=30).status == "canceled", workers.logs()
    assert wait_turn(session, number=2, timeout=60).status == "succeeded", workers.logs()
    _never_two_at_once(session)
    assert_invariants(session)


def test_reject_refuses_a_message_while_a_turn_runs(sandbox, workers):
    workers.start()
    session = deliver_ticket(sandbox.ticket(**SLOW))
    Session.objects.filter(pk=session.pk).update(message_policy="reject")
    _running(session)

    with pytest.raises(Conflict, match="already running"):
        message_post(key=session.key, text="hello?")

    assert wait_turn(session, timeout=60).status == "succeeded", workers.logs()
    assert Turn.objects.filter(session=session).count() == 1


def test_an_interrupting_message_leaves_the_session_running_for_its_turn():
    """No worker runs: turn 1 is still queued when the interrupting message
    cancels it. The new turn is work, so the session shows running (the
    sweeper looks at running sessions: a `canceled` one with a queued turn
    would wait for a trigger that may have been lost)."""
    first = message_post(key="ticket:interrupt-queued", text="Where is ORD-1003?")
    Session.objects.filter(pk=first.session_id).update(message_policy="interrupt")

    second = message_post(key="ticket:interrupt-queued", text="Never mind, where is it now?")

    assert Turn.objects.get(pk=first.pk).status == "canceled"
    assert Turn.objects.get(pk=second.pk).status == "accepted"
    assert Session.objects.get(pk=first.session_id).status == "running"
