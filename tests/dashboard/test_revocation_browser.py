"""Logout in one browser context closes the live socket of the same user's
tab in another, and a decision from that stale tab goes to the login page
and changes nothing (Chromium through Playwright, a real Daphne)."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from approvals.models import Approval
from tests.dashboard import factories
from tests.dashboard.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_logout_in_one_context_closes_the_other_tabs_socket_and_its_decision_does_nothing(
    web, browser, bob
):
    approval = factories.pending_approval()
    stale = login(browser, web, "bob")
    closes: list[tuple[float, str]] = []

    def watch(ws) -> None:
        ws.on("close", lambda _: closes.append((time.monotonic(), ws.url)))

    stale.on("websocket", watch)
    stale.goto("/approvals/")
    expect(stale.locator("body[data-live=open]")).to_have_count(1, timeout=10_000)
    expect(stale.locator(f"#approval-{approval.id}")).to_have_count(1)

    other = login(browser, web, "bob")  # another browser context: its own cookie jar
    logged_out = time.monotonic()
    other.locator("header form button[type=submit]").click()  # Log out
    other.wait_for_url(f"{web.url}/login/")

    expect(stale.locator("#live-status")).to_contain_text("signed out", timeout=5_000)
    assert closes, "the stale tab's socket never closed"
    took = closes[0][0] - logged_out
    print(f"socket of the other context closed {took:.2f}s after the logout click")
    assert took < 2.0

    # Reconnecting is refused now: the logout ended this context's login too.
    # A refused handshake reaches the page without the server's code (1006),
    # and the tab still says why it is not live. (The presence socket closes
    # too, and does not try again.)
    deadline = time.monotonic() + 10
    while sum(1 for _, url in closes if "presence" not in url) < 2:
        assert time.monotonic() < deadline, "the stale tab never tried to reconnect"
        stale.wait_for_timeout(50)  # lets Playwright deliver the socket events
    expect(stale.locator("#live-status")).to_contain_text("signed out")
    expect(stale.locator("body[data-live=open]")).to_have_count(0)
    stale.locator(f"#approval-{approval.id} button[data-action=approve]").click()
    stale.wait_for_url(f"{web.url}/login/?next=/approvals/", timeout=10_000)
    assert Approval.objects.get(pk=approval.pk).status == "pending"
