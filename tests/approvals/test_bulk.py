"""Bulk decisions for low-risk cards only: five refunds one approver may
decide alone, approved in one confirmed action, run once each at the
sandbox; a quorum card in the selection refuses the whole selection."""

from __future__ import annotations

import pytest
from django.test import Client

from approvals.models import Approval
from tests.agents.helpers import assert_invariants, deliver_ticket, wait_turn
from tests.approvals.helpers import refund_policy
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
HX = {"HX-Request": "true"}


def _ticket(sandbox, n: int, order: str, dollars: int, email: str):
    return sandbox.ticket(
        email=email,
        subject=f"Refund {n}",
        body=f"Order {order} arrived broken, refund ${dollars} please.",
        order_id=order,
    )


def _items(approvals) -> list[str]:
    return [f"{a.id}:{Approval.objects.get(pk=a.pk).version}" for a in approvals]


def test_five_low_risk_refunds_in_one_confirmed_action_and_a_quorum_card_refused(
    sandbox, workers, bob, settings
):
    settings.AGENTDESK_DECISION_RATE = "1000/m"
    refund_policy(quorum_above_cents=30_000)  # $120 alone; $320 needs two people
    workers.start()
    small = [
        deliver_ticket(_ticket(sandbox, n, "ORD-1005", 120, "charlie.nguyen@example.org"))
        for n in range(5)
    ]
    big = deliver_ticket(_ticket(sandbox, 9, "ORD-1012", 320, "farid.haddad@example.org"))
    sessions = [*small, big]
    wait_for(
        lambda: Approval.objects.filter(session__in=sessions, status="pending").count() == 6,
        timeout=60,
        what="six pending approvals",
    )
    cards = [Approval.objects.get(session=s) for s in small]
    quorum = Approval.objects.get(session=big)
    client = Client()
    client.force_login(bob)
    inbox = client.get("/approvals/").content.decode()
    assert inbox.count('class="bulk-pick"') == 5  # the quorum card cannot be selected

    mixed = client.post(
        "/approvals/bulk", {"item": _items([*cards, quorum]), "confirm": "yes"}, headers=HX
    )

    body = mixed.content.decode()
    assert mixed.status_code == 403, body
    assert f"approval {quorum.id} (issue_refund $320.00) needs 2 approvers" in body
    assert "bulk approval is for cards one approver may decide alone" in body
    assert Approval.objects.filter(session__in=sessions, status="pending").count() == 6
    assert sandbox.refunds() == []

    confirm = client.post("/approvals/bulk", {"item": _items(cards)}, headers=HX)
    listed = confirm.content.decode()
    assert confirm.status_code == 200 and "Approve these 5 approvals?" in listed
    assert all(f'<tr data-approval="{a.id}">' in listed for a in cards)
    assert Approval.objects.filter(session__in=small, status="pending").count() == 5  # not yet

    done = client.post("/approvals/bulk", {"item": _items(cards), "confirm": "yes"}, headers=HX)

    assert done.status_code == 200 and "Approved 5 approvals" in done.content.decode()
    for session in small:
        assert wait_turn(session, timeout=60).status == "succeeded", workers.logs()
        assert_invariants(session)
    refunds = sandbox.refunds()
    assert sorted(r["amount"] for r in refunds) == [12000] * 5
    calls = [s.key for s in small]
    assert sorted(r["key"].rsplit(":", 1)[0] for r in refunds) == sorted(calls)  # one each
    assert Approval.objects.get(pk=quorum.pk).status == "pending"
    # The same selection again changes nothing: they were decided.
    again = client.post("/approvals/bulk", {"item": _items(cards), "confirm": "yes"}, headers=HX)
    assert again.status_code == 409 and "already approved" in again.content.decode()
    assert len(sandbox.refunds()) == 5
