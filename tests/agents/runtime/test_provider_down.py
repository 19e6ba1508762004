"""A provider that is down is waited for, not given up on (issue 26, case 3).

The helpdesk refuses the reply (429: nothing happened there, so the request
certainly did not take effect) for longer than a tool's quick retries last.
The step goes back and is tried again later with the step backoff before the
model hears of it; and when the helpdesk stays away through every retry, the
turn does not end `succeeded` with an unanswered customer: it fails, which
puts the session on the desk's list for a person.
"""

from __future__ import annotations

import pytest

from agents.models import Event, Session, ToolCall
from agents.selectors import NEEDS_HUMAN
from tests.agents.helpers import assert_invariants, deliver_ticket, kinds, wait_turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _where_is_my_order(sandbox) -> dict:
    return sandbox.ticket(
        email="alice.martin@example.com",
        subject="Where is my order ORD-1002?",
        body="Hi, could you tell me where order ORD-1002 is? Thanks",
        order_id="ORD-1002",
    )


def _refuse_replies(sandbox, ticket: dict, count: int) -> None:
    sandbox.fault(
        target="helpdesk",
        kind="status",
        status=429,
        count=count,
        match={"path_prefix": f"/helpdesk/tickets/{ticket['id']}/replies"},
    )


def test_a_reply_refused_past_the_quick_retries_is_sent_later(sandbox, workers):
    workers.start()  # AGENTDESK_TOOL_RETRIES=3: four quick tries per attempt
    ticket = _where_is_my_order(sandbox)
    _refuse_replies(sandbox, ticket, count=4)  # every quick try of the first attempt
    session = deliver_ticket(ticket)

    turn = wait_turn(session, timeout=90)

    assert turn.status == "succeeded", workers.logs()
    assert "tool.unavailable" in kinds(session)
    reply = ToolCall.objects.get(session=session, name="send_reply")
    assert reply.status == "succeeded" and reply.attempts == 2
    finished = [
        e.data
        for e in Event.objects.filter(session=session, kind="tool.finished")
        if e.data["name"] == "send_reply"
    ]
    assert len(finished) == 1 and "error" not in finished[0]  # the model read no failure
    assert sandbox.stats()["replies"] == 1
    assert_invariants(session)


def test_a_reply_that_never_gets_through_fails_the_turn_for_a_person(sandbox, workers):
    workers.start(AGENTDESK_TOOL_UNAVAILABLE_RETRIES="1")  # one retry later, then give up
    ticket = _where_is_my_order(sandbox)
    _refuse_replies(sandbox, ticket, count=1000)
    session = deliver_ticket(ticket)

    turn = wait_turn(session, timeout=90)

    assert turn.status == "failed", workers.logs()
    assert "send_reply could not be done" in turn.error
    reply = ToolCall.objects.get(session=session, name="send_reply")
    assert reply.status == "failed" and reply.attempts == 2
    assert Session.objects.get(pk=session.pk).status in NEEDS_HUMAN
    assert sandbox.stats()["replies"] == 0
    assert_invariants(session)
