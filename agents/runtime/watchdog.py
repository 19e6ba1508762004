"""The sweeper, run by a thread in every worker process.

Beat only sends a `sweep_sessions` task; a task waits for a free worker, and
under load every worker may be busy for a whole time slice or a stalled model
call (the fault campaign measured kill -> sweep p99 at 10.8 s that way). The
thread sweeps on its own clock, so noticing a dead owner takes at most
AGENTDESK_SWEEP_GRACE_S + AGENTDESK_SWEEP_INTERVAL_S whatever the workers are
doing; the re-enqueued trigger then jumps the routine backlog (dispatch.URGENT).
Several workers sweeping at once send one trigger per session: the sweeper's
Redis marker (SET NX) lets only the first through.

A thread of its own checks, every interval, that this process's liveness
lock still stands, and takes it again once lost (runtime/ownership.py). It
used to be the sweeper's first step, and a sweep can wait seconds (for a
pooled connection among a thousand slots, on a cut link): a process whose
lock went with a PostgreSQL restart took it again 20 s later, and every
other process's sweeper had taken its sessions over meanwhile, its model
calls in flight paid again (issue 26). That thread holds no pooled
connection; the lock's is its own.
"""

from __future__ import annotations

import logging
import os
import threading

from django.conf import settings
from django.db import connection

from agents.runtime import ownership, store, sweeper
from agents.runtime.store import pool

log = logging.getLogger(__name__)

_started_in: int | None = None
_lock = threading.Lock()
_stop = threading.Event()  # set only by stop(); else the threads end with their (daemon) process
_threads: list[threading.Thread] = []


def start() -> None:
    """Start this process's threads (once per process, fork-aware)."""
    global _started_in
    with _lock:
        if _started_in == os.getpid() or settings.AGENTDESK_SWEEP_INTERVAL_S <= 0:
            return
        _started_in = os.getpid()
        _stop.clear()
        _threads[:] = [
            threading.Thread(target=target, name=name, daemon=True)
            for target, name in ((_keep_liveness, "liveness"), (_sweep, "sweeper"))
        ]
    for thread in _threads:
        thread.start()


def stop(timeout: float = 60.0) -> None:
    """End the threads (tests: a worker's threads end with its process)."""
    global _started_in
    _stop.set()
    for thread in _threads:
        thread.join(timeout)
    with _lock:
        _started_in = None


def _keep_liveness() -> None:
    while not _stop.wait(settings.AGENTDESK_SWEEP_INTERVAL_S):
        try:
            ownership.check_liveness()
        except Exception as exc:  # the database away: try again next interval (one line each)
            log.warning("liveness thread: could not take the liveness lock again: %s", exc)


def _sweep() -> None:
    while not _stop.wait(settings.AGENTDESK_SWEEP_INTERVAL_S):
        try:
            connection.close_if_unusable_or_obsolete()
            store.abandon_pending()  # claims a lost connection kept us from letting go
            store.never_sent_pending()  # ...and calls it kept us from saying never left
            sweeper.sweep()
        except Exception:  # database or Redis away: try again next interval
            log.warning("sweeper thread: sweep failed; retrying", exc_info=True)
            connection.close()
        finally:
            pool.give_back()
