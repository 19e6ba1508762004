"""The desk's pages: what they show, and that their queries do not grow with
the rows they show."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Session
from tests.dashboard import factories

pytestmark = pytest.mark.django_db


def test_sessions_list_puts_what_needs_a_human_first_and_counts_each_status(client, alice):
    quiet = factories.session(title="All done")
    factories.turn(quiet)
    waiting = factories.parked_call().session
    doubtful = factories.parked_call(call_status="in_doubt").session
    client.force_login(alice)

    page = client.get("/")

    assert page.status_code == 200
    body = page.content.decode()
    assert body.index(f"session-{doubtful.id}") < body.index(f"session-{waiting.id}")
    assert body.index(f"session-{waiting.id}") < body.index(f"session-{quiet.id}")
    counts = page.context["counts"]
    assert counts["in_doubt"] == 1 and counts["waiting_for_approval"] == 1 and counts["idle"] == 1


def test_sessions_list_filters_by_status_and_searches_key_or_customer(client, alice):
    waiting = factories.parked_call().session
    other = factories.session(key="ticket:77", customer="zed@example.com")
    client.force_login(alice)

    only_waiting = client.get("/", {"status": "waiting_for_approval"}).context["rows"]
    by_key = client.get("/", {"q": "ticket:77"}).context["rows"]
    by_customer = client.get("/", {"q": "ZED@"}).context["rows"]

    assert [s.id for s in only_waiting] == [waiting.id]
    assert [s.id for s in by_key] == [other.id]
    assert [s.id for s in by_customer] == [other.id]


def test_htmx_refresh_of_the_list_returns_the_list_partial_only(client, alice):
    factories.session()
    client.force_login(alice)
    page = client.get("/", headers={"HX-Request": "true"})
    body = page.content.decode()
    assert body.startswith('<div id="session-list">') and "<html" not in body


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_sessions_list_queries_do_not_grow_with_rows(client, alice):
    client.force_login(alice)
    factories.parked_call()
    few = _queries(client, "/")
    for _ in range(30):
        factories.parked_call()
    assert _queries(client, "/") == few


def test_session_page_queries_do_not_grow_with_turns_calls_or_events(client, alice):
    client.force_login(alice)
    owner = factories.session()
    factories.parked_call(owner=owner)
    Session.objects.filter(pk=owner.pk).update(status="idle")
    few = _queries(client, f"/sessions/{owner.id}/")
    for _ in range(20):
        factories.turn(owner)
    factories.parked_call(owner=owner, call_status="in_doubt")
    # An approval card on the page as on the first one: a card's policy,
    # votes and context are read for all cards at once (issue 19).
    factories.parked_call(owner=owner)
    assert _queries(client, f"/sessions/{owner.id}/") == few


def test_session_page_shows_context_transcript_calls_and_the_approval(client, bob):
    call = factories.parked_call(reasoning="Refunding the broken grinder.")
    client.force_login(bob)

    page = client.get(f"/sessions/{call.session_id}/")

    body = page.content.decode()
    assert page.status_code == 200
    assert "ORD-1002" in body  # ticket context
    assert f'id="toolcall-{call.id}"' in body and "issue_refund" in body
    assert "Refunding the broken grinder." in body
    assert f'id="approval-{call.approval.id}"' in body
    assert 'data-seq="5"' in body  # the state is as of the session's last event
    assert "900 in / 60 out" in body  # the turn's tokens


def test_inbox_lists_pending_oldest_first_with_exact_arguments(client, bob):
    first = factories.pending_approval()
    sneaky = {"order_id": "ORD-1002", "amount_cents": 18900, "reason": "ok\u202e\u200bhidden\x07"}
    second = factories.pending_approval(arguments=sneaky)
    client.force_login(bob)

    page = client.get("/approvals/")

    body = page.content.decode()
    assert body.index(f"approval-{first.id}") < body.index(f"approval-{second.id}")
    # Invisible characters are shown, marked, never passed through raw.
    assert "\u202e" not in body and "\u200b" not in body
    assert '<span class="ctl" title="invisible character">\\u202e</span>' in body
    assert "\\u200b" in body and "\\u0007" in body
    assert "refund_over_limit" in body and "above the $100.00 limit" in body
    assert "arrived broken" in body  # the ticket text that started the turn


def test_edit_check_validates_against_the_schema_and_shows_a_diff(client, bob):
    approval = factories.pending_approval()
    client.force_login(bob)
    url = f"/approvals/{approval.id}/check"
    edited = {**approval.arguments, "amount_cents": 9000}

    good = client.post(url, {"edited": json.dumps(edited)})
    bad = client.post(url, {"edited": json.dumps({**edited, "amount_cents": "lots"})})
    broken = client.post(url, {"edited": "{not json"})

    assert good.status_code == 200
    assert "Fits the tool" in good.content.decode()
    assert "amount_cents" in good.content.decode() and "18900" in good.content.decode()
    assert bad.status_code == 400 and "would refuse" in bad.content.decode()
    assert broken.status_code == 400 and "not valid JSON" in broken.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"  # checking changes nothing


def test_history_filters_by_kind_and_exports_everything_as_json(client, carol):
    call = factories.parked_call()
    client.force_login(carol)
    url = f"/sessions/{call.session_id}/history"

    everything = client.get(url)
    approvals_only = client.get(url, {"kind": "approval"})
    export = client.get(f"{url}.json")

    assert [e.seq for e in everything.context["events"]] == [1, 2, 3, 4, 5]
    assert [e.kind for e in approvals_only.context["events"]] == ["approval.requested"]
    assert export["Content-Disposition"].startswith("attachment")
    document = json.loads(b"".join(async_to_sync(_collect)(export)))  # an async stream
    assert [e["seq"] for e in document["events"]] == [1, 2, 3, 4, 5]
    assert document["approvals"][0]["arguments"] == call.input
    assert document["tool_calls"][0]["idempotency_key"] == call.idempotency_key
    assert document["turns"][0]["input_tokens"] == 900


def test_a_long_session_shows_its_latest_turns_and_all_on_request(client, alice):
    owner = factories.session()
    turns = [factories.turn(owner) for _ in range(22)]
    client.force_login(alice)

    latest = client.get(f"/sessions/{owner.id}/")
    every = client.get(f"/sessions/{owner.id}/", {"turns": "all"})

    assert [tv.turn.number for tv in latest.context["view"].turns] == list(range(3, 23))
    assert "2 earlier turns not shown" in latest.content.decode()
    assert len(every.context["view"].turns) == len(turns)


async def _collect(response) -> list[bytes]:
    return [chunk async for chunk in response.streaming_content]
