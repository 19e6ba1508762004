"""The helpdesk JSON API, and which of its writes are idempotent."""

from __future__ import annotations

import re

from sandbox.app import create_app


def test_listening_line_names_the_real_port(sandbox):
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", sandbox.url)
    assert not sandbox.url.endswith(":0")
    assert sandbox.get("/_health").status == 200


def test_customer_lookup_by_email_includes_orders(sandbox):
    reply = sandbox.get("/helpdesk/customers?email=Alice.Martin@example.com")
    assert reply.status == 200
    customer = reply.json()
    assert customer["id"].startswith("cus_")
    assert customer["name"] == "Alice Martin"
    assert [o["id"] for o in customer["orders"]] == ["ORD-1001", "ORD-1002"]
    assert (
        sandbox.get(f"/helpdesk/customers/{customer['id']}").json()["email"]
        == "alice.martin@example.com"
    )


def test_unknown_customer_is_a_404_with_the_error_shape(sandbox):
    reply = sandbox.get("/helpdesk/customers?email=nobody@example.com")
    assert reply.status == 404
    assert reply.json()["error"]["type"] == "not_found"
    assert reply.json()["error"]["message"]


def test_demo_data_is_fixed_and_seeding_twice_adds_nothing(sandbox):
    assert sandbox.post("/_seed").status == 200
    orders = [sandbox.get(f"/helpdesk/orders/ORD-{n}").json() for n in range(1001, 1016)]
    assert len({o["customer_id"] for o in orders}) == 8
    totals = [o["total_cents"] for o in orders]
    assert min(totals) == 1200 and max(totals) == 89900
    assert orders[0]["payment_intent"] == "pi_ORD1001" and orders[0]["refunded_cents"] == 0


def test_ticket_create_get_and_list_by_status(sandbox):
    ticket = sandbox.ticket("Where is ORD-1002?", subject="Shipping")
    assert isinstance(ticket["id"], int) and ticket["status"] == "open"
    assert (
        ticket["customer_email"] == "alice.martin@example.com"
        and ticket["customer_name"] == "Alice Martin"
    )
    assert sandbox.get(f"/helpdesk/tickets/{ticket['id']}").json()["subject"] == "Shipping"
    assert [t["id"] for t in sandbox.get("/helpdesk/tickets?status=open").json()["tickets"]] == [
        ticket["id"]
    ]
    assert sandbox.get("/helpdesk/tickets?status=pending").json()["tickets"] == []


def test_ticket_ids_are_not_reused_after_reset(sandbox):
    first = sandbox.ticket("one")["id"]
    sandbox.post("/_reset", {"seed_demo": True})
    assert sandbox.ticket("two")["id"] > first


def test_reply_with_same_key_is_stored_once_and_replayed(sandbox):
    ticket = sandbox.ticket("hello")
    path = f"/helpdesk/tickets/{ticket['id']}/replies"
    first = sandbox.post(path, {"body": "Hi Alice"}, headers={"Idempotency-Key": "reply-1"})
    again = sandbox.post(path, {"body": "Hi Alice"}, headers={"Idempotency-Key": "reply-1"})
    assert first.status == again.status == 201
    assert again.text == first.text
    assert (
        again.headers["idempotent-replayed"] == "true"
        and "idempotent-replayed" not in first.headers
    )
    assert sandbox.stats()["replies"] == 1
    assert sandbox.get(f"/helpdesk/tickets/{ticket['id']}").json()["status"] == "pending"


def test_reply_key_reused_with_another_body_is_an_idempotency_error(sandbox):
    ticket = sandbox.ticket("hello")
    path = f"/helpdesk/tickets/{ticket['id']}/replies"
    sandbox.post(path, {"body": "Hi Alice"}, headers={"Idempotency-Key": "reply-2"})
    reply = sandbox.post(path, {"body": "Something else"}, headers={"Idempotency-Key": "reply-2"})
    assert reply.status == 400
    assert reply.json()["error"]["type"] == "idempotency_error"
    assert sandbox.stats()["replies"] == 1


def test_notes_honour_idempotency_keys(sandbox):
    ticket = sandbox.ticket("hello")
    path = f"/helpdesk/tickets/{ticket['id']}/notes"
    for _ in range(3):
        assert (
            sandbox.post(
                path, {"body": "VIP customer"}, headers={"Idempotency-Key": "note-1"}
            ).status
            == 201
        )
    assert (
        sandbox.post(path, {"body": "other"}, headers={"Idempotency-Key": "note-1"}).status == 400
    )
    assert sandbox.stats()["notes"] == 1


def test_escalations_are_not_idempotent(sandbox):
    ticket = sandbox.ticket("hello")
    path = f"/helpdesk/tickets/{ticket['id']}/escalations"
    for _ in range(3):
        reply = sandbox.post(path, {"reason": "angry"}, headers={"Idempotency-Key": "same"})
        assert reply.status == 201 and "idempotent-replayed" not in reply.headers
    detail = sandbox.get(f"/helpdesk/tickets/{ticket['id']}").json()
    assert len(detail["escalations"]) == 3 and detail["status"] == "escalated"
    assert sandbox.stats()["escalations"] == 3


def test_classification_validates_and_sets(sandbox):
    ticket = sandbox.ticket("hello")
    path = f"/helpdesk/tickets/{ticket['id']}/classification"
    assert sandbox.post(path, {"category": "billing", "priority": "meh"}).status == 400
    for _ in range(2):
        reply = sandbox.post(path, {"category": "billing", "priority": "high"})
        assert (
            reply.status == 200
            and reply.json()["category"] == "billing"
            and reply.json()["priority"] == "high"
        )


def test_writes_to_a_missing_ticket_are_404(sandbox):
    assert sandbox.post("/helpdesk/tickets/999999/replies", {"body": "x"}).status == 404
    assert sandbox.post("/helpdesk/tickets/999999/escalations", {"reason": "x"}).status == 404


def test_create_app_returns_an_asgi_app(tmp_path):
    app = create_app(tmp_path / "sandbox.sqlite", seed_demo=True, model_chunk_delay_ms=5)
    assert callable(app)
    assert app.state.sandbox.options.model_chunk_delay_ms == 5
