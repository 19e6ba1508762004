"""What happens at expiry is the tool's declared policy: `escalate` re-opens
the approval for admins with a fresh clock (an approver may no longer
decide it) and the model is told how it ended; expiry is checked when the
call would run too, so a worker down past the expiry never runs the tool."""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents.errors import Forbidden
from agents.models import Message, ToolCall
from approvals.models import Approval
from approvals.services import approval_decide
from tests.agents.helpers import assert_invariants, deliver_ticket, kinds, wait_turn
from tests.approvals.helpers import refund_policy
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {
    "email": "alice.martin@example.com",
    "subject": "Broken grinder",
    "body": "Order ORD-1002 arrived broken, refund $189 please.",
    "order_id": "ORD-1002",
}


def _result(session) -> str:
    call = ToolCall.objects.get(session=session, name="issue_refund")
    return Message.objects.get(session=session, position=call.result_position).content[0]["content"]


def _escalated(session) -> Approval:
    return wait_for(
        lambda: Approval.objects.filter(session=session, escalations=1, status="pending").first(),
        timeout=30,
        what="the approval escalated to admins",
    )


def test_escalate_reopens_for_admins_with_a_fresh_clock_and_the_model_is_told(
    sandbox, workers, bob, carol
):
    refund_policy(on_expiry="escalate", escalation_ttl_s=600)
    workers.env.update(AGENTDESK_APPROVAL_TTL_S="2", AGENTDESK_EXPIRE_INTERVAL_S="0.5")
    workers.start()
    workers.beat()
    session = deliver_ticket(sandbox.ticket(**REFUND))
    first = wait_for(lambda: Approval.objects.filter(session=session).first(), what="approval")

    escalated = _escalated(session)

    assert escalated.expires_at > first.expires_at + timezone.timedelta(seconds=500)  # fresh
    assert escalated.clock_started_at >= first.expires_at
    assert escalated.tool_call.status == "waiting_for_approval"
    assert "approval.escalated" in kinds(session)
    with pytest.raises(Forbidden, match="escalated to admins"):
        approval_decide(approval_id=escalated.id, user=bob, decision="approve")
    approval_decide(
        approval_id=escalated.id, user=carol, decision="deny", reason="refund the repair instead"
    )

    assert wait_turn(session, timeout=40).status == "succeeded", workers.logs()
    assert sandbox.refunds() == []
    told = _result(session)
    assert "Escalated to admins after nobody decided in time" in told
    assert "denied by carol: refund the repair instead" in told
    assert_invariants(session)


def test_an_escalated_approval_nobody_decides_expires_and_the_model_reads_why(sandbox, workers):
    refund_policy(on_expiry="escalate", escalation_ttl_s=2)
    workers.env.update(AGENTDESK_APPROVAL_TTL_S="2", AGENTDESK_EXPIRE_INTERVAL_S="0.5")
    workers.start()
    workers.beat()
    session = deliver_ticket(sandbox.ticket(**REFUND))

    turn = wait_turn(session, timeout=60)

    assert turn.status == "succeeded", workers.logs()
    approval = Approval.objects.get(session=session)
    assert approval.status == "expired" and approval.escalations == 1
    assert "escalated to admins; no admin decided in time either" in _result(session)
    assert sandbox.refunds() == []


def test_deny_policy_the_model_reads_the_reason(sandbox, workers):
    refund_policy(on_expiry="deny")
    workers.env.update(AGENTDESK_APPROVAL_TTL_S="2", AGENTDESK_EXPIRE_INTERVAL_S="0.5")
    workers.start()
    workers.beat()
    session = deliver_ticket(sandbox.ticket(**REFUND))

    assert wait_turn(session, timeout=60).status == "succeeded", workers.logs()
    assert Approval.objects.get(session=session).escalations == 0
    assert "The approval for this action expired; it did not run." in _result(session)
    assert sandbox.refunds() == []


def test_a_worker_down_past_the_expiry_never_runs_the_approved_tool(sandbox, workers, bob):
    workers.env.update(AGENTDESK_APPROVAL_TTL_S="5", AGENTDESK_APPROVAL_RUN_GRACE_S="0")
    worker = workers.start()
    session = deliver_ticket(sandbox.ticket(**REFUND))
    approval = wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        timeout=40,
        what="a pending approval",
    )
    worker.kill()  # before the expiry
    approval_decide(approval_id=approval.id, user=bob, decision="approve")  # in time
    wait_for(lambda: timezone.now() > approval.expires_at, timeout=20, what="the expiry")

    workers.start("w2")  # after it

    assert wait_turn(session, timeout=60).status == "succeeded", workers.logs()
    assert sandbox.refunds() == []
    lapsed = Approval.objects.get(pk=approval.pk)
    assert lapsed.status == "expired"
    assert ToolCall.objects.get(session=session, name="issue_refund").status == "denied"
    assert "had not started when the approval expired" in _result(session)
    assert "approval.lapsed" in kinds(session)
    assert_invariants(session)
