"""A late outcome is evidence (issue 26, case 5).

The owner's liveness connection is cut while its escalation (not
idempotent) is in flight, and its key taken meanwhile: another slot takes
the session over and, finding the call `running`, hands it to a person
as in doubt. The first slot is alive and learns the call's outcome after
all; it cannot record it (the fence moved on), but it must leave it where the
person deciding the call sees it, and the note must not say a worker died.
"""

from __future__ import annotations

import pytest

from agents.models import Event, ToolCall
from tests.agents.helpers import deliver_ticket, take_over_liveness
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_outcome_a_slot_learns_after_losing_its_claim_reaches_the_in_doubt_call(
    sandbox, workers
):
    worker = workers.start("victim")
    ticket = sandbox.ticket(
        email="dana.kowalski@example.com",
        subject="Manager please",
        body="This is the third time. I want to speak to a manager about order ORD-1007.",
        order_id="ORD-1007",
    )
    escalations = f"/helpdesk/tickets/{ticket['id']}/escalations"
    # Done at once, answered 4 s later: the call is in flight while we cut.
    sandbox.fault(
        target="helpdesk",
        kind="latency",
        phase="after_commit",
        latency_ms=4000,
        match={"path_prefix": escalations},
    )
    session = deliver_ticket(ticket)
    call = wait_for(
        lambda: ToolCall.objects.filter(
            session=session, name="escalate_to_human", status="running"
        ).first(),
        timeout=60,
        what="the escalation in flight",
    )
    runtime = session.runtime
    runtime.refresh_from_db()
    # Its liveness connection cut and its key drawn by another process: the
    # worker goes on under a new key, and its sessions are taken over.
    take_over_liveness(runtime.owner, runtime.owner_process)

    def evidence():
        call.refresh_from_db()
        return call.status == "in_doubt" and "Late outcome" in call.output

    wait_for(evidence, timeout=60, what="the late outcome on the in-doubt call")
    worker.wait_for_log(r"claim lost, stopping", timeout=30)
    assert "died mid-call" not in call.output, call.output
    assert "lost its claim" in call.output
    assert "succeeded" in call.output.split("Late outcome", 1)[1]
    late = Event.objects.get(session=session, kind="tool.late_outcome")
    assert late.data["status"] == "succeeded" and late.data["name"] == "escalate_to_human"
    assert sandbox.stats()["escalations"] == 1  # never sent again
