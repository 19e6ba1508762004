"""What a slot does when its slice is over and work waits (engine.Slice):
its session's next trigger is sent once, and only as many slots let go as
triggers wait. Every slot past its slice sees the same queue; when each that
let go put its session there twice, the others counted both copies as more
work waiting, and a 2,000-ticket burst at 10 s a call had every session
claimed twice (bench.intake)."""

from __future__ import annotations

import pytest

from agents.runtime import dispatch, engine, ownership
from agents.services import message_post
from tests.agents.helpers import drain_broker, queued_triggers


@pytest.mark.django_db(transaction=True)
def test_a_session_that_lets_go_for_waiting_work_is_sent_once(broker, settings):
    settings.AGENTDESK_TASK_SLICE_S = 0  # over at the first look
    ours = message_post(key="ticket:sliced", text="Hello").session_id
    waiting = message_post(key="ticket:waiting", text="Hello").session_id
    drain_broker(broker)  # our trigger taken by this task; the other one waits
    dispatch.enqueue(waiting)
    engine._yields.clear()  # this process's let-gos, none yet

    try:
        engine.advance(ours)
    finally:
        ownership.release_liveness()  # the lock's connection, not the test database's users

    assert queued_triggers(broker) == 2  # the waiting one and ours, once
    assert broker.exists(dispatch.mark_key(ours))


def test_as_many_slots_let_go_as_triggers_wait():
    yields = engine._Yields()
    assert [yields.take(2, 100.0) for _ in range(4)] == [True, True, False, False]
    assert yields.take(3, 101.0) and not yields.take(3, 101.0)  # one more came
    later = 100.0 + yields.YIELD_S + 0.5  # the first two have had time to start it
    assert yields.take(2, later) and not yields.take(2, later)
