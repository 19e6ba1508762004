"""429/529 from the model: retried with backoff, visible, never lost."""

from __future__ import annotations

import pytest

from agents.models import Event
from tests.agents.helpers import assert_invariants, deliver_ticket, wait_turn

pytestmark = pytest.mark.django_db(transaction=True)

TICKET = {
    "email": "bob.okafor@example.net",
    "subject": "Where is it",
    "body": "Where is order ORD-1003?",
    "order_id": "ORD-1003",
}


def test_a_429_with_retry_after_is_retried_by_the_client(sandbox, workers):
    sandbox.fault(target="messages", kind="status", status=429, retry_after=1, count=1)
    workers.start()
    session = deliver_ticket(sandbox.ticket(**TICKET))
    turn = wait_turn(session)
    assert turn.status == "succeeded", workers.logs()
    assert not Event.objects.filter(session=session, kind="model.failed").exists()
    assert sandbox.stats()["faults_applied"]
    assert_invariants(session)


def test_an_overloaded_model_past_the_client_retries_is_a_visible_retry_later(sandbox, workers):
    # More 529s than the SDK's own retries: the step fails, is recorded, and
    # the worker comes back after a backoff.
    sandbox.fault(target="messages", kind="status", status=529, count=4)
    workers.start(AGENTDESK_MODEL_MAX_RETRIES="1")
    session = deliver_ticket(sandbox.ticket(**TICKET))
    turn = wait_turn(session, timeout=60)
    assert turn.status == "succeeded", workers.logs()
    failures = Event.objects.filter(session=session, kind="model.failed")
    assert failures.count() >= 2
    assert "529" in failures.first().data["reason"]
    assert_invariants(session)
