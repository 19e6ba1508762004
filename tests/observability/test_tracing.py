"""Traces: one per turn, with a span per model call, tool call and approval
wait, whichever process ran them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents.models import Session, ToolCall, Turn
from agents.observability import tracing
from agents.runtime import engine, ownership
from approvals.models import Approval
from approvals.services import approval_decide
from tests.agents.helpers import deliver_ticket, wait_turn
from tests.observability.conftest import REFUND, TICKET
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, into memory, for this test only."""
    exporter = InMemorySpanExporter()
    tracing.configure(processor=SimpleSpanProcessor(exporter))
    yield exporter
    tracing.configure(None)


@pytest.fixture(autouse=True)
def _liveness_released() -> Iterator[None]:
    """_run takes this process's liveness lock, on a connection of its own
    that would outlive the test database ('being accessed by other users')."""
    yield
    ownership.release_liveness()


def _run(session: Session) -> None:
    """The engine, in this process: what a worker's advance task does."""
    engine.advance(session.id)


def test_a_turn_is_one_trace_with_model_tool_and_approval_wait_spans(sandbox, broker, spans, bob):
    session = deliver_ticket(sandbox.ticket(**REFUND))
    _run(session)  # up to the approval: the turn parks
    approval = Approval.objects.get(session=session, status="pending")
    approval_decide(approval_id=approval.id, user=bob, decision="approve")
    _run(session)  # resumed: the refund, the reply
    turn = Turn.objects.get(session=session)
    assert turn.status == "succeeded"

    finished = spans.get_finished_spans()
    trace_id, turn_span_id = tracing.turn_ids(turn.id, session.key)
    assert {s.context.trace_id for s in finished} == {trace_id}  # one trace, two tasks
    (root,) = [s for s in finished if s.name == "agent.turn"]
    assert root.context.span_id == turn_span_id and root.parent is None
    assert root.attributes["agentdesk.session_key"] == session.key
    assert root.attributes["agentdesk.outcome"] == "succeeded"
    assert root.start_time == int(turn.started_at.timestamp() * 1e9)
    children = [s for s in finished if s is not root]
    assert all(s.parent.span_id == turn_span_id for s in children)

    models = [s for s in children if s.name == "model.call"]
    tools = [s for s in children if s.name == "tool.call"]
    waits = [s for s in children if s.name == "approval.wait"]
    assert len(models) == turn.steps
    assert all(s.attributes["agentdesk.outcome"] == "ok" for s in models)
    assert all(s.attributes["gen_ai.usage.output_tokens"] > 0 for s in models)
    calls = ToolCall.objects.filter(session=session).order_by("id")
    assert [s.attributes["agentdesk.tool"] for s in tools] == [c.name for c in calls]
    assert [s.attributes["agentdesk.outcome"] for s in tools] == [c.status for c in calls]
    refund = next(s for s in tools if s.attributes["agentdesk.tool"] == "issue_refund")
    assert refund.attributes["agentdesk.attempt"] == 1
    # Steps are numbered by the transcript position they record: all distinct.
    steps = [s.attributes["agentdesk.step"] for s in models + tools]
    assert len(set(steps)) == len(steps)
    for span in children:
        assert span.attributes["agentdesk.session_key"] == session.key
        assert span.start_time <= span.end_time
    (wait,) = waits
    approval.refresh_from_db()
    assert wait.start_time == int(approval.created_at.timestamp() * 1e9)
    assert wait.end_time == int(approval.decided_at.timestamp() * 1e9)
    assert wait.attributes["agentdesk.outcome"] == "approved"
    assert wait.attributes["agentdesk.tool"] == "issue_refund"
    assert root.start_time <= min(s.start_time for s in children)
    assert root.end_time >= max(s.end_time for s in children)


def test_a_canceled_turn_ends_its_trace_with_the_cancel(sandbox, broker, spans, alice, bob):
    from agents.services import turn_cancel

    session = deliver_ticket(sandbox.ticket(**REFUND))
    _run(session)  # parked on the approval
    turn_cancel(session_id=session.id, user=alice)  # a person cancels the parked turn
    turn = Turn.objects.get(session=session)
    assert turn.status == "canceled"
    (root,) = [s for s in spans.get_finished_spans() if s.name == "agent.turn"]
    assert root.attributes["agentdesk.outcome"] == "canceled"
    assert root.context.trace_id == tracing.turn_ids(turn.id, session.key)[0]


def test_tracing_off_emits_nothing_and_the_turn_still_runs(sandbox, broker):
    tracing.configure(None)
    assert not tracing.enabled()
    session = deliver_ticket(sandbox.ticket(**TICKET))
    _run(session)
    assert Turn.objects.get(session=session).status == "succeeded"


def test_spans_reach_an_otlp_collector_from_a_real_worker(sandbox, workers, otlp_collector):
    workers.start(OTEL_EXPORTER_OTLP_ENDPOINT=otlp_collector.url, OTEL_BSP_SCHEDULE_DELAY="100")
    session = deliver_ticket(sandbox.ticket(**TICKET))
    turn = wait_turn(session)
    assert turn.status == "succeeded", workers.logs()

    trace_id, turn_span_id = tracing.turn_ids(turn.id, session.key)

    def turn_span():
        return next((s for s in otlp_collector.spans() if s.name == "agent.turn"), None)

    root = wait_for(turn_span, timeout=30, what="the turn span at the collector")
    assert root.trace_id == trace_id.to_bytes(16, "big")
    assert root.span_id == turn_span_id.to_bytes(8, "big")
    received = otlp_collector.spans()
    names = [s.name for s in received]
    assert names.count("model.call") == turn.steps
    assert names.count("tool.call") == ToolCall.objects.filter(session=session).count()
    assert {s.trace_id for s in received} == {root.trace_id}
    attributes = {a.key: a.value for a in received[0].attributes}
    assert attributes["agentdesk.session_key"].string_value == session.key
