"""The machine paths through a real Daphne (api/inbound_asgi.py): without the
browser's middleware, they answer what the whole Django stack answers, and
give their database connection back when each request ends."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.conf import settings
from django.db import connection
from django.test import Client

from agents.audit import AuditEntry
from agents.models import InboundDelivery, Session, Turn
from api.inbound import sign
from api.inbound_asgi import handles
from api.tokens import token_create
from tests.dashboard.conftest import daphne

pytestmark = pytest.mark.django_db(transaction=True)

HEADERS = ("Content-Type", "X-Content-Type-Options", "Referrer-Policy", "X-Frame-Options")
HEADERS += ("Content-Security-Policy", "Cross-Origin-Opener-Policy", "Idempotent-Replayed")
HEADERS += ("Retry-After", "WWW-Authenticate", "Allow")


def _delivery(event_id: str, ticket_id: int | str = 4812) -> bytes:
    ticket = {"id": ticket_id, "subject": "Where is it?", "customer_email": "a@example.com"}
    ticket["body"] = "Order 1001 has not arrived."
    return json.dumps({"id": event_id, "type": "ticket.created", "ticket": ticket}).encode()


def _signed(body: bytes, at: int | None = None) -> dict[str, str]:
    signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, at or int(time.time()))
    return {"Content-Type": "application/json", "Agentdesk-Signature": signature}


def _django_post(client: Client, body: bytes, headers: dict[str, str]):
    rest = {k: v for k, v in headers.items() if k != "Content-Type"}
    return client.post("/api/inbound/helpdesk", body, content_type="application/json", headers=rest)


def _answer(response) -> tuple[int, object, dict[str, str]]:
    """Status, JSON body (or text) and the headers that matter, from a
    requests response or a Django test response alike."""
    try:
        body = json.loads(response.content)
    except ValueError:
        body = response.content.decode(errors="replace")[:200]
    headers = {h: response.headers.get(h) for h in HEADERS if response.headers.get(h)}
    return response.status_code, body, headers


def test_only_posts_to_the_machine_paths_skip_the_browser_layer():
    def scope(method: str, path: str) -> dict:
        return {"type": "http", "method": method, "path": path}

    assert handles(scope("POST", "/api/inbound/helpdesk"))
    assert handles(scope("POST", "/api/v1/messages"))
    assert handles(scope("POST", "/api/sessions/ticket:4812/messages"))
    assert not handles(scope("GET", "/api/inbound/helpdesk"))
    assert not handles(scope("POST", "/api/inbound/helpdesk/"))
    assert not handles(scope("POST", "/api/v1/sessions/1/cancel"))
    assert not handles(scope("POST", "/login/"))
    assert not handles(scope("POST", "/api/sessions//messages"))


def test_the_webhook_answers_through_daphne_what_the_whole_stack_answers(web, broker):
    """Forged, stale, malformed, hostile, a replay, a wrong method, a foreign
    Host: each gets the same status, body and headers from Daphne (the
    inbound handler) as from Django's full middleware stack (the test client)."""
    url = f"{web.url}/api/inbound/helpdesk"
    stale = int(time.time()) - settings.AGENTDESK_WEBHOOK_TOLERANCE_S - 5
    cases = {
        "unsigned": (_delivery("evt_u"), {"Content-Type": "application/json"}),
        "forged": (_delivery("evt_f"), {**_signed(b"other"), "Content-Type": "application/json"}),
        "stale": (_delivery("evt_s"), _signed(_delivery("evt_s"), stale)),
        "malformed": (b'{"not": "a webhook"}', _signed(b'{"not": "a webhook"}')),
        "not json": (b"{nope", _signed(b"{nope")),
        "nul": (_delivery("evt_n", "12\x003"), _signed(_delivery("evt_n", "12\x003"))),
    }
    django_client = Client()
    for name, (body, headers) in cases.items():
        ours = requests.post(url, data=body, headers=headers, timeout=10)
        django = _django_post(django_client, body, headers)
        assert _answer(ours) == _answer(django), name
        assert ours.status_code in (400, 403), name
    assert not Session.objects.exists() and not InboundDelivery.objects.exists()
    refused = AuditEntry.objects.filter(kind="inbound.refused")
    assert refused.count() == 2 * 3  # malformed, not JSON, NUL: by each path
    assert {e.path for e in refused} == {"/api/inbound/helpdesk"}

    body = _delivery("evt_1")
    first = requests.post(url, data=body, headers=_signed(body), timeout=10)
    assert first.status_code == 202 and first.json()["session"] == "ticket:4812"
    again = requests.post(url, data=body, headers=_signed(body, int(time.time()) + 1), timeout=10)
    by_django = _django_post(django_client, body, _signed(body))
    assert _answer(again) == _answer(by_django)
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert Turn.objects.count() == 1 and InboundDelivery.objects.count() == 1

    # Not the handler's (a GET), and a Host the desk does not serve: as before.
    assert requests.get(url, timeout=10).status_code == 405
    foreign = {**_signed(body), "Host": "evil.example"}
    assert requests.post(url, data=body, headers=foreign, timeout=10).status_code == 400


