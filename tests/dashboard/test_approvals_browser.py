"""Approvals in a real browser (issue 19): two approvers on a 2-of-3 quorum
card, and an SLA countdown that reaches its warning state, then expires."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from approvals.models import Approval, Vote
from tests.agents.helpers import deliver_ticket, wait_turn
from tests.approvals.helpers import approver, refund_policy
from tests.dashboard.conftest import login
from tests.dashboard.test_browser import LIVE_S, _live, _watch
from tests.processes import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFUND = {
    "email": "alice.martin@example.com",
    "subject": "Broken grinder",
    "body": "Order ORD-1002 arrived broken, refund $189 please.",
    "order_id": "ORD-1002",
}


def test_two_approvers_in_two_browsers_on_a_two_of_three_quorum(
    sandbox, workers, web, browser, bob, django_user_model
):
    refund_policy(quorum_above_cents=15_000, quorum_votes=2)
    approver(django_user_model, "dora")
    approver(django_user_model, "erin")  # the third who may vote
    workers.start()
    session = deliver_ticket(sandbox.ticket(**REFUND))
    approval = wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        timeout=40,
        what="a pending approval",
    )
    pages = {name: login(browser, web, name) for name in ("bob", "dora")}
    seen = {name: _watch(page) for name, page in pages.items()}
    for page in pages.values():
        page.goto("/approvals/")
        _live(page)
        card = page.locator(f"#approval-{approval.id}")
        expect(card).to_contain_text("Needs 2 different approvers to approve (0 of 2 so far)")
        # The context beside the arguments, from what the agent looked up.
        expect(card.locator(".context")).to_contain_text("Burr grinder Pro")
        expect(card.locator(".context .plan")).to_have_text("pro")
    bob, dora = pages["bob"], pages["dora"]
    card = f"#approval-{approval.id}"

    bob.click(f"{card} button[data-action=approve]")
    expect(bob.locator(card)).to_contain_text("(1 of 2 so far)")
    expect(bob.locator(f"{card} .votes")).to_contain_text("bob approved")
    bob.click(f"{card} button[data-action=approve]")  # the same person again
    expect(bob.locator(f"{card} .error")).to_contain_text("you already voted approve")
    assert sandbox.refunds() == []

    # Dora's card was loaded before bob's vote: refused, with the state now.
    dora.click(f"{card} button[data-action=approve]")
    expect(dora.locator(f"{card} .error")).to_contain_text(
        "this card changed since you loaded it (bob voted approve)"
    )
    expect(dora.locator(card)).to_contain_text("(1 of 2 so far)")
    dora.click(f"{card} button[data-action=approve]")  # on what it shows now: the second vote

    assert wait_turn(session, timeout=LIVE_S / 1000).status == "succeeded", workers.logs()
    assert [r["amount"] for r in sandbox.refunds()] == [18900]  # once, after the quorum
    assert list(Vote.objects.filter(approval_id=approval.id).values_list("actor", flat=True)) == [
        "bob",
        "dora",
    ]
    assert Approval.objects.get(pk=approval.pk).decided_by.username == "dora"
    assert seen == {n: {"dialogs": [], "errors": [], "csp": []} for n in pages}


@pytest.fixture
def short_clock(stack_env):
    """Web and worker read a short clock: 8 s, the last half a warning."""
    stack_env.update(AGENTDESK_APPROVAL_TTL_S="8", AGENTDESK_APPROVAL_WARN_FRACTION="0.5")
    return stack_env


def test_the_countdown_reaches_its_warning_then_expires(
    bob, short_clock, sandbox, workers, web, browser
):
    workers.start()
    page = login(browser, web, "bob")
    seen = _watch(page)
    page.goto("/approvals/")
    _live(page)
    session = deliver_ticket(sandbox.ticket(**REFUND))
    sla = page.locator(".approval .sla")
    expect(sla).to_have_count(1, timeout=LIVE_S)
    approval = Approval.objects.get(session=session)
    expect(sla.locator("time")).to_have_attribute("datetime", approval.expires_at.isoformat())
    expect(sla.locator("[data-countdown]")).to_contain_text("in ")

    expect(sla).to_have_class(re.compile(r"\bsla-warning\b"), timeout=10_000)
    expect(sla.locator("[data-sla-label]")).to_have_text("Expiring soon")
    expect(page.locator(f"#approval-{approval.id}")).to_have_class(re.compile(r"\bsla-warning\b"))
    expect(sla.locator("[data-sla-label]")).to_have_text("Expired", timeout=10_000)
    expect(sla.locator("[data-countdown]")).to_have_text("(time is up)")

    page.click(f"#approval-{approval.id} button[data-action=approve]")  # a late click
    expect(page.locator(f"#approval-{approval.id} .error")).to_contain_text("expired")
    assert sandbox.refunds() == []
    assert seen == {"dialogs": [], "errors": [], "csp": []}
