"""The sessions list says what the last turn did, and what it cost, in a
fixed number of queries however many rows it shows."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Session, ToolCall, Turn
from tests.dashboard import factories

pytestmark = pytest.mark.django_db


def _refunded(amount_cents: int) -> Session:
    """A turn whose refund ran (approved, then succeeded) and that ended."""
    call = factories.parked_call(arguments={**factories.REFUND, "amount_cents": amount_cents})
    ToolCall.objects.filter(pk=call.pk).update(status=ToolCall.Status.SUCCEEDED)
    ToolCall.objects.create(
        session_id=call.session_id,
        turn_id=call.turn_id,
        tool_use_id="toolu_reply",
        idempotency_key=f"{call.session.key}:toolu_reply",
        name="send_reply",
        kind="idempotent_by_key",
        status=ToolCall.Status.SUCCEEDED,
        input={"body": "Refunded."},
        message_position=9,
        created_at=call.created_at,
    )
    Turn.objects.filter(pk=call.turn_id).update(status=Turn.Status.SUCCEEDED, cost_micros=12_345)
    Session.objects.filter(pk=call.session_id).update(status=Session.Status.IDLE)
    return call.session


def _failed(error: str) -> Session:
    owner = factories.session()
    made = factories.turn(owner, status=Turn.Status.FAILED)
    Turn.objects.filter(pk=made.pk).update(error=error)
    Session.objects.filter(pk=owner.pk).update(status=Session.Status.FAILED)
    return owner


def _outcomes(client) -> dict[int, str]:
    page = client.get("/")
    assert page.status_code == 200
    return {row.id: (row.outcome.text, row.outcome.cost) for row in page.context["rows"]}


def test_each_row_says_what_the_last_turn_did_and_its_cost(client, alice):
    answered = factories.session()
    factories.turn(answered)
    waiting = factories.parked_call().session
    doubtful = factories.parked_call(call_status="in_doubt").session
    refunded = _refunded(4000)
    failed = _failed("Budget: the turn would take more than 1 model call")
    fresh = factories.session()
    client.force_login(alice)

    shown = _outcomes(client)

    assert shown[answered.id][0] == "Answered"
    assert shown[answered.id][1].startswith("~$")  # estimated from tokens: no cost recorded
    assert shown[waiting.id][0] == "Waiting on you: approve a refund of $189.00"
    assert shown[doubtful.id][0] == "In doubt: did issue_refund happen? check and resolve"
    assert shown[refunded.id] == ("Refunded $40.00, replied", "$0.0123")
    assert shown[failed.id][0] == "Failed: Budget: the turn would take more than 1 model call"
    assert shown[fresh.id] == ("No turns yet", "")


def test_hostile_error_text_in_the_outcome_is_escaped_and_shown(client, alice):
    hostile = "<script>alert(1)</script>\u202e" + "x" * 300
    owner = _failed(hostile)
    client.force_login(alice)

    body = client.get("/").content.decode()

    row = body[body.index(f'id="session-{owner.id}"') :]
    row = row[: row.index("</tr>")]
    assert "<script>" not in row and "\u202e" not in row
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in row
    assert '<span class="ctl" title="invisible character">\\u202e</span>' in row


def _queries(client) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/").status_code == 200
    return len(captured)


def test_outcomes_cost_the_same_queries_for_3_rows_as_for_30(client, alice):
    client.force_login(alice)
    factories.turn(factories.session())
    factories.parked_call()
    _refunded(4000)
    few = _queries(client)
    for _ in range(9):
        factories.turn(factories.session())
        factories.parked_call()
        _refunded(2500)
    assert Session.objects.count() == 30
    assert _queries(client) == few
