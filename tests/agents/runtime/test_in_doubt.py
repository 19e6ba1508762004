"""An outcome that cannot be known, on a tool that is not idempotent, goes to
a human: never silently resent."""

from __future__ import annotations

import pytest

from agents.models import Session, ToolCall
from agents.services import toolcall_resolve
from tests.agents.helpers import assert_invariants, deliver_ticket, kinds, wait_turn
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_dropped_escalation_is_in_doubt_until_a_human_resolves_it(sandbox, workers, alice):
    workers.start()
    ticket = sandbox.ticket(
        email="dana.kowalski@example.com",
        subject="Manager please",
        body="This is the third time. I want to speak to a manager about order ORD-1007.",
        order_id="ORD-1007",
    )
    # The helpdesk records the escalation, and the answer is lost on the wire.
    escalations = f"/helpdesk/tickets/{ticket['id']}/escalations"
    sandbox.fault(target="helpdesk", kind="drop_after_commit", match={"path_prefix": escalations})
    session = deliver_ticket(ticket)

    call = wait_for(
        lambda: ToolCall.objects.filter(session=session, status="in_doubt").first(),
        timeout=30,
        what="a call in doubt",
    )
    assert wait_for(lambda: Session.objects.get(pk=session.pk).status == "in_doubt")
    assert "tool.in_doubt" in kinds(session)
    assert call.attempts == 1  # sent once, never resent
    assert sandbox.stats()["escalations"] == 1

    toolcall_resolve(
        tool_call_id=call.id,
        user=alice,
        resolution="succeeded",
        note="Checked the helpdesk: it went through.",
    )
    turn = wait_turn(session)

    assert turn.status == "succeeded", workers.logs()
    call.refresh_from_db()
    assert call.status == "succeeded" and call.attempts == 1
    assert sandbox.stats()["escalations"] == 1  # still exactly one
    assert_invariants(session)


def test_a_rate_limited_escalation_is_retried_not_in_doubt(sandbox, workers):
    """A 429 is a refusal: nothing happened at the helpdesk, so even a tool
    that is not idempotent is sent again (issue 16), and the escalation
    happens exactly once."""
    workers.start()
    ticket = sandbox.ticket(
        email="dana.kowalski@example.com",
        subject="Manager please",
        body="This is the third time. I want to speak to a manager about order ORD-1007.",
        order_id="ORD-1007",
    )
    escalations = f"/helpdesk/tickets/{ticket['id']}/escalations"
    sandbox.fault(
        target="helpdesk", kind="status", status=429, count=2, match={"path_prefix": escalations}
    )
    session = deliver_ticket(ticket)

    turn = wait_turn(session)

    assert turn.status == "succeeded", workers.logs()
    call = ToolCall.objects.get(session=session, name="escalate_to_human")
    assert call.status == "succeeded"
    assert "tool.in_doubt" not in kinds(session)
    assert sandbox.stats()["escalations"] == 1
    assert sandbox.stats()["faults_applied"]["helpdesk.status"] == 2
    assert_invariants(session)
