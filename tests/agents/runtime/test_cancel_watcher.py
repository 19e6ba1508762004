"""The cancel watcher (agents/runtime/cancel.py) as the slots meet it: a
model call's way in and out never waits on the watcher's lock, and a call
that starts while the watcher sleeps still has its deadline kept."""

from __future__ import annotations

import threading

import pytest

from agents.runtime import cancel
from tests.processes import wait_for


def test_a_model_call_does_not_wait_for_the_watchers_lock():
    watcher = cancel._Watcher()
    with watcher.watch(1, timeout_s=None):  # starts the watcher thread
        pass
    entered = threading.Event()

    def model_call() -> None:
        with watcher.watch(2, timeout_s=30):
            entered.set()

    # Held as by the watcher thread between two polls, waiting for the GIL
    # behind hundreds of runnable slots.
    with watcher.cond:
        slot = threading.Thread(target=model_call)
        slot.start()
        assert entered.wait(5), "the call waited for the watcher's lock"
        slot.join(5)
    assert not watcher.watched  # in and out again


@pytest.mark.django_db(transaction=True)
def test_a_call_starting_while_the_watcher_sleeps_is_cut_at_its_deadline(monkeypatch):
    monkeypatch.setattr(cancel, "IDLE_CLOSE_S", 0.0)
    monkeypatch.setattr(cancel, "POLL_S", 0.02)
    watcher = cancel._Watcher()
    with watcher.watch(1, timeout_s=None):
        pass
    wait_for(lambda: watcher.asleep, what="the watcher asleep, nothing watched")
    for session_id in range(2, 12):  # again and again: each one woken, none missed
        with watcher.watch(session_id, timeout_s=0.05) as signal:
            wait_for(signal.is_set, timeout=5, what=f"call {session_id} cut at its deadline")
        assert signal.timed_out
        wait_for(lambda: watcher.asleep, what="the watcher asleep again")
