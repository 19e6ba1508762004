"""Presence in real browsers: two people, each in their own browser context
and on their own Daphne process (sharing Redis and Postgres, as in
production), see each other on a session page and on an approval card
within 2 s, and see the other go within seconds of the tab closing. A name
that is hostile markup is shown as text."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.dashboard import factories
from tests.dashboard.conftest import daphne, login
from tests.dashboard.test_a11y_browser import serious_violations
from tests.dashboard.test_browser import _watch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SEEN_MS = 2_000  # the bound: the other's presence within 2 s
GONE_MS = 5_000  # a closed tab: gone within a few seconds

HOSTILE_NAME = '<img src=x onerror="alert(1)">\u202eCarol'


@pytest.fixture
def web2(stack_env, run_dir):
    """A second Daphne process on the same database and Redis."""
    with daphne(stack_env, run_dir) as started:
        yield started


def _presence(page: Page, topic: str):
    return page.locator(f'[data-presence="{topic}"]')


def _ready(page: Page, topic: str) -> None:
    # The page is live (desk.js) and has sent its first "here" (presence.js
    # draws nothing until someone else comes, so wait on the socket itself).
    expect(page.locator("main")).to_be_visible()
    expect(_presence(page, topic)).to_have_count(1)


def test_two_viewers_of_a_session_see_each_other_within_2s_and_a_closed_tab_goes(
    web, web2, browser, alice, bob
):
    call = factories.parked_call()
    topic = f"session:{call.session_id}"
    first = login(browser, web, "alice")
    second = login(browser, web2, "bob")
    seen = _watch(first), _watch(second)

    first.goto(f"/sessions/{call.session_id}/")
    _ready(first, topic)
    expect(_presence(first, topic)).to_be_hidden()  # alone: nothing to say
    second.goto(f"/sessions/{call.session_id}/")
    _ready(second, topic)

    expect(_presence(first, topic)).to_contain_text("bob", timeout=SEEN_MS)
    expect(_presence(second, topic)).to_contain_text("alice", timeout=SEEN_MS)
    expect(_presence(first, topic).locator(".avatar")).to_have_text("BO")
    # The inline approval card on the page shows them too.
    card = f"approval:{call.approval.id}"
    expect(_presence(first, card)).to_contain_text("bob", timeout=SEEN_MS)
    assert serious_violations(first) == []  # axe, with the names shown

    second.close()  # the tab goes
    expect(_presence(first, topic)).to_be_hidden(timeout=GONE_MS)
    expect(_presence(first, card)).to_be_hidden(timeout=GONE_MS)
    assert seen[0] == {"dialogs": [], "errors": [], "csp": []}
    assert seen[1] == {"dialogs": [], "errors": [], "csp": []}


def test_two_approvers_on_one_card_see_each_other_and_a_hostile_name_stays_text(
    web, web2, browser, bob, carol
):
    carol.first_name = HOSTILE_NAME
    carol.save()
    approval = factories.pending_approval()
    other = factories.pending_approval()
    topic = f"approval:{approval.id}"
    first = login(browser, web, "bob")
    second = login(browser, web2, "carol")
    seen = _watch(first), _watch(second)

    first.goto(f"/approvals/{approval.id}/")
    _ready(first, topic)
    second.goto(f"/approvals/{approval.id}/")
    _ready(second, topic)

    shown = _presence(first, topic)
    expect(shown).to_contain_text(HOSTILE_NAME, timeout=SEEN_MS)  # as text, every character
    expect(_presence(second, topic)).to_contain_text("bob", timeout=SEEN_MS)
    assert shown.locator("img").count() == 0
    assert first.locator("img[src=x]").count() == 0

    # In the inbox carol is on the card she has selected, not on every card.
    second.goto("/approvals/")
    expect(second.locator("body[data-live=open]")).to_have_count(1, timeout=10_000)
    selected = second.locator(".approval.selected")
    expect(selected).to_have_count(1)
    on = int(selected.get_attribute("data-approval"))
    off = other.id if on == approval.id else approval.id
    expect(_presence(second, topic)).to_contain_text("bob", timeout=SEEN_MS)
    if on == approval.id:
        expect(shown).to_contain_text(re.compile("Carol"), timeout=SEEN_MS)
    else:
        expect(shown).to_be_hidden(timeout=GONE_MS)
    first.goto(f"/approvals/{off}/")
    expect(_presence(first, f"approval:{off}")).to_be_hidden()
    second.keyboard.press("j" if on < off else "k")  # move to the other card
    expect(second.locator(f"#approval-{off}.selected")).to_have_count(1)
    expect(_presence(first, f"approval:{off}")).to_contain_text("Carol", timeout=SEEN_MS)

    second.close()
    expect(_presence(first, f"approval:{off}")).to_be_hidden(timeout=GONE_MS)
    assert seen[0] == {"dialogs": [], "errors": [], "csp": []}
    assert seen[1] == {"dialogs": [], "errors": [], "csp": []}
