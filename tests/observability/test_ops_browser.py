"""The operations page in a real browser: charts drawn, keyboard reachable,
refreshed live by htmx, nothing run that should not be."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from agents.events import EventSpec
from tests.dashboard import factories
from tests.dashboard.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_support_reads_the_charts_with_the_keyboard_and_they_refresh_live(web, browser, alice):
    session = factories.session(key="ticket:ops-live", title='<img src=x onerror=alert("t")>')
    factories.append(session.id, EventSpec("model.replied", {"usage": {"input": 10, "output": 5}}))
    page = login(browser, web, "alice")
    seen = {"dialogs": [], "errors": [], "csp": []}
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on(
        "console",
        lambda m: seen["csp"].append(m.text) if "Content Security Policy" in m.text else None,
    )

    page.get_by_role("link", name="Operations").click()
    expect(page).to_have_url(re.compile(r"/ops/$"))
    expect(page.locator("figure.ops-chart")).to_have_count(5)
    throughput = page.locator("#chart-throughput")
    expect(throughput.locator(".ops-summary")).to_have_text("1 steps")
    expect(throughput.locator("rect.ops-bar")).to_have_count(1)

    # Keyboard: the window links, then each chart, in order.
    page.get_by_role("link", name="24 h").focus()
    page.keyboard.press("Tab")
    expect(throughput).to_be_focused()
    page.keyboard.press("Tab")
    expect(throughput.locator("summary")).to_be_focused()  # its data, as text
    page.keyboard.press("Enter")
    expect(throughput.locator(".ops-data li")).to_have_count(1)
    page.get_by_role("link", name="1 h").focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"\?hours=1$"))
    expect(page.locator("#ops-charts")).to_have_attribute("data-hours", "1")

    # Live: htmx polls every 10 s; new steps show up without a reload.
    factories.append(
        session.id,
        EventSpec("tool.finished", {"name": "lookup_order", "status": "succeeded"}),
        EventSpec("tool.finished", {"name": "issue_refund", "status": "failed"}),
    )
    expect(throughput.locator(".ops-summary")).to_have_text("3 steps", timeout=25_000)
    expect(page.locator("#chart-failures .ops-summary")).to_have_text("1 failures")
    assert seen == {"dialogs": [], "errors": [], "csp": []}
