"""JSON logs: every line a worker logs during a step carries the session
key, the turn and the step."""

from __future__ import annotations

import json
import logging

import pytest

from agents.models import Event
from agents.observability import logs
from tests.agents.helpers import deliver_ticket, wait_turn
from tests.observability.conftest import TICKET

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_worker_logs_json_lines_with_the_step_context(sandbox, workers):
    # A 429 from the model: the SDK logs its retry, from inside the model step.
    sandbox.fault(target="messages", kind="status", status=429, retry_after=1, count=1)
    worker = workers.start(AGENTDESK_LOG_FORMAT="json")
    session = deliver_ticket(sandbox.ticket(**TICKET))
    turn = wait_turn(session)
    assert turn.status == "succeeded", workers.logs()

    lines = [line for line in worker.log().splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in lines]
    assert records and all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    retries = [r for r in records if r["message"].startswith("Retrying request")]
    assert retries, worker.log()[-3000:]
    first_model_step = Event.objects.get(session=session, kind="model.replied", seq__lte=4)
    for record in retries:
        assert record["session_key"] == session.key
        assert record["turn"] == 1
        assert record["step"] == first_model_step.position
        # The slot that ran the step: the same one its event names as actor.
        slot = first_model_step.actor.rsplit("/", 1)[1]
        assert (record["process"], record["thread"]) == (worker.pid, f"slot-{slot}")
    # Between steps (Celery's own lines) there is no step context to report.
    assert any("session_key" not in r for r in records)


def test_the_formatter_adds_the_bound_context_and_drops_it_after():
    formatter = logs.JsonFormatter()
    record = logging.LogRecord("agents.x", logging.INFO, __file__, 1, "hello %s", ("you",), None)
    token = logs.bind("ticket:7", 2, 5)
    try:
        inside = json.loads(formatter.format(record))
    finally:
        logs.unbind(token)
    after = json.loads(formatter.format(record))
    assert inside["message"] == "hello you"
    assert (inside["session_key"], inside["turn"], inside["step"]) == ("ticket:7", 2, 5)
    assert inside["level"] == "INFO" and inside["logger"] == "agents.x"
    assert "session_key" not in after
