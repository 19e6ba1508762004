"""Cancel is explicit and durable; a client going away cancels nothing."""

from __future__ import annotations

import pytest

from agents.errors import Conflict
from agents.models import Message, Session, ToolCall, Turn
from agents.runtime import live
from agents.services import message_post, turn_cancel
from approvals.models import Approval
from approvals.services import approval_decide
from tests.agents.helpers import assert_invariants, deliver_ticket, kinds, wait_turn
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_cancel_during_model_stream_aborts_it(sandbox, workers, alice):
    workers.start()
    ticket = sandbox.ticket(
        email="bob.okafor@example.net",
        subject="Where is my order",
        body="Where is order ORD-1003? [[sandbox:slow]]",
        order_id="ORD-1003",
    )
    session = deliver_ticket(ticket)
    turn = Turn.objects.get(session=session)
    wait_for(lambda: live.partial_text(session.id, turn.id), what="model text streaming")

    turn_cancel(session_id=session.id, user=alice)
    turn = wait_turn(session, timeout=10)

    assert turn.status == "canceled", workers.logs()
    assert turn.cancel_requested_by == alice
    assert "turn.cancel_requested" in kinds(session) and "turn.canceled" in kinds(session)
    assert live.partial_text(session.id, turn.id) == ""
    assert_invariants(session)
    # The session takes new turns: the transcript stayed valid.
    message_post(key=session.key, text="Any news on ORD-1003?", user=alice)
    assert wait_turn(session, number=2).status == "succeeded", workers.logs()
    assert_invariants(session)
    # A clean stop, not a dead worker: no claim ever took it for a recovery.
    assert "recovery" not in kinds(session)


def test_cancel_during_approval_wait_cancels_the_approval(sandbox, workers, alice, bob):
    workers.start()
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Broken grinder",
        body="Order ORD-1002 arrived broken, refund $189 please.",
        order_id="ORD-1002",
    )
    session = deliver_ticket(ticket)
    approval = wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        what="a pending approval",
    )
    wait_for(
        lambda: Session.objects.get(pk=session.pk).status == "waiting_for_approval",
        what="the turn parked",
    )

    turn_cancel(session_id=session.id, user=alice)

    turn = wait_turn(session, timeout=5)
    assert turn.status == "canceled"
    approval.refresh_from_db()
    assert approval.status == "canceled"
    call = ToolCall.objects.get(session=session, name="issue_refund")
    assert call.status == "canceled"
    result = Message.objects.get(session=session, position=call.result_position).content[0]
    assert result["is_error"] and "Canceled" in result["content"]
    with pytest.raises(Conflict):
        approval_decide(approval_id=approval.id, user=bob, decision="approve")
    assert sandbox.refunds() == []
    assert_invariants(session)


def test_cancel_with_nothing_running_is_a_conflict(sandbox, alice):
    turn = message_post(key="ticket:999001", text="hello")
    turn_cancel(session_id=turn.session_id, user=alice)  # queued turn: canceled at once
    assert Turn.objects.get(pk=turn.pk).status == "canceled"
    with pytest.raises(Conflict):
        turn_cancel(session_id=turn.session_id, user=alice)
