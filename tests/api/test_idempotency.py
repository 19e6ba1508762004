"""Idempotency-Key on writes, with Stripe's semantics."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Turn
from api.models import ApiAudit, IdempotencyKey
from tests.agents.helpers import at_once
from tests.dashboard import factories

pytestmark = pytest.mark.django_db(transaction=True)
MESSAGE = {"session_key": "ticket:31", "text": "Where is my order?"}


def test_the_same_key_twice_gives_one_turn_and_the_same_202(alice, api_as):
    client = api_as(alice)
    key = {"Idempotency-Key": "msg-31-a"}
    first = client.post("/api/v1/messages", MESSAGE, headers=key)
    second = client.post("/api/v1/messages", MESSAGE, headers=key)
    assert first.status_code == second.status_code == 202
    assert first.json() == second.json()
    assert second["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert Turn.objects.count() == 1
    assert list(ApiAudit.objects.order_by("id").values_list("replayed", flat=True)) == [
        False,
        True,
    ]


def test_the_same_key_with_another_body_is_refused_and_runs_nothing(alice, api_as):
    client = api_as(alice)
    key = {"Idempotency-Key": "msg-31-b"}
    assert client.post("/api/v1/messages", MESSAGE, headers=key).status_code == 202
    other = client.post("/api/v1/messages", {**MESSAGE, "text": "Another"}, headers=key)
    assert other.status_code == 422
    assert other.json()["type"] == "urn:agentdesk:problem:idempotency-key-reused"
    elsewhere = client.post("/api/v1/sessions/1/cancel", headers=key)  # other endpoint
    assert elsewhere.status_code == 422
    assert Turn.objects.count() == 1


def test_keys_belong_to_their_user(alice, carol, api_as):
    key = {"Idempotency-Key": "shared-name"}
    assert api_as(alice).post("/api/v1/messages", MESSAGE, headers=key).status_code == 202
    theirs = api_as(carol).post("/api/v1/messages", MESSAGE, headers=key)
    assert theirs.status_code == 202 and "Idempotent-Replayed" not in theirs
    assert Turn.objects.count() == 2


def test_a_key_in_flight_is_a_409_and_runs_nothing(alice, api_as):
    IdempotencyKey.objects.create(owner=f"user:{alice.pk}", key="busy", fingerprint="x" * 64)
    client = api_as(alice)
    # The fingerprint of this very request, so only the in-flight state refuses it.
    from api.idempotency import fingerprint

    request = client.client.post(
        "/api/v1/messages", MESSAGE, content_type="application/json"
    ).wsgi_request
    IdempotencyKey.objects.filter(key="busy").update(fingerprint=fingerprint(request))
    busy = client.post("/api/v1/messages", MESSAGE, headers={"Idempotency-Key": "busy"})
    assert busy.status_code == 409, busy.content
    assert busy.json()["type"] == "urn:agentdesk:problem:idempotency-key-in-use"
    assert not Turn.objects.exists()


def test_an_abandoned_in_flight_key_is_taken_over_after_its_lease(alice, api_as, settings):
    client = api_as(alice)
    from api.idempotency import fingerprint

    request = client.client.post(
        "/api/v1/messages", MESSAGE, content_type="application/json"
    ).wsgi_request
    old = timezone.now() - timedelta(seconds=settings.AGENTDESK_IDEMPOTENCY_LEASE_S + 5)
    row = IdempotencyKey.objects.create(
        owner=f"user:{alice.pk}", key="orphan", fingerprint=fingerprint(request)
    )
    IdempotencyKey.objects.filter(pk=row.pk).update(locked_at=old)
    taken = client.post("/api/v1/messages", MESSAGE, headers={"Idempotency-Key": "orphan"})
    assert taken.status_code == 202
    assert IdempotencyKey.objects.get(pk=row.pk).state == "done"


def test_concurrent_requests_with_one_key_run_once(alice, api_as):
    client = api_as(alice)

    def send():
        response = client.post("/api/v1/messages", MESSAGE, headers={"Idempotency-Key": "race"})
        return response.status_code, response.get("Idempotent-Replayed")

    results = at_once(send, threads=6)
    assert Turn.objects.count() == 1
    fresh = [r for r in results if r == (202, None)]
    assert len(fresh) == 1, results
    assert {r for r in results if r not in fresh} <= {(202, "true"), (409, None)}


def test_a_refused_decision_is_stored_as_the_answer_to_its_key(bob, api_as):
    approval = factories.pending_approval()
    client = api_as(bob)
    body = {"decision": "approve", "expected_hash": "f" * 64}
    key = {"Idempotency-Key": "decide-1"}
    first = client.post(f"/api/v1/approvals/{approval.id}/decision", body, headers=key)
    again = client.post(f"/api/v1/approvals/{approval.id}/decision", body, headers=key)
    assert first.status_code == again.status_code == 409
    assert first.json() == again.json() and again["Idempotent-Replayed"] == "true"


def test_an_overlong_key_is_a_400(alice, api_as):
    response = api_as(alice).post(
        "/api/v1/messages", MESSAGE, headers={"Idempotency-Key": "k" * 256}
    )
    assert response.status_code == 400 and not Turn.objects.exists()


def test_keys_past_their_retention_are_forgotten(alice, api_as, settings):
    from api.idempotency import idempotency_keys_prune

    client = api_as(alice)
    key = {"Idempotency-Key": "old"}
    assert client.post("/api/v1/messages", MESSAGE, headers=key).status_code == 202
    later = timezone.now() + timedelta(seconds=settings.AGENTDESK_IDEMPOTENCY_TTL_S + 1)
    assert idempotency_keys_prune(now=later) == 1
    again = client.post("/api/v1/messages", MESSAGE, headers=key)
    assert again.status_code == 202 and "Idempotent-Replayed" not in again
