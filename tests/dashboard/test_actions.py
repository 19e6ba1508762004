"""What the desk's POSTs do: one service call each; refusals come back as
409/403/400 with the current state and change nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import Event, Session, ToolCall, Turn
from approvals.models import Approval
from tests.dashboard import factories

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}


def _decide(client, approval: Approval, decision: str = "approve", **fields):
    body = {"decision": decision, "expected_hash": approval.arguments_hash, **fields}
    return client.post(f"/approvals/{approval.id}/decide", body, headers=HX)


def _events(session_id: int) -> list[str]:
    return list(
        Event.objects.filter(session_id=session_id).order_by("seq").values_list("kind", flat=True)
    )


def test_approve_returns_the_decided_card_and_resumes_the_turn(client, bob):
    approval = factories.pending_approval()
    client.force_login(bob)

    response = _decide(client, approval)

    assert response.status_code == 200
    assert f'id="approval-{approval.id}"' in response.content.decode()
    assert "Approved by bob" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decided_by == bob
    assert ToolCall.objects.get(pk=approval.tool_call_id).status == "approved"
    assert _events(approval.session_id)[-2:] == ["approval.decided", "turn.resuming"]


def test_deciding_twice_is_a_409_with_the_current_state_and_nothing_more(client, bob, carol):
    approval = factories.pending_approval()
    client.force_login(bob)
    assert _decide(client, approval).status_code == 200
    before = _events(approval.session_id)

    other = Client()
    other.force_login(carol)
    again = _decide(other, approval, "deny", reason="too late")

    assert again.status_code == 409
    body = again.content.decode()
    assert "already approved" in body and "Approved by bob" in body
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.reason == ""
    assert _events(approval.session_id) == before


def test_deciding_an_expired_approval_is_a_409_and_runs_nothing(client, bob):
    approval = factories.pending_approval()
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    client.force_login(bob)
    before = _events(approval.session_id)

    response = _decide(client, approval)

    assert response.status_code == 409 and "expired" in response.content.decode()
    assert ToolCall.objects.get(pk=approval.tool_call_id).status == "waiting_for_approval"
    assert _events(approval.session_id) == before


def test_deciding_on_arguments_other_than_the_ones_shown_is_a_409(client, bob):
    approval = factories.pending_approval()
    client.force_login(bob)
    before = _events(approval.session_id)

    response = client.post(
        f"/approvals/{approval.id}/decide",
        {"decision": "approve", "expected_hash": "0" * 64},
        headers=HX,
    )

    assert response.status_code == 409 and "changed since you looked" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"
    assert _events(approval.session_id) == before


def test_a_decision_without_the_shown_hash_is_refused(client, bob):
    approval = factories.pending_approval()
    client.force_login(bob)
    response = client.post(f"/approvals/{approval.id}/decide", {"decision": "approve"}, headers=HX)
    assert response.status_code == 400
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_the_user_who_started_the_turn_cannot_approve_it(client, carol):
    approval = factories.pending_approval(started_by=carol)
    client.force_login(carol)

    response = _decide(client, approval)

    assert response.status_code == 403 and "someone else must approve" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_a_denial_needs_a_reason_and_the_agent_reads_it(client, bob):
    approval = factories.pending_approval()
    client.force_login(bob)

    empty = _decide(client, approval, "deny", reason="  ")
    denied = _decide(client, approval, "deny", reason="Warehouse must check it first")

    assert empty.status_code == 400
    assert denied.status_code == 200
    call = ToolCall.objects.get(pk=approval.tool_call_id)
    assert call.status == "denied" and "Warehouse must check it first" in call.output


def test_edit_and_approve_validates_against_the_schema(client, bob):
    approval = factories.pending_approval()
    client.force_login(bob)
    wrong = {**approval.arguments, "amount_cents": "lots"}
    fixed = {**approval.arguments, "amount_cents": 9000}

    refused = _decide(client, approval, edited=json.dumps(wrong))
    approved = _decide(client, approval, edited=json.dumps(fixed))

    assert refused.status_code == 400 and "do not fit the tool" in refused.content.decode()
    assert approved.status_code == 200
    approval.refresh_from_db()
    assert approval.edited_arguments == fixed
    assert ToolCall.objects.get(pk=approval.tool_call_id).input == fixed


def test_a_plain_form_post_redirects_back_and_a_refusal_renders_a_page(client, bob):
    approval = factories.pending_approval()
    client.force_login(bob)
    body = {"decision": "approve", "expected_hash": approval.arguments_hash}

    first = client.post(f"/approvals/{approval.id}/decide", body)
    second = client.post(f"/approvals/{approval.id}/decide", body)

    assert first.status_code == 303 and first["Location"] == "/approvals/"
    assert second.status_code == 409 and "That did not happen" in second.content.decode()


def test_posting_a_message_starts_a_staff_turn(client, alice):
    owner = factories.session()
    factories.turn(owner)
    client.force_login(alice)

    response = client.post(
        f"/sessions/{owner.id}/messages", {"text": "Please check again"}, headers=HX
    )

    assert response.status_code == 200 and "Sent as turn 2" in response.content.decode()
    turn = Turn.objects.get(session=owner, number=2)
    assert turn.trigger == "staff_message" and turn.started_by == alice
    assert turn.input == "Please check again"


def test_an_empty_message_is_a_400(client, alice):
    owner = factories.session()
    client.force_login(alice)
    response = client.post(f"/sessions/{owner.id}/messages", {"text": "   "}, headers=HX)
    assert response.status_code == 400
    assert not Turn.objects.filter(session=owner).exists()


def test_cancel_cancels_a_parked_turn_and_a_second_cancel_is_a_409(client, alice):
    call = factories.parked_call()
    client.force_login(alice)
    url = f"/sessions/{call.session_id}/cancel"

    first = client.post(url, headers=HX)
    second = client.post(url, headers=HX)

    assert first.status_code == 200 and 'id="session-head"' in first.content.decode()
    assert Turn.objects.get(pk=call.turn_id).status == "canceled"
    assert Approval.objects.get(tool_call=call).status == "canceled"
    assert second.status_code == 409 and "nothing to cancel" in second.content.decode()


def test_resume_starts_a_turn_after_a_cancel_but_not_while_one_is_open(client, alice):
    call = factories.parked_call()
    client.force_login(alice)
    url = f"/sessions/{call.session_id}/resume"

    while_open = client.post(url, headers=HX)
    client.post(f"/sessions/{call.session_id}/cancel", headers=HX)
    resumed = client.post(url, headers=HX)

    assert while_open.status_code == 409 and "still open" in while_open.content.decode()
    assert resumed.status_code == 200
    assert Turn.objects.filter(session_id=call.session_id).count() == 2
    assert Session.objects.get(pk=call.session_id).status == "running"


def test_resolving_an_in_doubt_call_once(client, alice):
    call = factories.parked_call(
        name="escalate_to_human", arguments={"reason": "angry"}, call_status="in_doubt"
    )
    client.force_login(alice)
    url = f"/sessions/{call.session_id}/calls/{call.id}/resolve"

    bad = client.post(url, {"resolution": "maybe"}, headers=HX)
    first = client.post(
        url, {"resolution": "succeeded", "note": "Escalation #55 exists"}, headers=HX
    )
    second = client.post(url, {"resolution": "failed"}, headers=HX)

    assert bad.status_code == 400
    assert first.status_code == 200 and f'id="toolcall-{call.id}"' in first.content.decode()
    call.refresh_from_db()
    assert call.status == "succeeded" and "Escalation #55 exists" in call.output
    assert second.status_code == 409 and "not in doubt" in second.content.decode()
    assert Turn.objects.get(pk=call.turn_id).status == "resuming"


def test_csrf_is_enforced_on_desk_posts_and_the_header_is_enough(bob):
    approval = factories.pending_approval()
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    body = {"decision": "approve", "expected_hash": approval.arguments_hash}
    url = f"/approvals/{approval.id}/decide"

    without = client.post(url, body, headers=HX)
    page = client.get("/approvals/")  # sets the CSRF cookie, as a browser would get it
    token = page.cookies["csrftoken"].value
    with_header = client.post(url, body, headers={**HX, "X-CSRFToken": token})

    assert without.status_code == 403
    assert with_header.status_code == 200


def test_get_never_changes_state(client, carol):
    approval = factories.pending_approval()
    client.force_login(carol)
    for url in (
        f"/approvals/{approval.id}/decide",
        f"/sessions/{approval.session_id}/cancel",
        f"/sessions/{approval.session_id}/resume",
        f"/sessions/{approval.session_id}/messages",
        f"/sessions/{approval.session_id}/calls/{approval.tool_call_id}/resolve",
    ):
        assert client.get(url, {"decision": "approve"}).status_code == 405
    approval.refresh_from_db()
    assert approval.status == "pending"


@pytest.mark.django_db(transaction=True)
def test_refused_decisions_run_nothing_at_the_payment_provider(sandbox, workers, bob, carol):
    from tests.agents.helpers import deliver_ticket, wait_turn
    from tests.processes import wait_for

    workers.start()
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Broken grinder",
        body="The grinder from order ORD-1002 arrived broken. Please refund it, $189.",
        order_id="ORD-1002",
    )
    session = deliver_ticket(ticket)
    approval = wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        what="a pending approval",
    )
    deciders = {}
    for user in (bob, carol):
        deciders[user.username] = Client()
        deciders[user.username].force_login(user)
    edited = json.dumps({**approval.arguments, "amount_cents": 9000})

    stale = deciders["bob"].post(
        f"/approvals/{approval.id}/decide",
        {"decision": "approve", "expected_hash": "f" * 64},
        headers=HX,
    )
    approved = _decide(deciders["bob"], approval, edited=edited)
    turn = wait_turn(session)
    late = _decide(deciders["carol"], approval, "deny", reason="no")

    assert stale.status_code == 409 and late.status_code == 409
    assert approved.status_code == 200
    assert turn.status == "succeeded", workers.logs()
    assert [r["amount"] for r in sandbox.refunds()] == [9000]  # once, as edited