def test_the_messages_apis_answer_through_daphne_what_the_whole_stack_answers(web, broker, alice):
    _, token = token_create(user=alice, name="alice's burst")
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    url = f"{web.url}/api/v1/messages"
    body = json.dumps({"session_key": "customer:77", "text": "hello"})
    too_big = json.dumps({"session_key": "c:1", "text": "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE})
    cases = {
        "no token": (body, {"Content-Type": "application/json"}),
        "wrong token": (body, {**bearer, "Authorization": "Bearer nope"}),
        "not the schema": ("{}", bearer),
        "not JSON": ("{nope", bearer),
        "too big": (too_big, bearer),
        "bad key": (body, {**bearer, "Idempotency-Key": "k" * 256}),
    }
    django_client = Client()
    for name, (data, headers) in cases.items():
        ours = requests.post(url, data=data, headers=headers, timeout=10)
        rest = {k: v for k, v in headers.items() if k != "Content-Type"}
        django = django_client.post(
            "/api/v1/messages", data, content_type="application/json", headers=rest
        )
        assert _answer(ours) == _answer(django), name
        assert ours.headers["Content-Type"] == "application/problem+json", name
    assert not Session.objects.exists()

    keyed = {**bearer, "Idempotency-Key": "burst-1"}
    first = requests.post(url, data=body, headers=keyed, timeout=10)
    assert first.status_code == 202 and first.json()["session"] == "customer:77"
    again = requests.post(url, data=body, headers=keyed, timeout=10)
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    other = requests.post(url, data=body.replace("hello", "bye"), headers=keyed, timeout=10)
    assert other.status_code == 422
    assert Turn.objects.filter(session__key="customer:77").count() == 1

    legacy = requests.post(
        f"{web.url}/api/sessions/customer:78/messages",
        data=json.dumps({"text": "hi"}),
        headers=bearer,
        timeout=10,
    )
    assert legacy.status_code == 202 and legacy.json()["session"] == "customer:78"


def test_the_token_rate_limit_holds_through_daphne(stack_env, run_dir, alice):
    """A Daphne whose limit is 3 writes a minute per token: a flood from one
    token gets 3 through (at most 6 when it straddles two windows) and the
    rest told when to retry."""
    _, token = token_create(user=alice, name="alice's flood")
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with daphne({**stack_env, "AGENTDESK_API_RATE_LIMIT": "3"}, run_dir) as web:
        answers = [
            requests.post(
                f"{web.url}/api/v1/messages",
                data=json.dumps({"session_key": f"flood:{i}", "text": "hello"}),
                headers=bearer,
                timeout=30,
            )
            for i in range(10)
        ]
    statuses = [a.status_code for a in answers]
    assert 3 <= statuses.count(202) <= 6 and statuses.count(429) >= 4, statuses
    assert all(a.headers.get("Retry-After") for a in answers if a.status_code == 429)
    assert Session.objects.filter(key__startswith="flood:").count() == statuses.count(202)


def _daphne_connections(web) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            [f"agentdesk pid={web.proc.pid}"],
        )
        return cursor.fetchone()[0]


def test_a_burst_of_deliveries_holds_no_more_connections_than_the_pool(web, broker):
    """32 senders at once: each delivery is accepted, and Daphne's Postgres
    connections stay within its pool (each request gives its connection
    back when it ends)."""
    url = f"{web.url}/api/inbound/helpdesk"

    def deliver(i: int) -> int:
        body = _delivery(f"evt_burst_{i}", 9000 + i)
        return requests.post(url, data=body, headers=_signed(body), timeout=30).status_code

    with ThreadPoolExecutor(32) as pool:
        statuses = list(pool.map(deliver, range(160)))
    assert statuses == [202] * 160
    assert Turn.objects.count() == 160 and Session.objects.count() == 160
    assert 0 < _daphne_connections(web) <= settings.AGENTDESK_DB_POOL_SIZE
