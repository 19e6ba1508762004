"""API tokens: made and revoked by their user in the desk, shown once,
stored hashed, carrying the user's role; the service token only posts."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.test import Client

from api.models import ApiToken
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)


def _desk(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_user_makes_a_token_in_the_desk_sees_it_once_and_it_works(alice):
    desk = _desk(alice)
    made = desk.post("/account/tokens/", {"name": "zendesk"})
    assert made.status_code == 200
    secret = re.search(
        r'<code id="token-secret">(adk_[0-9a-f]{8}_[\w-]+)</code>', made.content.decode()
    )
    assert secret, made.content.decode()
    token = secret.group(1)
    row = ApiToken.objects.get()
    assert row.digest == hashlib.sha256(token.encode()).hexdigest() and token not in str(
        list(ApiToken.objects.values())
    )
    again = desk.get("/account/tokens/").content.decode()
    assert token not in again and row.prefix in again  # shown once, listed by its prefix
    assert ApiClient(token).get("/api/v1/sessions").status_code == 200


def test_a_revoked_token_stops_working(alice):
    desk = _desk(alice)
    made = desk.post("/account/tokens/", {"name": "ci"}).content.decode()
    token = re.search(r"(adk_[0-9a-f]{8}_[\w-]+)", made).group(1)
    row = ApiToken.objects.get()
    assert desk.post(f"/account/tokens/{row.id}/revoke").status_code == 200
    response = ApiClient(token).get("/api/v1/sessions")
    assert response.status_code == 401


def test_nobody_revokes_another_users_token(alice, bob, api_as):
    api_as(alice)
    row = ApiToken.objects.get(user=alice)
    assert _desk(bob).post(f"/account/tokens/{row.id}/revoke").status_code == 404
    assert ApiToken.objects.get(pk=row.pk).revoked_at is None


def test_the_token_page_needs_a_login(client):
    response = client.get("/account/tokens/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_a_token_carries_its_users_role(alice, bob, dave, api_as):
    assert api_as(dave).get("/api/v1/sessions").status_code == 403  # no desk role
    assert api_as(alice).get("/api/v1/approvals").status_code == 403  # support
    assert api_as(bob).get("/api/v1/approvals").status_code == 200  # approver


def test_an_inactive_users_token_stops_working(alice, api_as):
    client = api_as(alice)
    alice.is_active = False
    alice.save()
    assert client.get("/api/v1/sessions").status_code == 401


def test_the_service_token_may_only_post_messages(settings):
    settings.AGENTDESK_API_TOKEN = "svc-" + "x" * 40
    service = ApiClient(settings.AGENTDESK_API_TOKEN)
    assert service.get("/api/v1/sessions").status_code == 403
    posted = service.post("/api/v1/messages", {"session_key": "customer:9", "text": "hello"})
    assert posted.status_code == 202, posted.content
    assert service.post("/api/v1/sessions/1/cancel").status_code == 403


def test_writes_are_rate_limited_per_token_with_retry_after(alice, api_as, settings):
    settings.AGENTDESK_API_RATE_LIMIT = 3
    client, other = api_as(alice), api_as(alice)
    answers = [
        client.post("/api/v1/messages", {"session_key": "ticket:5", "text": f"m{i}"}).status_code
        for i in range(4)
    ]
    assert answers == [202, 202, 202, 429]
    limited = client.post("/api/v1/messages", {"session_key": "ticket:5", "text": "again"})
    assert limited["Content-Type"] == "application/problem+json"
    assert 1 <= int(limited["Retry-After"]) <= settings.AGENTDESK_API_RATE_WINDOW_S
    assert client.get("/api/v1/sessions").status_code == 200  # reads are not limited
    assert (
        other.post("/api/v1/messages", {"session_key": "ticket:5", "text": "x"}).status_code == 202
    )


def test_the_legacy_messages_api_is_rate_limited_too(alice, api_as, settings):
    settings.AGENTDESK_API_RATE_LIMIT = 1
    client = api_as(alice)
    url = "/api/sessions/ticket:6/messages"
    assert client.post(url, {"text": "one"}).status_code == 202
    refused = client.post(url, {"text": "two"})
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
