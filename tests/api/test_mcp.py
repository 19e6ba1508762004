"""The MCP endpoint, through the official SDK's client, against a real
Daphne: an external agent asks for an approval and a person decides it."""

from __future__ import annotations

import threading

import pytest
import requests
from playwright.sync_api import expect

from api.models import ApiAudit
from api.tokens import token_create
from approvals.models import Approval
from tests.api import mcp_client
from tests.dashboard.conftest import login
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
REFUND = {"order": "A-77", "amount_eur": 420}


def test_without_a_token_the_endpoint_is_a_401(web):
    response = requests.post(f"{web.url}/mcp", json={"jsonrpc": "2.0", "id": 1}, timeout=10)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_tools_messages_status_and_an_approval_decided_through_the_api(web, alice, bob):
    _, token = token_create(user=alice, name="agent")
    url = f"{web.url}/mcp"
    tools, posted, status, asked = mcp_client.call(
        url,
        token,
        ("list_tools", {}),
        ("post_message", {"session_key": "ticket:501", "text": "Please look at order A-77"}),
        ("session_status", {"session_key": "ticket:501"}),
        (
            "request_approval",
            {"tool_name": "refund", "arguments": REFUND, "reason": "Damaged", "wait_s": 0},
        ),
    )
    assert tools == ["approval_status", "post_message", "request_approval", "session_status"]
    assert posted["turn"] == 1 and status["key"] == "ticket:501"
    assert status["last_turn"]["status"] == "accepted"
    assert asked["status"] == "pending" and asked["arguments"] == REFUND
    approval = Approval.objects.get(pk=asked["approval_id"])
    assert approval.requested_by == alice and approval.tool_call.kind == "external"

    # The desk shows it like any approval: the card, and the session's page.
    from django.test import Client

    desk = Client()
    desk.force_login(bob)
    card = desk.get(f"/approvals/{approval.id}/")
    assert card.status_code == 200 and "Damaged" in card.content.decode()
    assert desk.get(f"/sessions/{approval.session_id}/").status_code == 200
    # The requester may not approve their own request.
    _, bob_token = token_create(user=bob, name="bob")
    body = {"decision": "deny", "expected_hash": approval.arguments_hash, "reason": "No."}
    headers = {"Authorization": f"Bearer {bob_token}"}
    denied = requests.post(
        f"{web.url}/api/v1/approvals/{approval.id}/decision", json=body, headers=headers, timeout=10
    )
    assert denied.status_code == 200, denied.text
    (outcome,) = mcp_client.call(url, token, ("approval_status", {"approval_id": approval.id}))
    assert (outcome["status"], outcome["decided_by"], outcome["reason"]) == ("denied", "bob", "No.")
    tools_called = list(
        ApiAudit.objects.filter(via="mcp", user=alice).order_by("id").values_list("path", "status")
    )
    assert tools_called == [
        ("mcp:post_message", 200),
        ("mcp:session_status", 200),
        ("mcp:request_approval", 200),
        ("mcp:approval_status", 200),
    ]
    # Another user's approval is not theirs to poll.
    (other,) = mcp_client.call(url, bob_token, ("approval_status", {"approval_id": approval.id}))
    assert "no such approval" in other["error"]


@pytest.mark.browser
def test_an_external_agent_waits_while_a_person_approves_in_the_desk(web, browser, alice, bob):
    _, token = token_create(user=alice, name="agent")
    results: list = []
    arguments = {
        "tool_name": "refund",
        "arguments": REFUND,
        "reason": "The parcel arrived damaged; refund in full.",
        "session_key": "partner:crm-17",
        "wait_s": 90,
    }
    client = threading.Thread(
        target=lambda: results.extend(
            mcp_client.call(f"{web.url}/mcp", token, ("request_approval", arguments))
        )
    )
    client.start()
    approval = wait_for(
        lambda: Approval.objects.filter(status="pending").first(), timeout=30, what="the request"
    )
    inbox = login(browser, web, "bob")
    inbox.goto("/approvals/")
    card = inbox.locator(f"#approval-{approval.id}")
    expect(card).to_contain_text("refund")
    expect(card).to_contain_text("The parcel arrived damaged")
    expect(card).to_contain_text("partner:crm-17")
    card.locator("button[data-action=approve]").click()
    expect(card).to_have_count(0, timeout=10_000)
    client.join(60)
    assert not client.is_alive()
    (outcome,) = results
    assert (outcome["status"], outcome["decided_by"]) == ("approved", "bob")
    assert outcome["arguments"] == REFUND
