"""The helpdesk webhook: only signed, fresh, first deliveries start turns."""

from __future__ import annotations

import json
import time

import pytest
from django.conf import settings

from agents.models import InboundDelivery, Session, Turn
from api.inbound import sign

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
