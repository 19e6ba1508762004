"""The helpdesk webhook: only signed, fresh, first deliveries start turns."""

from __future__ import annotations

import json
import time

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agents.models import InboundDelivery, Session, Turn
from api.inbound import sign
from tests.agents.helpers import at_once

pytestmark = pytest.mark.django_db

TICKET = {"id": 4812, "subject": "Refund", "customer_email": "a@example.com", "body": "hi"}


def _body(event_id: str = "evt_1") -> bytes:
    return json.dumps({"id": event_id, "type": "ticket.created", "ticket": TICKET}).encode()


def _post(client, body: bytes, signature: str | None):
    headers = {"Agentdesk-Signature": signature} if signature is not None else {}
    return client.post(
        "/api/inbound/helpdesk", body, content_type="application/json", headers=headers
    )


def test_a_signed_delivery_starts_a_turn_for_the_ticket(client, broker):
    body = _body()
    response = _post(client, body, sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time())))
    assert response.status_code == 202
    session = Session.objects.get(key="ticket:4812")
    assert session.customer == "a@example.com" and session.context["subject"] == "Refund"
    assert Turn.objects.get(session=session).trigger == "customer_message"


@pytest.mark.parametrize(
    "signature",
    [
        None,
        "",
        "t=1,v1=deadbeef",
        "garbage",
    ],
)
def test_unsigned_or_badly_signed_calls_change_nothing(client, signature):
    assert _post(client, _body(), signature).status_code == 403
    assert not Session.objects.exists() and not InboundDelivery.objects.exists()


def test_a_stale_signature_is_refused(client):
    body = _body()
    old = int(time.time()) - settings.AGENTDESK_WEBHOOK_TOLERANCE_S - 5
    assert (
        _post(client, body, sign(settings.AGENTDESK_WEBHOOK_SECRET, body, old)).status_code == 403
    )
    assert not Session.objects.exists()


def test_a_signature_for_another_body_is_refused(client):
    signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, _body("evt_other"), int(time.time()))
    assert _post(client, _body(), signature).status_code == 403
    assert not Session.objects.exists()


def test_a_replayed_delivery_gets_the_first_answer_and_starts_nothing(client, broker):
    """A sender that lost our 202 retries: it hears the same 202, and its
    delivery counts as done (a 403 would mark it failed)."""
    body = _body()
    signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()))
    first = _post(client, body, signature)
    assert first.status_code == 202
    later = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()) + 1)
    again = _post(client, body, later)
    assert (again.status_code, again.json()) == (202, first.json())
    assert again["Idempotent-Replayed"] == "true"
    assert Turn.objects.count() == 1 and InboundDelivery.objects.count() == 1


def test_a_delivery_accepted_before_answers_were_kept_is_a_2xx_that_does_nothing(client, broker):
    body = _body("evt_old")
    InboundDelivery.objects.create(event_id="evt_old")
    signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()))
    response = _post(client, body, signature)
    assert (response.status_code, response.json()) == (200, {"duplicate": True})
    assert not Turn.objects.exists()


def test_a_replay_with_a_bad_signature_is_still_refused(client, broker):
    body = _body()
    assert _post(client, body, sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time())))
    assert _post(client, body, "t=1,v1=deadbeef").status_code == 403


def test_malformed_body_with_a_valid_signature_is_a_400(client):
    body = b'{"not": "a webhook"}'
    signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()))
    assert _post(client, body, signature).status_code == 400
    assert not Session.objects.exists()


def test_the_messages_api_needs_the_bearer_token(client, settings, broker):
    settings.AGENTDESK_API_TOKEN = "s3cret"
    url = "/api/sessions/customer:77/messages"
    payload = json.dumps({"text": "hello"})
    assert client.post(url, payload, content_type="application/json").status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert (
        client.post(url, payload, content_type="application/json", headers=wrong).status_code == 401
    )
    right = {"Authorization": "Bearer s3cret"}
    response = client.post(url, payload, content_type="application/json", headers=right)
    assert response.status_code == 202 and response.json()["session"] == "customer:77"
    bad = client.post(url, "{}", content_type="application/json", headers=right)
    assert bad.status_code == 400
    too_long = "/api/sessions/" + "k" * 201 + "/messages"
    refused = client.post(too_long, payload, content_type="application/json", headers=right)
    assert refused.status_code == 400 and not Session.objects.filter(key__startswith="kkk")


def _statements(client, body: bytes) -> tuple[int, list[str]]:
    signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()))
    with CaptureQueriesContext(connection) as queries:
        response = _post(client, body, signature)
    return response.status_code, [q["sql"] for q in queries.captured_queries]


def test_a_new_tickets_delivery_writes_once_and_skips_the_reply_path(client, broker):
    """A brand-new session: the delivery row, the session with its runtime
    row, first turn and event in one statement, and the kept answer; no
    savepoint of its own, and nothing looked up for a customer's reply (no open turn
    to queue behind, no follow-up to cancel on a session that did not exist)."""
    status, statements = _statements(client, _body("evt_new"))
    assert status == 202
    assert not [s for s in statements if "agents_followup" in s or 'agents_turn" WHERE' in s]
    # (The view's transaction is a savepoint inside the test's own.)
    writes = [s for s in statements if not s.startswith(("SAVEPOINT", "RELEASE"))]
    assert len(writes) == 3, writes  # delivery, session + turn, answer
    assert len(statements) - len(writes) == 2  # the view's, and no other
    reply = json.dumps(
        {"id": "evt_reply", "type": "ticket.replied", "ticket": TICKET, "message": {"body": "?"}}
    ).encode()
    status, statements = _statements(client, reply)
    assert status == 202  # the customer's reply to an existing session takes its path
    assert [s for s in statements if "agents_followup" in s]
    assert Turn.objects.filter(session__key="ticket:4812").count() == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_deliveries_of_one_event_start_one_turn(broker):
    """The sender's retries race its first attempt: one turn, and every one
    of them hears the first answer (the later ones wait for it to commit)."""
    body = _body("evt_race")

    def deliver():
        response = _post(
            Client(), body, sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()))
        )
        return response.status_code, response.json(), response.get("Idempotent-Replayed")

    answers = at_once(deliver)
    assert {(status, json.dumps(body, sort_keys=True)) for status, body, _ in answers} == {
        (202, json.dumps(answers[0][1], sort_keys=True))
    }
    assert sum(replayed == "true" for _, _, replayed in answers) == len(answers) - 1
    assert Turn.objects.count() == 1 and InboundDelivery.objects.count() == 1
