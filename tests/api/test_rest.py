"""The REST API's reads and writes, through the same services as the desk."""

from __future__ import annotations

import pytest

from agents.models import Event, Session, Turn
from approvals.models import Approval
from tests.dashboard import factories

pytestmark = pytest.mark.django_db(transaction=True)
V1 = "/api/v1"


def test_a_request_without_a_token_is_a_401_problem(alice):
    from tests.api.conftest import ApiClient

    response = ApiClient(None).get(f"{V1}/sessions")
    assert response.status_code == 401
    assert response["Content-Type"] == "application/problem+json"
    assert response["WWW-Authenticate"] == "Bearer"
    assert response.json()["status"] == 401
    assert ApiClient("adk_deadbeef_nope").get(f"{V1}/sessions").status_code == 401


def test_unknown_paths_and_methods_are_problems_too(alice, api_as):
    client = api_as(alice)
    missing = client.get(f"{V1}/nothing-here")
    assert missing.status_code == 404 and missing.json()["title"] == "Not Found"
    assert missing["Content-Type"] == "application/problem+json"
    wrong = client.client.delete(f"{V1}/sessions", headers=client._headers(None))
    assert wrong.status_code == 405
    assert wrong["Content-Type"] == "application/problem+json"
    assert "GET" in wrong["Allow"]


def test_sessions_list_filters_and_pages_by_cursor(alice, api_as):
    made = [factories.session(title=f"Order {i}") for i in range(5)]
    Session.objects.filter(pk=made[0].pk).update(status=Session.Status.FAILED)
    client = api_as(alice)
    first = client.get(f"{V1}/sessions", limit=2).json()
    assert [s["id"] for s in first["items"]] == [made[4].id, made[3].id]
    second = client.get(f"{V1}/sessions", limit=2, cursor=first["next_cursor"]).json()
    third = client.get(f"{V1}/sessions", limit=2, cursor=second["next_cursor"]).json()
    assert [s["id"] for s in second["items"] + third["items"]] == [m.id for m in made[2::-1]]
    assert third["next_cursor"] is None
    failed = client.get(f"{V1}/sessions", status="failed").json()["items"]
    assert [s["id"] for s in failed] == [made[0].id]
    assert client.get(f"{V1}/sessions", q="Order 3").json()["items"][0]["id"] == made[3].id
    assert client.get(f"{V1}/sessions", cursor="garbage!").status_code == 422
    assert client.get(f"{V1}/sessions", status="bogus").status_code == 422


def test_a_session_by_id_or_key_with_its_turns_and_calls(alice, api_as):
    call = factories.parked_call()
    session = call.session
    client = api_as(alice)
    by_id = client.get(f"{V1}/sessions/{session.id}").json()
    by_key = client.get(f"{V1}/sessions/by-key", key=session.key).json()
    assert (
        by_id == by_key
        and by_id["key"] == session.key
        and by_id["status"] == "waiting_for_approval"
    )
    assert by_id["last_seq"] == Event.objects.filter(session=session).count()
    turns = client.get(f"{V1}/sessions/{session.id}/turns").json()["items"]
    assert [t["status"] for t in turns] == ["waiting_for_approval"]
    calls = client.get(f"{V1}/sessions/{session.id}/tool-calls").json()["items"]
    assert [c["name"] for c in calls] == ["issue_refund"]
    one = client.get(f"{V1}/sessions/{session.id}/tool-calls/{call.id}").json()
    assert one["input"] == factories.REFUND
    other = factories.session()
    assert client.get(f"{V1}/sessions/{other.id}/tool-calls/{call.id}").status_code == 404


def test_keys_over_the_column_length_are_refused_not_a_500(alice, api_as, settings):
    client = api_as(alice)
    long_key = "ticket:" + "9" * 300
    assert client.get(f"{V1}/sessions/by-key", key=long_key).status_code == 422
    posted = client.post(f"{V1}/messages", {"session_key": long_key, "text": "hello"})
    assert posted.status_code == 422
    assert posted.json()["errors"][0]["loc"][-1] == "session_key"
    assert not Session.objects.exists()


def test_post_a_message_starts_a_turn_audited_as_the_tokens_user(alice, api_as):
    response = api_as(alice).post(f"{V1}/messages", {"session_key": "ticket:77", "text": "Hi"})
    assert response.status_code == 202, response.content
    body = response.json()
    turn = Turn.objects.get(pk=body["turn_id"])
    assert (body["session"], body["turn"], turn.started_by) == ("ticket:77", 1, alice)
    accepted = Event.objects.get(session_id=body["session_id"], kind="turn.accepted")
    assert accepted.actor == "alice"
    from api.models import ApiAudit

    audit = ApiAudit.objects.get()
    assert (audit.user, audit.method, audit.path, audit.status) == (
        alice,
        "POST",
        "/api/v1/messages",
        202,
    )


