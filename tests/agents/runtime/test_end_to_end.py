"""A ticket end to end through a real Celery worker and the sandbox."""

from __future__ import annotations

import pytest

from agents.models import Message, Session, ToolCall, Turn
from approvals.models import Approval
from approvals.services import approval_decide
from tests.agents.helpers import assert_invariants, deliver_ticket, kinds, wait_turn
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

REFUND_ASK = "The grinder from order ORD-1002 arrived broken. Please refund it, $189."


def _pending_approval(session: Session) -> Approval:
    return wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        what="a pending approval",
    )


def test_refund_above_limit_waits_for_approval_and_runs_once(sandbox, workers, bob):
    workers.start()
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Broken grinder",
        body=REFUND_ASK,
        order_id="ORD-1002",
    )
    session = deliver_ticket(ticket)

    approval = _pending_approval(session)
    assert approval.tool_name == "issue_refund"
    assert approval.arguments["amount_cents"] == 18900
    assert approval.policy == "refund_over_limit"
    assert Turn.objects.get(session=session).status in ("running", "waiting_for_approval")
    assert sandbox.refunds() == []  # nothing left before the decision

    approval_decide(approval_id=approval.id, user=bob, decision="approve")
    turn = wait_turn(session)

    assert turn.status == "succeeded", workers.logs()
    refunds = sandbox.refunds()
    call = ToolCall.objects.get(session=session, name="issue_refund")
    assert [r["key"] for r in refunds] == [call.idempotency_key]
    assert refunds[0]["amount"] == 18900
    assert call.status == "succeeded" and call.external_id == refunds[0]["id"]
    assert sandbox.stats()["replies"] == 1
    names = list(
        ToolCall.objects.filter(session=session).order_by("id").values_list("name", flat=True)
    )
    assert names[:2] == ["lookup_customer", "lookup_order"] and "send_reply" in names
    assert {"approval.requested", "approval.decided", "turn.succeeded"} <= set(kinds(session))
    assert_invariants(session)


def test_denied_refund_runs_nothing_and_the_model_reads_the_reason(sandbox, workers, bob):
    workers.start()
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Broken grinder",
        body=REFUND_ASK,
        order_id="ORD-1002",
    )
    session = deliver_ticket(ticket)
    approval = _pending_approval(session)

    approval_decide(
        approval_id=approval.id,
        user=bob,
        decision="deny",
        reason="Grinder damage must be checked by the warehouse first",
    )
    turn = wait_turn(session)

    assert turn.status == "succeeded", workers.logs()
    assert sandbox.refunds() == []
    call = ToolCall.objects.get(session=session, name="issue_refund")
    assert call.status == "denied"
    result = Message.objects.get(session=session, position=call.result_position).content[0]
    assert result["is_error"] is True
    assert "checked by the warehouse" in result["content"]
    reply = ToolCall.objects.get(session=session, name="send_reply")
    assert "checked by the warehouse" in reply.input["body"]  # the model used the reason
    assert_invariants(session)


def test_small_refund_needs_no_approval(sandbox, workers):
    workers.start()
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Refund please",
        body="Please refund order ORD-1001, the mugs were chipped. $20",
        order_id="ORD-1001",
    )
    session = deliver_ticket(ticket)
    turn = wait_turn(session)
    assert turn.status == "succeeded", workers.logs()
    assert not Approval.objects.filter(session=session).exists()
    assert [r["amount"] for r in sandbox.refunds()] == [2000]
    assert_invariants(session)
