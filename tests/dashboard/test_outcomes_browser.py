"""The sessions list in chromium after real turns (a Celery worker, the
sandbox's model, helpdesk and payments): each row says what its last turn
did, with the amount of a refund and the turn's cost."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from agents.models import Turn
from tests.agents.helpers import deliver_ticket, wait_turn
from tests.dashboard.conftest import login
from tests.dashboard.test_browser import _watch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TURN_S = 90  # a whole turn through a real worker, on a busy 2-core machine


def test_the_list_says_replied_refunded_waiting_and_failed_after_real_turns(
    sandbox, workers, web, browser, alice, settings
):
    workers.start()
    reply = deliver_ticket(
        sandbox.ticket(
            email="bob.okafor@example.net",
            subject="Where is it",
            body="Where is order ORD-1003?",
            order_id="ORD-1003",
        )
    )
    refund = deliver_ticket(
        sandbox.ticket(
            email="alice.martin@example.com",
            subject="Chipped mugs",
            body="The mugs from order ORD-1001 arrived chipped. Please refund $29.",
            order_id="ORD-1001",
        )
    )
    waiting = deliver_ticket(
        sandbox.ticket(
            email="alice.martin@example.com",
            subject="Broken grinder",
            body="The grinder from order ORD-1002 arrived broken. Please refund it, $189.",
            order_id="ORD-1002",
        )
    )
    settings.AGENTDESK_MAX_TURN_STEPS = 1  # this session's budget: one model call a turn
    failed = deliver_ticket(
        sandbox.ticket(
            email="bob.okafor@example.net",
            subject="Still nothing",
            body="Where is order ORD-1004?",
            order_id="ORD-1004",
        )
    )
    for session in (reply, refund, failed):
        assert wait_turn(session, timeout=TURN_S).status in Turn.TERMINAL, workers.logs()
    wait_turn(waiting, statuses={Turn.Status.WAITING}, timeout=TURN_S)

    page = login(browser, web, "alice")
    seen = _watch(page)

    def outcome(session):
        return page.locator(f"#session-{session.id} .outcome")

    expect(outcome(reply)).to_have_text("Replied")
    expect(outcome(refund)).to_have_text("Refunded $29.00, replied")
    expect(outcome(waiting)).to_have_text("Waiting on you: approve a refund of $189.00")
    expect(outcome(failed)).to_have_text(re.compile(r"^Failed: .*budget", re.IGNORECASE))
    expect(outcome(waiting)).to_have_attribute("data-outcome", "attention")
    # The last turn's cost, from the recorded usage at the configured prices.
    cost = page.locator(f"#session-{refund.id} td.num").first
    expect(cost).to_have_text(re.compile(r"^~?\$\d+\.\d{4}$"))

    # The refund's session page: the real turn's timeline, model and tool
    # steps in the order they ran, and the order look-up as fields.
    page.goto(f"/sessions/{refund.id}/")
    turn = Turn.objects.get(session=refund, number=1)
    timeline = page.locator(f"#turn-{turn.id}-timeline")
    timeline.locator("summary").click()
    steps = timeline.locator(".wf-step")
    expect(steps.first).to_be_visible()
    kinds = [s.get_attribute("data-kind") for s in steps.all()]
    labels = steps.locator(".wf-label").all_inner_texts()
    assert kinds[0] == "model" and kinds[-1] == "model" and "tool" in kinds, kinds
    tools = [
        label.split(" ")[0] for label, kind in zip(labels, kinds, strict=True) if kind == "tool"
    ]
    assert tools.index("lookup_order") < tools.index("issue_refund") < tools.index("send_reply")
    order = page.locator(".toolcall", has=page.locator("code.tc-name", has_text="lookup_order"))
    expect(order.locator(".fields")).to_contain_text("$58.00")  # the order's total, read
    assert seen == {"dialogs": [], "errors": [], "csp": []}
