"""The desk's new surfaces in chromium: tool outputs as fields with the raw
JSON a click away, each turn's timeline, the keys (`?`), the operations
charts (uPlot: time axis, a value under the pointer and the arrow keys), all
with hostile text shown inert and nothing refused by the CSP."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from agents.events import EventSpec
from tests.dashboard import factories
from tests.dashboard.conftest import login
from tests.dashboard.test_browser import _watch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE_OUTPUT = {
    "id": "ORD-1002",
    "total_cents": 18900,
    "note": '<img src=x onerror="alert(1)"><script>alert(2)</script>',
    "bidi": "refund \u202e0019$ to",
    "token": "Z" * 4000,
    "items": [
        {"sku": "GRND-PRO", "name": "Burr grinder Pro", "quantity": 1},
        {"sku": "<b>bold</b>", "name": "x" * 300, "quantity": 2},
    ],
}


def test_tool_output_fields_timeline_and_keys_on_the_session_page(web, browser, alice):
    call = factories.finished_call(output=json.dumps(HOSTILE_OUTPUT))
    page = login(browser, web, "alice")
    seen = _watch(page)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/sessions/{call.session_id}/")
    expect(page.locator("body[data-live=open]")).to_have_count(1, timeout=10_000)

    output = page.locator(f"#toolcall-{call.id}-output")
    fields = output.locator(".fields")
    expect(fields.locator("dt").first).to_be_visible()
    expect(fields).to_contain_text("$189.00")
    expect(fields).to_contain_text('<img src=x onerror="alert(1)"><script>alert(2)</script>')
    expect(fields).to_contain_text("\\u202e")  # the override shown, not obeyed
    expect(fields.locator("table.field-table tbody tr")).to_have_count(2)
    expect(fields.locator("td").nth(3)).to_have_text("<b>bold</b>")
    raw = output.locator("details.raw pre")
    expect(raw).to_be_hidden()
    output.locator("details.raw summary").click()  # one click to the raw JSON
    expect(raw).to_be_visible()
    expect(raw).to_contain_text('"total_cents": 18900')
    # Nothing hostile became markup, and the long unbroken string wraps.
    for selector in ("img[src=x]", "#turns script", "#turns b"):
        assert page.locator(selector).count() == 0, selector
    box = output.bounding_box()
    assert box["x"] + box["width"] <= 1280

    # The timeline: closed, then `t` opens it; model, tool, model, in order.
    timeline = page.locator(f"#turn-{call.turn_id}-timeline")
    expect(timeline).to_contain_text("Timeline: 3 steps")
    steps = timeline.locator(".wf-step")
    expect(steps.first).to_be_hidden()
    page.locator("h1").click()  # nothing focused that takes keys
    page.keyboard.press("t")
    expect(steps.first).to_be_visible()
    assert [s.get_attribute("data-kind") for s in steps.all()] == ["model", "tool", "model"]
    expect(steps.nth(1)).to_contain_text("lookup_order succeeded")
    expect(steps.nth(1).locator(".wf-ms")).to_have_text("240 ms")
    assert int(steps.nth(1).locator("rect").get_attribute("width")) > 0

    # j selects the turn, o closes its raw outputs, ? shows the keys.
    page.keyboard.press("j")
    expect(page.locator(f"#turn-{call.turn_id}")).to_be_focused()
    page.keyboard.press("o")
    expect(raw).to_be_hidden()
    page.keyboard.press("?")
    help_ = page.locator("#key-help")
    expect(help_).to_be_visible()
    expect(help_.locator("[data-keys-for=session]")).to_be_visible()
    expect(help_.locator("[data-keys-for=operations]")).to_be_hidden()
    page.keyboard.press("Escape")
    expect(help_).to_be_hidden()
    page.get_by_role("button", name=re.compile("Keys")).click()  # the mouse way
    expect(help_).to_be_visible()
    help_.get_by_role("button", name=re.compile("Close")).click()
    expect(help_).to_be_hidden()
    assert seen == {"dialogs": [], "errors": [], "csp": []}


def test_the_keys_show_on_every_desk_page_and_g_goes_places(web, browser, carol):
    page = login(browser, web, "carol")
    seen = _watch(page)
    for url, section in (
        ("/", "sessions"),
        ("/approvals/", "approvals"),
        ("/ops/", "operations"),
        ("/jobs/", "*"),
        ("/account/tokens/", "*"),
        ("/integrations/webhooks/", "*"),
    ):
        page.goto(url)
        page.locator("h1").click()
        page.keyboard.press("?")
        expect(page.locator("#key-help")).to_be_visible()
        expect(page.locator(f"#key-help [data-keys-for='{section}']")).to_be_visible()
        page.keyboard.press("Escape")
        expect(page.locator("#key-help")).to_be_hidden()
    page.keyboard.press("g")
    page.keyboard.press("a")
    expect(page).to_have_url(re.compile(r"/approvals/$"))
    assert seen == {"dialogs": [], "errors": [], "csp": []}


def test_the_operations_charts_have_time_axes_and_show_values_on_hover_and_keys(
    web, browser, alice
):
    session = factories.session(key="ticket:ops", title='<img src=x onerror=alert("t")>')
    factories.append(
        session.id,
        EventSpec("model.replied", {"usage": {"input": 10, "output": 5}}),
        EventSpec("tool.finished", {"name": "lookup_order", "status": "succeeded"}),
        EventSpec("tool.finished", {"name": "issue_refund", "status": "failed"}),
    )
    page = login(browser, web, "alice")
    seen = _watch(page)
    page.goto("/ops/?hours=1")

    chart = page.locator("#chart-throughput")
    expect(chart).to_have_class(re.compile(r"\bdrawn\b"))
    expect(chart.locator("canvas")).to_have_count(1)
    expect(chart.locator(".u-axis")).to_have_count(2)  # time and value
    expect(chart.locator(".ops-svg")).to_be_hidden()  # the no-script bars stay underneath
    assert page.locator("figure.ops-chart.drawn").count() == 5

    # Hover the newest bar (this minute): its time and value.
    over = chart.locator(".u-over")
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
    readout = chart.locator(".ops-readout")
    expect(readout).to_have_text(re.compile(r"^\d\d:\d\d–\d\d:\d\d UTC: 3 steps/min$"))
    expect(chart.locator(".u-legend .u-series").nth(1).locator(".u-value")).to_have_text(
        "3 steps/min"
    )

    # The keyboard reaches the same values.
    chart.focus()
    page.keyboard.press("End")
    expect(readout).to_have_text(re.compile(r"UTC: 3 steps/min$"))
    page.keyboard.press("ArrowLeft")
    expect(readout).to_have_text(re.compile(r"UTC: 0 steps/min$"))
    page.keyboard.press("Home")
    expect(readout).to_have_attribute("data-index", "0")
    assert seen == {"dialogs": [], "errors": [], "csp": []}
