"""The desk in a real browser: Debian's chromium (headless, through
Playwright) against a real Daphne, real Celery workers and the sandbox."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from agents.models import Event, Message, Turn
from approvals.models import Approval
from tests.agents.helpers import deliver_ticket, wait_turn
from tests.dashboard.conftest import login
from tests.processes import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_S = 45_000  # ms: a whole turn through a real worker, on a busy 2-core machine


def _watch(page: Page) -> dict[str, list]:
    """Collect what must never happen: dialogs (an alert ran), script errors,
    CSP violations."""
    seen: dict[str, list] = {"dialogs": [], "errors": [], "csp": []}
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on(
        "console",
        lambda m: seen["csp"].append(m.text) if "Content Security Policy" in m.text else None,
    )
    return seen


def _live(page: Page) -> None:
    expect(page.locator("body[data-live=open]")).to_have_count(1, timeout=10_000)


def _assistant_texts(session_id: int) -> list[str]:
    texts = []
    for row in Message.objects.filter(session_id=session_id, role="assistant").order_by("position"):
        texts += [b["text"] for b in row.content if b.get("type") == "text" and b["text"]]
    return texts


def _shown_seqs(page: Page) -> list[int]:
    return [int(s) for s in page.locator("#events li .seq").all_inner_texts()]


def _longer_than(n: int) -> re.Pattern:
    # Waits go through locators: a JavaScript predicate would need eval,
    # which the page's CSP rightly refuses.
    return re.compile(rf"^[\s\S]{{{n + 1},}}$")


def test_approver_sees_an_approval_arrive_live_and_approves_it_with_the_keyboard(
    sandbox, workers, web, browser, bob
):
    workers.start()
    inbox = login(browser, web, "bob")
    seen = _watch(inbox)
    inbox.goto("/approvals/")
    _live(inbox)

    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Broken grinder",
        body="The grinder from order ORD-1002 arrived broken. Please refund it, $189.",
        order_id="ORD-1002",
    )
    session = deliver_ticket(ticket)
    card = inbox.locator(".approval")
    expect(card).to_have_count(1, timeout=LIVE_S)
    expect(card).to_contain_text("issue_refund")
    expect(card).to_contain_text('"amount_cents": 18900')
    expect(card).to_contain_text("refund_over_limit")
    approval = Approval.objects.get(session=session)

    # The session page, open in another tab, follows the turn.
    watcher = inbox.context.new_page()
    watcher.goto(f"/sessions/{session.id}/")
    _live(watcher)
    turn_status = watcher.locator(f"#turn-{approval.turn_id} [data-turn-status]")
    expect(turn_status).to_have_attribute("data-turn-status", "waiting_for_approval")

    inbox.bring_to_front()
    inbox.keyboard.press("j")
    inbox.keyboard.press("a")  # arms: focuses Approve
    expect(inbox.locator(f"#approval-{approval.id} button[data-action=approve]")).to_be_focused()
    inbox.keyboard.press("Enter")

    expect(inbox.locator(f"#approval-{approval.id}")).to_have_count(0, timeout=10_000)
    expect(inbox.locator("#inbox-status")).to_contain_text("approved by bob")
    expect(turn_status).to_have_attribute("data-turn-status", "succeeded", timeout=LIVE_S)
    expect(watcher.locator(f"#approval-{approval.id}")).to_contain_text("Approved by bob")

    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decided_by == bob
    assert [r["amount"] for r in sandbox.refunds()] == [18900]
    assert seen == {"dialogs": [], "errors": [], "csp": []}


def test_support_watches_text_stream_and_a_reload_mid_turn_shows_the_same_state(
    sandbox, workers, web, browser, alice
):
    workers.start()
    page = login(browser, web, "alice")
    seen = _watch(page)
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Where is my order?",
        body="Order ORD-1001 has not arrived yet. Where is it? [[sandbox:slow]]",
        order_id="ORD-1001",
    )
    session = deliver_ticket(ticket)
    page.goto(f"/sessions/{session.id}/")
    _live(page)

    live_text = page.locator("#live-text .text")
    samples = []
    # Text streams in: seen, then seen growing, without a reload.
    expect(live_text).to_have_text(_longer_than(5), timeout=LIVE_S)
    samples.append(live_text.text_content())
    expect(live_text).to_have_text(_longer_than(len(samples[0])), timeout=10_000)
    samples.append(live_text.text_content())

    page.reload()  # mid-turn, mid-reply
    _live(page)
    seqs_after_reload = _shown_seqs(page)
    assert seqs_after_reload == list(range(1, len(seqs_after_reload) + 1))
    expect(live_text).to_have_text(_longer_than(5), timeout=LIVE_S)
    samples.append(live_text.text_content())

    turn = wait_turn(session, timeout=90)
    assert turn.status == "succeeded", workers.logs()
    expect(page.locator(f"#turn-{turn.id} [data-turn-status]")).to_have_attribute(
        "data-turn-status", "succeeded", timeout=10_000
    )
    expect(page.locator("#live-text")).to_be_hidden()

    replies = _assistant_texts(session.id)
    # Whatever was on screen while streaming was the start of a recorded
    # reply: nothing missing in between, nothing twice.
    for sample in samples:
        assert any(r.startswith(sample) for r in replies), (sample, replies)
    shown = page.locator("#turns").inner_text()
    for reply in replies:
        assert shown.count(reply) == 1, reply
    last = Event.objects.filter(session=session).order_by("-seq").first().seq
    wait_for(lambda: _shown_seqs(page) == list(range(1, last + 1)), what="every event once")
    assert seen == {"dialogs": [], "errors": [], "csp": []}


XSS_SUBJECT = '<img src=x onerror="alert(1)">Broken'
XSS_BODY = (
    '<script>alert(2)</script> Hello <a href="javascript:alert(3)">link</a> '
    '<div hx-get="/logout" hx-trigger="load">x</div> ORD-1001'
)


def test_an_xss_payload_in_a_ticket_renders_as_text_and_runs_nothing(sandbox, web, browser, alice):
    ticket = sandbox.ticket(email="alice.martin@example.com", subject=XSS_SUBJECT, body=XSS_BODY)
    session = deliver_ticket(ticket)
    page = login(browser, web, "alice")
    seen = _watch(page)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))

    expect(page.locator(f"#session-{session.id}")).to_contain_text(XSS_SUBJECT)
    page.goto(f"/sessions/{session.id}/")
    _live(page)
    expect(page.locator("#turns")).to_contain_text("<script>alert(2)</script>")
    expect(page.locator("#turns")).to_contain_text('hx-get="/logout"')

    # The same through a WebSocket push: a staff message arrives as a new turn.
    page.fill("#message-text", XSS_BODY + " again")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#turns .turn")).to_have_count(2, timeout=10_000)
    expect(page.locator("#turns .turn").nth(1)).to_contain_text("<script>alert(2)</script>")
    assert Turn.objects.filter(session=session).count() == 2

    for selector in ("img[src=x]", "#turns script", "a[href^=javascript]", "[hx-get='/logout']"):
        assert page.locator(selector).count() == 0, selector
    assert not any("/logout" in url or url.startswith("javascript") for url in requests)
    expect(page.locator(".top .who")).to_have_text("alice")  # still logged in
    assert seen == {"dialogs": [], "errors": [], "csp": []}
    assert re.search(r"ORD-1001", page.locator("#turns").inner_text())


def test_sessions_list_shows_new_sessions_and_status_changes_live(web, browser, alice):
    from tests.dashboard import factories

    page = login(browser, web, "alice")
    _live(page)
    call = factories.parked_call()
    row = page.locator(f"#session-{call.session_id}")
    expect(row).to_contain_text("Waiting", timeout=10_000)
    expect(page.locator(".count[data-status=waiting_for_approval]")).to_have_text("1")
    page.goto(f"/sessions/{call.session_id}/")  # cancel it from its page...
    page.click("text=Cancel turn")
    expect(page.locator("#session-status")).to_have_text("Canceled", timeout=10_000)
    page.go_back()  # ...and the list shows it canceled
    expect(page.locator(f"#session-{call.session_id}")).to_contain_text("Canceled", timeout=10_000)


def test_edit_and_approve_shows_a_diff_and_a_stale_decision_gets_the_409_message(
    web, browser, bob, carol
):
    from tests.dashboard import factories

    approval = factories.pending_approval()
    stale = login(browser, web, "carol")
    stale.goto(f"/approvals/{approval.id}/")  # one card, not live: it will go stale
    inbox = login(browser, web, "bob")
    seen = _watch(inbox)
    inbox.goto("/approvals/")
    _live(inbox)

    inbox.keyboard.press("e")
    box = inbox.locator(f"#edit-{approval.id}")
    expect(box).to_be_focused()
    edited = '{"order_id": "ORD-1002", "amount_cents": 9000, "reason": "Arrived broken"}'
    box.fill(edited)
    check = inbox.locator(f"#approval-{approval.id}-check")
    expect(check).to_contain_text("Fits the tool's schema", timeout=10_000)
    expect(check.locator(".diff-changed")).to_contain_text("amount_cents")
    expect(check.locator(".diff-changed .new")).to_have_text("9000")
    box.press("Control+Enter")
    expect(inbox.locator(f"#approval-{approval.id}")).to_have_count(0, timeout=10_000)

    approval.refresh_from_db()
    assert approval.status == "approved" and approval.edited_arguments["amount_cents"] == 9000

    stale.keyboard.press("a")
    stale.keyboard.press("Enter")
    card = stale.locator(f"#approval-{approval.id}")
    expect(card.locator(".error")).to_contain_text("already approved", timeout=10_000)
    expect(card).to_contain_text("Approved by bob")
    assert seen == {"dialogs": [], "errors": [], "csp": []}
