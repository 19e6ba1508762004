"""Ticket and model text is hostile: it renders as inert text in full pages,
htmx partials and WebSocket pushes alike."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from agents.events import EventSpec
from agents.models import Message, ToolCall
from config.asgi import application
from tests.agents.helpers import triggers_bypassed
from tests.dashboard import factories
from tests.dashboard.conftest import ws_headers

XSS = (
    '<script>alert("s")</script><img src=x onerror=alert("i")>'
    "<a href=\"javascript:alert('j')\">click</a>"
    '<div hx-get="/logout" hx-trigger="load">hx</div>"><svg onload=alert("v")>'
)
# What must never reach a browser unescaped.
LIVE_MARKUP = (
    "<script>alert",
    "<img src=x",
    "<svg onload",
    'href="javascript:',
    'hx-get="/logout"',
)


def assert_inert(html: str) -> None:
    for needle in LIVE_MARKUP:
        assert needle not in html, f"{needle!r} reached the page unescaped"
    assert html.count("<script") == html.count('<script src="/static/')  # only our files
    assert "&lt;script&gt;" in html  # the text is there, as text


@pytest.fixture
def hostile(db, carol):
    owner = factories.session(title=XSS, customer=XSS, context={"subject": XSS, "note": XSS})
    factories.turn(owner, text=XSS, reply=XSS)
    call = factories.parked_call(
        owner=owner,
        text=XSS,
        reasoning=XSS,
        arguments={"order_id": "ORD-1002", "amount_cents": 18900, "reason": XSS},
    )
    with triggers_bypassed():  # transcript rows are append-only events: rewriting needs a superuser
        Message.objects.filter(session=owner, position=1).update(
            content=[{"type": "text", "text": XSS}]
        )
    finished = factories.parked_call(
        owner=factories.session(title=XSS),
        name="lookup_order",
        arguments={"order_id": XSS},
        call_status="in_doubt",
    )
    result = [{"type": "tool_result", "tool_use_id": finished.tool_use_id, "content": XSS}]
    spec = EventSpec("tool.closed", {"name": XSS}, finished.turn_id, "w1")
    factories.append(finished.session_id, replace(spec, position=9, role="user", content=result))
    ToolCall.objects.filter(pk=finished.pk).update(result_position=9, output=XSS)
    return owner, call, finished


def test_full_pages_render_hostile_text_inert(client, carol, hostile):
    owner, call, finished = hostile
    client.force_login(carol)
    for url in (
        "/",
        f"/?q={owner.key}",
        f"/sessions/{owner.id}/",
        f"/sessions/{finished.session_id}/",
        "/approvals/",
        f"/approvals/{call.approval.id}/",
        f"/sessions/{owner.id}/history",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        assert "script-src 'self'" in response["Content-Security-Policy"]
        assert_inert(response.content.decode())


def test_htmx_partials_render_hostile_text_inert(client, carol, hostile):
    owner, call, finished = hostile
    client.force_login(carol)
    hx = {"HX-Request": "true"}
    responses = [
        client.get("/", headers=hx),
        client.get(f"/approvals/{call.approval.id}/", headers=hx),
        client.post(
            f"/approvals/{call.approval.id}/check",
            {"edited": json.dumps({"order_id": XSS})},
            headers=hx,
        ),
        client.post(
            f"/sessions/{finished.session_id}/calls/{finished.id}/resolve",
            {"resolution": "nope"},
            headers=hx,
        ),
        client.post(
            f"/approvals/{call.approval.id}/decide",
            {"decision": "deny", "reason": XSS, "expected_hash": call.approval.arguments_hash},
            headers=hx,
        ),
        client.post(
            f"/approvals/{call.approval.id}/decide",
            {"decision": "deny", "reason": "again", "expected_hash": call.approval.arguments_hash},
            headers=hx,
        ),
    ]
    for response in responses:
        assert response.status_code in (200, 400, 409)
        html = response.content.decode()
        for needle in LIVE_MARKUP:
            assert needle not in html
    assert responses[-1].status_code == 409
    assert "&lt;script&gt;" in responses[-1].content.decode()  # the reason, escaped


@pytest.mark.django_db(transaction=True)
def test_websocket_pushes_render_hostile_text_inert(carol, bob):
    owner = factories.session(title=XSS, context={"subject": XSS})
    factories.turn(owner, text=XSS, reply=XSS)
    call = factories.parked_call(owner=owner, text=XSS, reasoning=XSS)
    session_headers, inbox_headers = ws_headers(carol), ws_headers(bob)

    async def scenario():
        ws = WebsocketCommunicator(
            application, f"/ws/sessions/{owner.id}/", headers=session_headers
        )
        assert (await ws.connect(timeout=5))[0]
        await ws.send_json_to({"type": "hello", "after": 0})
        pushed = await ws.receive_json_from(timeout=5)
        await ws.disconnect()
        inbox = WebsocketCommunicator(application, "/ws/approvals/", headers=inbox_headers)
        assert (await inbox.connect(timeout=5))[0]
        await inbox.send_json_to({"type": "hello", "shown": []})
        cards = await inbox.receive_json_from(timeout=5)
        await inbox.disconnect()
        return pushed, cards

    pushed, cards = async_to_sync(scenario)()
    html = "".join(s["html"] for s in pushed["swaps"]) + "".join(c["html"] for c in cards["add"])
    assert f"approval-{call.approval.id}" in html
    assert_inert(html)
