"""Long text stays readable and fast: a 600,000-character ticket with no
spaces renders its session page and its approval card in under a second in
Chromium (it took 70-90 s), shows its first part with its full length
stated, and opens in full on request."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from tests.dashboard import factories
from tests.dashboard.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LENGTH = 600_000


def _render_s(page, path: str, selector: str) -> float:
    """From navigation to the page loaded and `selector` laid out (its box
    is asked for, which forces layout)."""
    started = time.monotonic()
    page.goto(path, wait_until="load")
    box = page.locator(selector).first.bounding_box()
    elapsed = time.monotonic() - started
    assert box is not None and box["width"] > 0
    return elapsed


def test_a_600k_character_ticket_renders_in_under_a_second_and_nothing_is_hidden(web, browser, bob):
    body = "refund" + "X" * (LENGTH - 12) + "please"  # one unbroken word
    assert len(body) == LENGTH
    call = factories.parked_call(text=body)
    approval = call.approval
    short = factories.parked_call()
    page = login(browser, web, "bob")
    # Warm: the first view of each page compiles its templates in Daphne;
    # what is measured is the long text, not a cold start.
    _render_s(page, f"/sessions/{short.session_id}/", f"#approval-{short.approval.id}")
    _render_s(page, "/approvals/", f"#approval-{short.approval.id}")

    # Best of three: the machine is shared, and a spike elsewhere is not ours.
    session_s = min(
        _render_s(page, f"/sessions/{call.session_id}/", f"#approval-{approval.id}")
        for _ in range(3)
    )
    card_s = min(_render_s(page, "/approvals/", f"#approval-{approval.id}") for _ in range(3))
    print(f"600,000-character ticket: session page {session_s:.2f}s, approval card {card_s:.2f}s")
    assert session_s < 1.0 and card_s < 1.0

    page.goto(f"/sessions/{call.session_id}/")
    fold = page.locator(".msg-input details.fold").first
    expect(fold).to_have_attribute("data-length", str(LENGTH))
    expect(fold.locator("summary")).to_have_text("Show all 600,000 characters (595,000 more)")
    width = page.viewport_size["width"]
    box = page.locator(".msg-input .text").first.bounding_box()
    assert box["width"] <= width  # the unbroken word wraps inside the page
    started = time.monotonic()
    fold.locator("summary").click()
    expect(fold).to_have_attribute("open", "")
    opened_s = time.monotonic() - started
    print(f"opening the remaining 595,000 characters: {opened_s:.2f}s")
    assert "please" in fold.text_content()[-20:]  # the end of the text is there
