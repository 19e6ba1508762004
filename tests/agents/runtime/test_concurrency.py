"""Two workers and duplicate `advance` deliveries: one owner at a time."""

from __future__ import annotations

import pytest

from agents.models import Event, Message
from agents.tasks import advance_session
from tests.agents.helpers import assert_invariants, deliver_ticket, wait_turn

pytestmark = pytest.mark.django_db(transaction=True)


def test_duplicate_deliveries_to_two_workers_never_double_a_step(sandbox, workers):
    workers.start("w1")
    workers.start("w2")
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Chipped mugs",
        body="The mugs from order ORD-1001 arrived chipped. Please refund $20.",
        order_id="ORD-1001",
    )
    session = deliver_ticket(ticket)
    for _ in range(20):  # a burst of late and duplicate triggers, to both workers
        advance_session.delay(session.id)

    turn = wait_turn(session)
    for _ in range(5):  # and some after the end: they must find nothing to do
        advance_session.delay(session.id)

    assert turn.status == "succeeded", workers.logs()
    assert len(sandbox.refunds()) == 1
    assistant_rows = Message.objects.filter(session=session, role="assistant").count()
    assert sandbox.stats()["model_requests"]["total"] == assistant_rows
    assert_invariants(session)
    # Every claim after the first is visible as a fence bump; none is a recovery.
    assert not Event.objects.filter(session=session, kind="recovery").exists()
