"""Quorum: above a configurable amount an approval needs N distinct
approvers; every vote is a durable row; the same person voting twice is
refused; one deny ends it; the tool runs once, after the last vote, with
real workers and the sandbox counting refunds."""

from __future__ import annotations

import pytest

from agents.errors import Conflict
from agents.models import Message, ToolCall
from approvals.models import Approval, Vote
from approvals.services import approval_decide
from tests.agents.helpers import assert_invariants, deliver_ticket, kinds, wait_turn
from tests.approvals.helpers import approver, refund_policy
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {
    "email": "alice.martin@example.com",
    "subject": "Broken grinder",
    "body": "Order ORD-1002 arrived broken, refund $189 please.",
    "order_id": "ORD-1002",
}


def _pending(session) -> Approval:
    return wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        timeout=40,
        what="a pending approval",
    )


def test_two_of_three_the_refund_runs_once_after_the_second_vote(
    sandbox, workers, bob, django_user_model
):
    refund_policy(quorum_above_cents=15_000, quorum_votes=2)  # $189 > $150: two people
    dora = approver(django_user_model, "dora")
    approver(django_user_model, "erin")  # the third who may vote (2 of 3)
    workers.start()
    session = deliver_ticket(sandbox.ticket(**REFUND))
    approval = _pending(session)

    approval_decide(approval_id=approval.id, user=bob, decision="approve", reason="looks right")
    with pytest.raises(Conflict, match="you already voted approve"):
        approval_decide(approval_id=approval.id, user=bob, decision="approve")
    first = Approval.objects.get(pk=approval.pk)
    assert first.status == "pending" and first.tool_call.status == "waiting_for_approval"
    assert sandbox.refunds() == []  # nothing runs on one vote

    approval_decide(approval_id=approval.id, user=dora, decision="approve")

    assert wait_turn(session, timeout=40).status == "succeeded", workers.logs()
    refunds = sandbox.refunds()
    assert len(refunds) == 1 and refunds[0]["amount"] == 18900
    votes = list(Vote.objects.filter(approval_id=approval.id).order_by("id"))
    assert [(v.actor, v.decision, v.reason) for v in votes] == [
        ("bob", "approve", "looks right"),
        ("dora", "approve", ""),
    ]
    decided = Approval.objects.get(pk=approval.pk)
    assert decided.status == "approved" and decided.decided_by == dora
    assert kinds(session).count("approval.voted") == 1
    with pytest.raises(Conflict, match="already approved"):  # a late third click
        approval_decide(approval_id=approval.id, user=bob, decision="approve")
    assert len(sandbox.refunds()) == 1
    assert_invariants(session)


def test_one_deny_ends_a_quorum_and_the_model_reads_why(sandbox, workers, bob, django_user_model):
    refund_policy(quorum_above_cents=15_000, quorum_votes=3)
    dora = approver(django_user_model, "dora")
    workers.start()
    session = deliver_ticket(sandbox.ticket(**REFUND))
    approval = _pending(session)

    approval_decide(approval_id=approval.id, user=bob, decision="approve")
    approval_decide(approval_id=approval.id, user=dora, decision="deny", reason="already refunded")

    assert wait_turn(session, timeout=40).status == "succeeded", workers.logs()
    assert sandbox.refunds() == []
    call = ToolCall.objects.get(session=session, name="issue_refund")
    result = Message.objects.get(session=session, position=call.result_position).content[0]
    assert "Denied by dora: already refunded" in result["content"]
