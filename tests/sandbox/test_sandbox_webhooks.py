"""Signed webhooks for new tickets and customer replies, and the ticket generator."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json

from sandbox.generator import ticket_specs
from sandbox.webhooks import sign

SECRET = "whsec_test"


def _verify(headers: dict[str, str], body: bytes, secret: str = SECRET) -> dict:
    """What a receiver (Agentdesk) does: recompute the HMAC and compare."""
    parts = dict(p.split("=", 1) for p in headers["agentdesk-signature"].split(","))
    expected = hmac.new(
        secret.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256
    ).hexdigest()
    assert hmac.compare_digest(parts["v1"], expected)
    return json.loads(body)


def test_sign_matches_the_documented_scheme():
    body = b'{"id":"evt_1"}'
    expected = hmac.new(b"s3cret", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert sign("s3cret", body, 1700000000) == f"t=1700000000,v1={expected}"
    assert sign("s3cret", body.decode(), 1700000000) == sign("s3cret", body, 1700000000)


def test_ticket_created_and_replied_webhooks_are_signed(start_sandbox, webhook_receiver, wait):
    sandbox = start_sandbox(
        "--seed-demo", "--webhook-url", webhook_receiver.url, "--webhook-secret", SECRET
    )
    ticket = sandbox.ticket("Where is ORD-1002?")
    sandbox.post(f"/helpdesk/tickets/{ticket['id']}/customer_reply", {"body": "Any news?"})
    wait(lambda: len(webhook_receiver.calls) == 2, what="two webhooks")
    events = sorted((_verify(h, b) for h, b in webhook_receiver.calls), key=lambda e: e["type"])
    created, replied = events
    assert created["type"] == "ticket.created" and created["id"].startswith("evt_")
    assert (
        created["ticket"]["id"] == ticket["id"]
        and created["ticket"]["customer_email"] == "alice.martin@example.com"
    )
    assert created["ticket"]["customer_name"] == "Alice Martin" and created["message"] == {
        "body": "Where is ORD-1002?"
    }
    assert replied["type"] == "ticket.replied" and replied["message"] == {"body": "Any news?"}
    assert isinstance(replied["created"], int)
    assert webhook_receiver.calls[0][0]["content-type"] == "application/json"


def test_failed_deliveries_are_retried_with_backoff(start_sandbox, webhook_receiver, wait):
    webhook_receiver.fail_first = 2
    sandbox = start_sandbox(
        "--seed-demo", "--webhook-url", webhook_receiver.url, "--webhook-secret", SECRET
    )
    sandbox.ticket("hello")
    wait(lambda: webhook_receiver.calls, timeout=10, what="the third attempt")
    assert webhook_receiver.attempts == 3
    wait(
        lambda: sandbox.stats()["webhooks"] == {"delivered": 1}, what="the delivery to be recorded"
    )


def test_deliveries_share_a_kept_alive_connection_and_outlive_its_idle_close(
    start_sandbox, keep_alive_receiver, wait
):
    receiver = keep_alive_receiver
    sandbox = start_sandbox(
        "--seed-demo", "--webhook-url", receiver.url, "--webhook-secret", SECRET
    )
    for n in (1, 2):
        sandbox.ticket(f"hello {n}")
        wait(lambda n=n: len(receiver.calls) == n, what=f"webhook {n}")
    assert receiver.connections == 1  # the second went on the first's connection
    wait(lambda: receiver.idle_closed >= 1, what="the receiver closing the idle connection")
    sandbox.ticket("hello 3")  # its connection is gone: sent again at once on a new one
    wait(lambda: len(receiver.calls) == 3, what="webhook 3")
    assert receiver.attempts == 3  # no attempt failed, none was retried later
    wait(lambda: sandbox.stats()["webhooks"] == {"delivered": 3}, what="three deliveries")


def test_generator_spec_is_deterministic_and_varied():
    first = list(itertools.islice(ticket_specs(7), 40))
    assert first == list(itertools.islice(ticket_specs(7), 40))
    assert first != list(itertools.islice(ticket_specs(8), 40))
    subjects = " ".join(s["subject"] for s in first)
    for word in ("Refund", "Where is", "log in", "Charged twice", "URGENT"):
        assert word in subjects


def test_generator_creates_tickets_at_the_rate_and_fires_webhooks(
    start_sandbox, webhook_receiver, wait
):
    sandbox = start_sandbox(
        "--rate",
        "1200",
        "--seed",
        "7",
        "--webhook-url",
        webhook_receiver.url,
        "--webhook-secret",
        SECRET,
    )
    tickets = wait(
        lambda: (t := sandbox.get("/helpdesk/tickets").json()["tickets"]) and len(t) >= 20 and t,
        timeout=10,
        what="20 tickets",
    )
    expected = list(itertools.islice(ticket_specs(7), len(tickets)))
    assert [t["subject"] for t in tickets] == [s["subject"] for s in expected]
    wait(lambda: len(webhook_receiver.calls) >= 20, what="their webhooks")
    assert {_verify(h, b)["type"] for h, b in webhook_receiver.calls} == {"ticket.created"}
