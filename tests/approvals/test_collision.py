"""A decision made on a card that changed since it was loaded (another vote,
an edit, an assignment) is refused server-side with the current state shown,
and runs nothing: Help Scout's traffic cop, not only an argument-hash check."""

from __future__ import annotations

import pytest

from approvals.assignment import approval_take
from approvals.models import Approval
from approvals.services import approval_decide
from tests.approvals.helpers import approver, refund_policy
from tests.dashboard import factories

pytestmark = pytest.mark.django_db(transaction=True)
HX = {"HX-Request": "true"}


def _approve(client, approval, version):
    body = {"decision": "approve", "expected_hash": approval.arguments_hash}
    body["expected_version"] = version
    return client.post(f"/approvals/{approval.id}/decide", body, headers=HX)


def test_a_decision_on_a_card_assigned_since_it_was_loaded_is_refused(client, bob, carol):
    approval = factories.pending_approval()
    loaded = approval.version
    approval_take(approval_id=approval.id, user=carol)
    client.force_login(bob)

    response = _approve(client, approval, loaded)

    body = response.content.decode()
    assert response.status_code == 409
    assert "this card changed since you loaded it (carol took it)" in body
    assert "<strong>carol</strong> has it" in body  # the current state, shown
    fresh = Approval.objects.get(pk=approval.pk)
    assert fresh.status == "pending" and fresh.tool_call.status == "waiting_for_approval"
    # On the card as it is now, the decision goes through.
    assert _approve(client, approval, fresh.version).status_code == 200
    assert Approval.objects.get(pk=approval.pk).status == "approved"


def test_a_vote_since_the_card_was_loaded_is_a_change_too(client, bob, django_user_model):
    refund_policy(quorum_above_cents=10_000, quorum_votes=3)
    dora = approver(django_user_model, "dora")
    approval = factories.pending_approval()
    loaded = approval.version
    approval_decide(approval_id=approval.id, user=dora, decision="approve", expected_version=loaded)
    client.force_login(bob)

    response = _approve(client, approval, loaded)

    assert response.status_code == 409
    body = response.content.decode()
    assert "dora voted approve" in body and "1 of 3 so far" in body
    assert Approval.objects.get(pk=approval.pk).votes.count() == 1
