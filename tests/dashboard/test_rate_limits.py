"""Per-user rate limits on desk decisions and posts to an agent: 429 with
Retry-After, nothing done, other users unaffected."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Event, Turn
from approvals.models import Approval
from tests.dashboard import factories

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_posts_to_an_agent_over_the_rate_get_429_and_post_nothing(alice, bob, settings):
    # An hour's window: django-ratelimit's windows are fixed, and a minute's
    # can turn over between the third post and the fourth on a loaded machine.
    settings.AGENTDESK_POST_RATE = "3/h"
    session = factories.session()
    url = f"/sessions/{session.id}/messages"
    client = _client(alice)
    for n in range(3):
        assert client.post(url, {"text": f"message {n}"}).status_code < 400
    turns, events = Turn.objects.count(), Event.objects.count()

    limited = client.post(url, {"text": "one too many"})

    assert limited.status_code == 429
    assert 1 <= int(limited["Retry-After"]) <= 3600
    assert b"Too many requests" in limited.content and b"3/h" in limited.content
    assert (Turn.objects.count(), Event.objects.count()) == (turns, events)
    assert _client(bob).post(url, {"text": "bob is not alice"}).status_code < 400


def test_decisions_over_the_rate_get_429_and_decide_nothing(bob, settings):
    settings.AGENTDESK_DECISION_RATE = "2/m"
    client = _client(bob)
    first, second, third = (factories.pending_approval() for _ in range(3))
    for approval in (first, second):
        body = {"decision": "deny", "reason": "no", "expected_hash": approval.arguments_hash}
        assert client.post(f"/approvals/{approval.id}/decide", body).status_code < 400

    body = {"decision": "deny", "reason": "no", "expected_hash": third.arguments_hash}
    limited = client.post(f"/approvals/{third.id}/decide", body, headers={"HX-Request": "true"})

    assert limited.status_code == 429 and int(limited["Retry-After"]) >= 1
    assert Approval.objects.get(pk=third.pk).status == "pending"
