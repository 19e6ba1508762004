"""The fast path of inner steps (store/steps.py::advance): host call n's
result and host call n+1 begun in one fenced statement. Real Postgres."""

from __future__ import annotations

import pytest

from agents.budgets import Limits
from agents.models import Event, SessionRuntime, ToolCall
from agents.runtime.state import CallState, Claimed
from agents.runtime.store import steps
from agents.runtime.store.lock import LostClaim
from agents.tools.base import Kind, StepBegun, StepEnded
from agents.transitions import IllegalTransition
from tests.dashboard import factories

pytestmark = pytest.mark.django_db(transaction=True)


def program_call():
    """A turn whose run_code call is running, and the claim that runs it."""
    call = factories.parked_call(
        name="run_code", arguments={"code": "x"}, call_status=ToolCall.Status.RUNNING
    )
    runtime = SessionRuntime.objects.get(pk=call.session_id)
    SessionRuntime.objects.filter(pk=call.session_id).update(fence=7, owner="w1")
    claimed = Claimed(
        session_id=call.session_id,
        key=call.session.key,
        profile="support_codemode",
        context={},
        fence=7,
        owner="w1",
        turn_id=call.turn_id,
        turn_number=1,
        started_by_id=None,
        limits=Limits(max_turn_steps=50),
        turn_steps=1,
        transcript=[],
        calls=[],
    )
    state = CallState(
        call.id, call.tool_use_id, call.idempotency_key, call.name, "", "running", call.input
    )
    return claimed, state, runtime.last_seq


def test_a_result_and_the_next_call_begun_are_one_commit_with_their_events():
    claimed, call, seq = program_call()
    first = steps.advance(claimed, call, None, StepBegun(1, "lookup_order", {"order_id": "A"}))
    assert first == f"{claimed.key}:{call.tool_use_id}:1"
    ended = StepEnded(1, "lookup_order", '{"status": "shipped"}', snapshot=b"state-1", ms=3)
    second = steps.advance(
        claimed, call, ended, StepBegun(2, "issue_refund", {"n": 1}, Kind.IDEMPOTENT_BY_KEY)
    )
    rows = list(ToolCall.objects.filter(parent_id=call.id).order_by("step"))
    assert [(r.step, r.status, r.attempts, r.idempotency_key) for r in rows] == [
        (1, "succeeded", 1, first),
        (2, "running", 1, second),
    ]
    assert bytes(rows[0].snapshot) == b"state-1" and rows[0].output == '{"status": "shipped"}'
    assert rows[1].kind == "idempotent_by_key" and rows[1].input == {"n": 1}
    assert rows[1].message_position == ToolCall.objects.get(pk=call.id).message_position
    added = list(Event.objects.filter(session_id=claimed.session_id, seq__gt=seq).order_by("seq"))
    assert [(e.seq, e.kind, e.data["step"]) for e in added] == [
        (seq + 1, "tool.step_began", 1),
        (seq + 2, "tool.step_ended", 1),
        (seq + 3, "tool.step_began", 2),
    ]
    assert added[1].data["ms"] == 3 and added[2].data["input"] == {"n": 1}
    assert SessionRuntime.objects.get(pk=claimed.session_id).last_seq == seq + 3


def test_another_claim_or_a_step_not_running_writes_nothing():
    claimed, call, seq = program_call()
    steps.advance(claimed, call, None, StepBegun(1, "lookup_order", {"order_id": "A"}))
    ended = StepEnded(1, "lookup_order", "{}")
    SessionRuntime.objects.filter(pk=claimed.session_id).update(fence=8)  # a new claim
    with pytest.raises(LostClaim):
        steps.advance(claimed, call, ended, StepBegun(2, "lookup_order", {"order_id": "B"}))
    SessionRuntime.objects.filter(pk=claimed.session_id).update(fence=7)
    with pytest.raises(IllegalTransition):  # step 2 was never begun
        steps.advance(claimed, call, StepEnded(2, "lookup_order", "{}"), None)
    assert [r.status for r in ToolCall.objects.filter(parent_id=call.id)] == ["running"]
    assert SessionRuntime.objects.get(pk=claimed.session_id).last_seq == seq + 1  # no gap
    assert Event.objects.filter(session_id=claimed.session_id).count() == seq + 1
