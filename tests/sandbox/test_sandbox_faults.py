"""Fault injection: each kind, per target, seen through the real clients."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from urllib.parse import urlencode, urlsplit

import anthropic
import pytest
import stripe

from tests.sandbox.conftest import wait_until

REFUND = {"payment_intent": "pi_ORD1001", "amount": 1500, "reason": "requested_by_customer"}
HELLO = [{"role": "user", "content": "hello"}]


def test_messages_status_fault_answers_anthropic_shape_without_doing_the_work(
    sandbox, anthropic_client
):
    sandbox.fault(target="messages", kind="status", status=429, retry_after=7)
    with pytest.raises(anthropic.RateLimitError) as raised:
        anthropic_client.messages.create(model="m", max_tokens=10, messages=HELLO)
    assert raised.value.response.headers["retry-after"] == "7"
    assert raised.value.body["error"]["type"] == "rate_limit_error"
    anthropic_client.messages.create(model="m", max_tokens=10, messages=HELLO)  # count=1: used up
    assert sandbox.stats()["model_requests"]["by_outcome"] == {"fault_429": 1, "end_turn": 1}


def test_overloaded_529(sandbox, anthropic_client):
    sandbox.fault(target="messages", kind="status", status=529)
    with pytest.raises(anthropic.APIStatusError) as raised:
        anthropic_client.messages.create(model="m", max_tokens=10, messages=HELLO)
    assert (
        raised.value.status_code == 529 and raised.value.body["error"]["type"] == "overloaded_error"
    )


def test_sdk_retries_through_counted_faults(sandbox):
    sandbox.fault(target="messages", kind="status", status=500, count=2, retry_after=0)
    client = anthropic.Anthropic(api_key="k", base_url=sandbox.url, max_retries=2)
    assert (
        client.messages.create(model="m", max_tokens=10, messages=HELLO).stop_reason == "end_turn"
    )
    assert sandbox.stats()["faults_applied"] == {"messages.status": 2}


def test_rules_are_consumed_in_order_and_can_be_listed_and_cleared(sandbox):
    sandbox.fault(target="helpdesk", kind="status", status=429, count=2)
    sandbox.fault(target="helpdesk", kind="status", status=500)
    assert [(f["status"], f["remaining"]) for f in sandbox.get("/_faults").json()["faults"]] == [
        (429, 2),
        (500, 1),
    ]
    statuses = [sandbox.get("/helpdesk/orders/ORD-1001").status for _ in range(4)]
    assert statuses == [429, 429, 500, 200]
    sandbox.fault(target="helpdesk", kind="status", status=500)
    assert sandbox.request("DELETE", "/_faults").status == 200
    assert sandbox.get("/_faults").json()["faults"] == []


def test_match_path_prefix_limits_a_rule(sandbox):
    sandbox.fault(
        target="helpdesk", kind="status", status=409, match={"path_prefix": "/helpdesk/tickets"}
    )
    assert sandbox.get("/helpdesk/orders/ORD-1001").status == 200
    reply = sandbox.get("/helpdesk/tickets")
    assert reply.status == 409 and reply.json()["error"]["type"] == "conflict"


def test_bad_fault_specs_are_refused(sandbox):
    assert (
        sandbox.post("/_faults", {"target": "moon", "kind": "status", "status": 500}).status == 400
    )
    assert sandbox.post("/_faults", {"target": "payments", "kind": "status"}).status == 400


def test_payments_status_fault_uses_stripe_errors_and_creates_nothing(sandbox, stripe_client):
    sandbox.fault(target="payments", kind="status", status=500)
    with pytest.raises(stripe.APIError) as raised:
        stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "f-500"})
    assert (
        raised.value.http_status == 500 and raised.value.json_body["error"]["type"] == "api_error"
    )
    sandbox.fault(target="payments", kind="status", status=429)
    with pytest.raises(stripe.RateLimitError):
        stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "f-500"})
    assert sandbox.stats()["refunds"]["total"] == 0
    assert (
        stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "f-500"}).amount
        == 1500
    )


def test_latency_delays_then_does_the_work(sandbox):
    sandbox.fault(target="helpdesk", kind="latency", latency_ms=400)
    started = time.monotonic()
    assert sandbox.get("/helpdesk/orders/ORD-1001").status == 200
    assert time.monotonic() - started >= 0.4


def _raw_post(
    url: str, path: str, body: bytes, headers: dict[str, str]
) -> http.client.HTTPResponse:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("POST", path, body=body, headers=headers)
    return conn.getresponse()


def test_drop_after_commit_refunds_then_drops_the_connection(sandbox, stripe_client):
    sandbox.fault(target="payments", kind="drop_after_commit")
    headers = {
        "Authorization": "Bearer sk_test_sandbox",
        "Idempotency-Key": "f-drop",
        "Content-Type": "application/x-www-form-urlencoded",
    }
    with pytest.raises(http.client.RemoteDisconnected):
        _raw_post(
            sandbox.url,
            "/v1/refunds",
            b"payment_intent=pi_ORD1001&amount=1500&reason=requested_by_customer",
            headers,
        )
    assert sandbox.stats()["refunds"]["total"] == 1  # committed although the client saw nothing
    replay = stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "f-drop"})
    assert replay.last_response.headers["Idempotent-Replayed"] == "true"
    assert sandbox.stats()["refunds"]["by_idempotency_key"] == {"f-drop": 1}


def test_drop_after_commit_is_a_connection_error_to_the_stripe_sdk(sandbox, stripe_client):
    sandbox.fault(target="payments", kind="drop_after_commit")
    with pytest.raises(stripe.APIConnectionError):
        stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "f-sdk"})
    retrying = stripe.StripeClient(
        "sk_test_sandbox", base_addresses={"api": sandbox.url}, max_network_retries=2
    )
    sandbox.fault(target="payments", kind="drop_after_commit")
    retrying.v1.refunds.create(
        params={**REFUND, "amount": 100}, options={"idempotency_key": "f-sdk-2"}
    )
    assert sandbox.stats()["refunds"]["by_idempotency_key"] == {"f-sdk": 1, "f-sdk-2": 1}


def test_drop_after_commit_on_a_reply_keeps_the_reply(sandbox):
    ticket = sandbox.ticket("hi")
    sandbox.fault(
        target="helpdesk", kind="drop_after_commit", match={"path_prefix": "/helpdesk/tickets/"}
    )
    with pytest.raises(http.client.RemoteDisconnected):
        sandbox.post(
            f"/helpdesk/tickets/{ticket['id']}/replies",
            {"body": "Hi"},
            headers={"Idempotency-Key": "r-drop"},
        )
    again = sandbox.post(
        f"/helpdesk/tickets/{ticket['id']}/replies",
        {"body": "Hi"},
        headers={"Idempotency-Key": "r-drop"},
    )
    assert again.headers["idempotent-replayed"] == "true" and sandbox.stats()["replies"] == 1


def test_drop_after_commit_on_messages_is_a_connection_error(sandbox, anthropic_client):
    sandbox.fault(target="messages", kind="drop_after_commit")
    with pytest.raises(anthropic.APIConnectionError):
        anthropic_client.messages.create(model="m", max_tokens=10, messages=HELLO)
    assert sandbox.stats()["model_requests"]["by_outcome"] == {
        "end_turn": 1,
        "fault_drop_after_commit": 1,
    }


def test_stall_streams_the_start_then_goes_silent_then_closes(
    sandbox, anthropic_client, triage_tools
):
    sandbox.fault(target="messages", kind="stall", latency_ms=1000)
    seen: list[str] = []
    started = time.monotonic()
    messages = [{"role": "user", "content": "alice.martin@example.com help"}]
    with pytest.raises(Exception) as raised:  # noqa: B017 - the transport's own error type
        for event in anthropic_client.messages.create(
            model="m", max_tokens=10, tools=triage_tools, messages=messages, stream=True
        ):
            seen.append(event.type)
    assert "message_start" in seen and "message_stop" not in seen
    assert time.monotonic() - started >= 1.0
    assert "closed" in str(raised.value).lower() or "incomplete" in str(raised.value).lower()


def test_stall_without_streaming_holds_then_drops(sandbox, anthropic_client):
    sandbox.fault(target="messages", kind="stall", latency_ms=500)
    started = time.monotonic()
    with pytest.raises(anthropic.APIConnectionError):
        anthropic_client.messages.create(model="m", max_tokens=10, messages=HELLO)
    assert time.monotonic() - started >= 0.5


def _hold(sandbox) -> dict:
    return next(f for f in sandbox.get("/_faults").json()["faults"] if f["kind"] == "hold")


def test_a_hold_keeps_a_request_until_released_then_does_the_work(sandbox, stripe_client):
    """phase after_commit: the refund is made at once, its answer held."""
    sandbox.fault(target="payments", kind="hold", phase="after_commit")
    rule = _hold(sandbox)["id"]
    done: list = []
    thread = threading.Thread(
        target=lambda: done.append(
            stripe_client.v1.refunds.create(params=REFUND, options={"idempotency_key": "k-hold"})
        )
    )
    thread.start()
    wait_until(lambda: _hold(sandbox)["holding"] == 1, what="the refund held")
    assert len(sandbox.get("/_refunds").json()["refunds"]) == 1 and not done
    assert sandbox.request("POST", f"/_faults/{rule}/release").status == 200
    thread.join(10)
    assert done and done[0].amount == 1500
    assert sandbox.stats()["requests_by_key"] == {"k-hold": 1}
    assert sandbox.get("/_faults").json()["faults"] == []  # used up and released


def test_a_held_request_whose_client_goes_away_never_runs(sandbox):
    """phase before: the caller dies while it is held; the work is not done."""
    sandbox.fault(
        target="payments", kind="hold", match={"path_prefix": "/v1/refunds", "method": "POST"}
    )
    body = urlencode({**REFUND, "amount": 700}).encode()
    parts = urlsplit(sandbox.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Idempotency-Key": "k-gone"}
    conn.request("POST", "/v1/refunds", body=body, headers=headers)
    wait_until(lambda: _hold(sandbox)["holding"] == 1, what="the request held")
    conn.sock.shutdown(socket.SHUT_RDWR)  # as a killed process's socket closes
    conn.close()
    wait_until(lambda: _hold(sandbox)["abandoned"] == 1, what="the hold to see the client go")
    assert sandbox.get("/_refunds").json()["refunds"] == []
    assert sandbox.stats()["requests_by_key"] == {}
