"""The worker's slot pool (config/slots.py): every slot's thread starts with
the worker, so a burst on a fresh worker is not held up making threads."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.models import Turn
from tests.agents.helpers import deliver_ticket
from tests.agents.runtime.test_many_in_flight import lookup_ticket
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SLOTS = 60


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def test_every_slot_has_its_thread_before_the_first_task(sandbox, workers):
    sandbox.post("/_model_pace", {"ttft_ms": 10_000, "tokens_per_s": 0})
    worker = workers.start("slots", AGENTDESK_WORKER_SLOTS=str(SLOTS))
    # Ready means consuming: the slots' threads are all there already
    # (Celery's own threads pool had one, then made them as tasks came).
    assert _threads(worker.pid) >= SLOTS, worker.log()[-3000:]

    sessions = [deliver_ticket(lookup_ticket(sandbox, i)) for i in range(SLOTS)]

    def all_claimed():
        turns = Turn.objects.filter(session__in=sessions, number=1)
        return turns.filter(started_at__isnull=False).count() == SLOTS and list(turns)

    turns = wait_for(all_claimed, timeout=60, what=f"all {SLOTS} first turns claimed")
    # Every session was claimed while the others waited on their first model
    # call (10 s): the slots ran side by side, none waited for another.
    assert not [t for t in turns if t.status in Turn.TERMINAL], workers.logs()


def test_work_handed_to_a_slot_runs_and_what_raises_leaves_the_slot_serving(caplog):
    """What a worker cannot send while the broker is away runs on a slot of
    its own (SlotPool.run, agents/runtime/dispatch.py); a call that raises
    is logged, and the slot's thread goes on serving."""
    from config.slots import SlotPool

    pool = SlotPool(limit=1)
    pool.start()
    ran = []

    def fails(arg):
        raise RuntimeError(f"no {arg}")

    try:
        pool.run(fails, 7)
        pool.run(ran.append, 8)  # the same (only) slot, after the failure
        wait_for(lambda: ran == [8], timeout=10, what="the slot to run the next call")
    finally:
        pool.stop()
    assert "fails(7) raised on a slot" in caplog.text
