"""axe-core over every desk page, in Debian's chromium: no serious or critical
violation anywhere (the axe.min.js that ships in the axe-playwright-python
wheel; run through Playwright's evaluate, which the page's CSP does not see).

The pages are filled the way people see them: a session with a finished
turn, a call in doubt and a pending approval, a dead job, a webhook with a
delivery, the operations charts with data. A violation names the page, the
rule and the elements, so a failure says what to fix.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.utils import timezone
from playwright.sync_api import Page, expect

from agents.models import Job, ToolCall
from integrations.models import WebhookDelivery, WebhookSubscription
from tests.dashboard import factories
from tests.dashboard.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BLOCKING = {"serious", "critical"}


def serious_violations(page: Page) -> list[str]:
    """The serious and critical violations on the page, one line each."""
    results = Axe().run(page)
    lines = []
    for violation in results.response["violations"]:
        if violation["impact"] not in BLOCKING:
            continue
        nodes = violation["nodes"]
        targets = [", ".join(node["target"]) for node in nodes][:5]
        lines.append(f"{violation['id']} ({violation['impact']}, {len(nodes)} nodes): {targets}")
    return lines


def _desk_data(carol) -> dict[str, str]:
    """One of each thing a desk page shows; returns the pages to check."""
    done = factories.session(title="Where is my order?")
    for _ in range(8):  # enough events that the activity list scrolls
        factories.turn(done)
    factories.finished_call(owner=done)  # a tool output as fields, a timeline
    waiting = factories.pending_approval()
    doubt = factories.parked_call(call_status=ToolCall.Status.IN_DOUBT)
    Job.objects.create(
        kind="retriage_customer",
        arguments={"customer": "alice.martin@example.com"},
        status="dead",
        attempts=3,
        last_error="helpdesk answered 503",
    )
    hook = WebhookSubscription.objects.create(
        url="https://hooks.example.com/agentdesk",
        description="CRM",
        secret="whsec_test",
        event_types=["turn.succeeded"],
        created_by=carol,
    )
    WebhookDelivery.objects.create(
        subscription=hook,
        message_id="msg_1",
        event_type="turn.succeeded",
        session_id=done.id,
        seq=1,
        payload={"type": "turn.succeeded"},
        status=WebhookDelivery.Status.PENDING,
        attempts=2,
        next_attempt_at=timezone.now() + timedelta(minutes=5),
        last_status_code=500,
        last_error="server error",
        created_at=timezone.now(),
    )
    return {
        "sessions": "/",
        "sessions-waiting": "/?status=waiting_for_approval",
        "session-finished": f"/sessions/{done.id}/",
        "session-waiting": f"/sessions/{waiting.session_id}/",
        "session-in-doubt": f"/sessions/{doubt.session_id}/",
        "history": f"/sessions/{waiting.session_id}/history",
        "approvals": "/approvals/",
        "approval-card": f"/approvals/{waiting.id}/",
        "jobs": "/jobs/",
        "operations": "/ops/",
        "api-tokens": "/account/tokens/",
        "webhooks": "/integrations/webhooks/",
        "webhook": f"/integrations/webhooks/{hook.id}/",
        "not-found": "/sessions/999999999/",
    }


def test_no_serious_or_critical_axe_violation_on_any_desk_page(web, browser, carol, dave):
    pages = _desk_data(carol)
    anonymous = browser.new_context(base_url=web.url).new_page()
    anonymous.goto("/login/")
    found = {"login": serious_violations(anonymous)}
    roleless = login(browser, web, "dave")  # logged in, no desk role: the 403 page
    expect(roleless.locator("h1")).to_have_text("Not allowed")
    found["forbidden"] = serious_violations(roleless)

    page = login(browser, web, "carol")
    for name, url in pages.items():
        page.goto(url)
        expect(page.locator("main")).to_be_visible()
        if name == "operations":  # uPlot has drawn every chart
            expect(page.locator("figure.ops-chart.drawn")).to_have_count(5)
        found[name] = serious_violations(page)

    # What the keyboard opens: every timeline and raw output, then the keys.
    page.goto(pages["session-finished"])
    page.locator("h1").click()
    page.keyboard.press("t")
    page.keyboard.press("o")
    expect(page.locator("details.timeline[open]").first).to_be_visible()
    found["session-opened"] = serious_violations(page)
    page.keyboard.press("?")
    expect(page.locator("#key-help")).to_be_visible()
    found["keys"] = serious_violations(page)
    assert len(found) == len(pages) + 4
    problems = {name: lines for name, lines in found.items() if lines}
    report = "\n".join(f"{name}: {line}" for name, lines in problems.items() for line in lines)
    assert problems == {}, report
