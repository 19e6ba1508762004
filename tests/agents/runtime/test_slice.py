"""A task lets go of its slot after a time slice only while other work waits
for a slot (engine.Slice): a long turn on an idle worker is claimed once,
and one on a full worker takes turns with what waits behind it."""

from __future__ import annotations

import pytest

from agents.models import SessionRuntime
from tests.agents.helpers import assert_invariants, deliver_ticket, wait_turn
from tests.agents.runtime.test_many_in_flight import lookup_ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Five model calls at 1 s each: a turn outlives several 1 s slices.
PACE_MS = 1000
SLICED = {"AGENTDESK_TASK_SLICE_S": "1"}


def _claims(session) -> int:
    """Every claim bumps the fencing token."""
    return SessionRuntime.objects.get(session=session).fence


def test_a_turn_past_its_slice_keeps_its_slot_when_nothing_waits(sandbox, workers):
    sandbox.post("/_model_pace", {"ttft_ms": PACE_MS, "tokens_per_s": 0})
    workers.start("roomy", **SLICED)
    session = deliver_ticket(lookup_ticket(sandbox, 0))
    turn = wait_turn(session, timeout=90)
    assert turn.status == "succeeded", turn.error
    assert _claims(session) == 1  # five slices long, one claim
    assert_invariants(session)


def test_a_turn_past_its_slice_lets_go_while_work_waits_for_its_slot(sandbox, workers):
    sandbox.post("/_model_pace", {"ttft_ms": PACE_MS, "tokens_per_s": 0})
    workers.start("full", AGENTDESK_WORKER_SLOTS="1", **SLICED)
    first = deliver_ticket(lookup_ticket(sandbox, 0))
    second = deliver_ticket(lookup_ticket(sandbox, 1))  # waits in the queue for the one slot
    for session in (first, second):
        assert wait_turn(session, timeout=120).status == "succeeded"
        assert_invariants(session)
    # The first turn gave the slot up for the second at least once.
    assert _claims(first) >= 2, (_claims(first), _claims(second))
