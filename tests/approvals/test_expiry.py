"""Approvals expire by a periodic task; an expired approval never executes,
even when a click races the expiry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.errors import Conflict
from agents.models import Message, ToolCall
from approvals.models import Approval
from approvals.services import approval_decide, approvals_expire
from tests.agents.helpers import assert_invariants, deliver_ticket, kinds, wait_turn
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {
    "email": "alice.martin@example.com",
    "subject": "Broken grinder",
    "body": "Order ORD-1002 arrived broken, refund $189 please.",
    "order_id": "ORD-1002",
}


def test_unanswered_approval_expires_and_the_model_is_told(sandbox, workers, bob):
    workers.env.update(AGENTDESK_APPROVAL_TTL_S="2", AGENTDESK_EXPIRE_INTERVAL_S="0.5")
    workers.start()
    workers.beat()
    session = deliver_ticket(sandbox.ticket(**REFUND))

    turn = wait_turn(session, timeout=40)

    assert turn.status == "succeeded", workers.logs()
    approval = Approval.objects.get(session=session)
    assert approval.status == "expired"
    call = ToolCall.objects.get(session=session, name="issue_refund")
    assert call.status == "denied"
    result = Message.objects.get(session=session, position=call.result_position).content[0]
    assert "expired" in result["content"]
    with pytest.raises(Conflict):  # a late click changes nothing
        approval_decide(approval_id=approval.id, user=bob, decision="approve")
    assert sandbox.refunds() == []
    assert "approval.expired" in kinds(session)
    assert_invariants(session)


def test_a_click_after_the_deadline_loses_to_the_expiry(sandbox, workers, bob):
    workers.start()
    session = deliver_ticket(sandbox.ticket(**REFUND))
    approval = wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        what="a pending approval",
    )
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    with pytest.raises(Conflict, match="expired"):
        approval_decide(approval_id=approval.id, user=bob, decision="approve")
    assert approvals_expire() == 1
    assert approvals_expire() == 0  # decided at most once

    assert wait_turn(session).status == "succeeded", workers.logs()
    assert sandbox.refunds() == []
    assert_invariants(session)