def test_cancel_and_resume_go_through_the_services(alice, api_as):
    call = factories.parked_call()
    client = api_as(alice)
    canceled = client.post(f"{V1}/sessions/{call.session_id}/cancel")
    assert canceled.status_code == 200, canceled.content
    assert Turn.objects.get(pk=call.turn_id).status == Turn.Status.CANCELED
    again = client.post(f"{V1}/sessions/{call.session_id}/cancel")
    assert again.status_code == 409 and again.json()["detail"] == "nothing to cancel"
    resumed = client.post(f"{V1}/sessions/{call.session_id}/resume")
    assert resumed.status_code == 202 and resumed.json()["turn"] == 2
    assert Event.objects.filter(session_id=call.session_id, kind="turn.canceled").get().actor == (
        "alice"
    )


def test_support_may_not_decide_an_approval(alice, api_as):
    approval = factories.pending_approval()
    client = api_as(alice)
    assert client.get(f"{V1}/approvals").status_code == 403
    body = {"decision": "approve", "expected_hash": approval.arguments_hash}
    refused = client.post(f"{V1}/approvals/{approval.id}/decision", body)
    assert refused.status_code == 403 and refused["Content-Type"] == "application/problem+json"
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_an_approver_lists_and_approves_with_the_hash_check(bob, api_as):
    approval = factories.pending_approval()
    client = api_as(bob)
    pending = client.get(f"{V1}/approvals").json()["items"]
    assert [a["id"] for a in pending] == [approval.id]
    stale = {"decision": "approve", "expected_hash": "0" * 64}
    conflict = client.post(f"{V1}/approvals/{approval.id}/decision", stale)
    assert conflict.status_code == 409
    assert conflict.json()["detail"] == "the arguments changed since you looked"
    good = {"decision": "approve", "expected_hash": pending[0]["arguments_hash"]}
    decided = client.post(f"{V1}/approvals/{approval.id}/decision", good)
    assert decided.status_code == 200, decided.content
    assert decided.json()["status"] == "approved" and decided.json()["decided_by"] == "bob"
    late = client.post(f"{V1}/approvals/{approval.id}/decision", good)
    assert late.status_code == 409 and late.json()["current"] == "approved"
    event = Event.objects.get(session_id=approval.session_id, kind="approval.decided")
    assert event.actor == "bob"


def test_approve_edited_and_deny_with_a_reason(bob, api_as):
    client = api_as(bob)
    first = factories.pending_approval()
    edited = {**factories.REFUND, "amount_cents": 5000}
    body = {
        "decision": "approve",
        "expected_hash": first.arguments_hash,
        "edited_arguments": edited,
    }
    response = client.post(f"{V1}/approvals/{first.id}/decision", body)
    assert response.status_code == 200, response.content
    assert response.json()["edited_arguments"] == edited
    second = factories.pending_approval()
    no_reason = {"decision": "deny", "expected_hash": second.arguments_hash}
    assert client.post(f"{V1}/approvals/{second.id}/decision", no_reason).status_code == 422
    deny = {**no_reason, "reason": "The customer already has a replacement."}
    denied = client.post(f"{V1}/approvals/{second.id}/decision", deny).json()
    assert (denied["status"], denied["reason"]) == ("denied", deny["reason"])


def test_the_events_page_for_pollers(alice, api_as):
    call = factories.parked_call()
    client = api_as(alice)
    page = client.get(f"{V1}/sessions/{call.session_id}/events/page", after=0, limit=2).json()
    assert [e["seq"] for e in page["events"]] == [1, 2] and page["more"] is True
    rest = client.get(f"{V1}/sessions/{call.session_id}/events/page", after=2).json()
    seqs = [e["seq"] for e in rest["events"]]
    assert seqs == list(range(3, 3 + len(seqs))) and rest["more"] is False
    assert rest["events"][-1]["kind"] == "turn.waiting"


def test_the_openapi_document_and_docs_page_need_no_token(client):
    document = client.get("/api/v1/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert "/api/v1/approvals/{approval_id}/decision" in document["paths"]
    page = client.get("/api/v1/docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in html and "cdn" not in html.lower()
    assert "script-src 'self'" in page["Content-Security-Policy"]


def test_text_postgres_cannot_store_is_a_422_not_a_500(alice, bob, api_as):
    """Found by schemathesis: a NUL character reached a text column."""
    client = api_as(alice)
    nul = client.post(f"{V1}/messages", {"session_key": "ticket:8", "text": "refund\x00me"})
    assert nul.status_code == 422 and not Session.objects.exists()
    assert client.get(f"{V1}/sessions", q="a\x00").status_code == 422
    approval = factories.pending_approval()
    edited = {**factories.REFUND, "reason": "bad\x00"}
    body = {
        "decision": "approve",
        "expected_hash": approval.arguments_hash,
        "edited_arguments": edited,
    }
    refused = api_as(bob).post(f"{V1}/approvals/{approval.id}/decision", body)
    assert refused.status_code == 400 and Approval.objects.get(pk=approval.pk).status == "pending"


def test_ids_beyond_a_bigint_are_a_422(alice, api_as):
    assert api_as(alice).get(f"{V1}/sessions/{2**64}").status_code == 422
    assert api_as(alice).get(f"{V1}/sessions", cursor=2**64).status_code == 422
