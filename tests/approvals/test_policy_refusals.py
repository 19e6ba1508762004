"""Separation of duties and the role ladder as profile policy: a refused
decision is a 403 that says why in words, and changes nothing."""

from __future__ import annotations

import json

import pytest

from agents.errors import Forbidden
from approvals.models import Approval, Vote
from approvals.services import approval_decide
from tests.approvals.helpers import refund_policy
from tests.dashboard import factories

pytestmark = pytest.mark.django_db(transaction=True)
HX = {"HX-Request": "true"}


def _post(client, approval, **fields):
    body = {
        "decision": "approve",
        "expected_hash": approval.arguments_hash,
        "expected_version": approval.version,
        **fields,
    }
    return client.post(f"/approvals/{approval.id}/decide", body, headers=HX)


def _unchanged(approval) -> None:
    fresh = Approval.objects.get(pk=approval.pk)
    assert fresh.status == "pending" and fresh.tool_call.status == "waiting_for_approval"
    assert not Vote.objects.filter(approval_id=approval.id).exists()


def test_the_requester_of_a_turn_cannot_approve_its_side_effect(client, bob):
    approval = factories.pending_approval(started_by=bob)
    client.force_login(bob)

    response = _post(client, approval)

    assert response.status_code == 403
    assert "you started this turn, so someone else must approve" in response.content.decode()
    _unchanged(approval)


def test_an_amount_above_the_approver_limit_needs_an_admin(client, bob, carol):
    refund_policy(admin_above_cents=10_000)  # $189 asked: above $100
    approval = factories.pending_approval()
    client.force_login(bob)

    response = _post(client, approval)

    body = response.content.decode()
    assert response.status_code == 403
    assert "only an admin may decide this issue_refund approval" in body
    assert "amounts above $100.00 need an admin" in body
    _unchanged(approval)
    # The card says so before anyone clicks, and an admin may.
    page = client.get("/approvals/").content.decode()
    assert "One <strong>admin</strong> decides." in page
    approval_decide(approval_id=approval.id, user=carol, decision="approve")
    assert Approval.objects.get(pk=approval.pk).status == "approved"


def test_an_edit_that_raises_the_refund_needs_an_admin(client, bob, carol):
    approval = factories.pending_approval()  # $189.00 asked
    client.force_login(bob)
    bigger = {**approval.arguments, "amount_cents": 25_000}

    response = _post(client, approval, edited=json.dumps(bigger))

    body = response.content.decode()
    assert response.status_code == 403
    assert "this edit raises the amount from $189.00 to $250.00" in body
    assert "only an admin may approve that" in body
    _unchanged(approval)
    # A smaller refund is the approver's to give; the admin may raise it.
    smaller = {**approval.arguments, "amount_cents": 15_000}
    assert _post(client, approval, edited=json.dumps(smaller)).status_code == 200
    assert Approval.objects.get(pk=approval.pk).tool_call.input["amount_cents"] == 15_000
    other = factories.pending_approval()
    approval_decide(approval_id=other.id, user=carol, decision="approve", edited_input=bigger)
    assert Approval.objects.get(pk=other.pk).tool_call.input["amount_cents"] == 25_000


def test_a_support_user_cannot_decide_in_the_service_either(alice):
    approval = factories.pending_approval()
    with pytest.raises(Forbidden, match="you may not decide approvals"):
        approval_decide(approval_id=approval.id, user=alice, decision="approve")
    _unchanged(approval)
