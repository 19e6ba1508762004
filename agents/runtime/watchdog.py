"""The sweeper, run by a thread in every worker process.

Beat only sends a `sweep_sessions` task; a task waits for a free worker, and
under load every worker may be busy for a whole time slice or a stalled model
call (the fault campaign measured kill -> sweep p99 at 10.8 s that way). The
thread sweeps on its own clock, so noticing a dead owner takes at most
AGENTDESK_SWEEP_GRACE_S + AGENTDESK_SWEEP_INTERVAL_S whatever the workers are
doing; the re-enqueued trigger then jumps the routine backlog (dispatch.URGENT).
Several workers sweeping at once send one trigger per session: the sweeper's
Redis marker (SET NX) lets only the first through.

The same thread checks, every interval, that this process's liveness lock
still stands (runtime/ownership.py), and gives its pooled connection back
after each sweep.
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


def start() -> None:
    """Start this process's sweeper thread (once per process, fork-aware)."""
    global _started_in
    with _lock:
        if _started_in == os.getpid() or settings.AGENTDESK_SWEEP_INTERVAL_S <= 0:
            return
        _started_in = os.getpid()
    thread = threading.Thread(target=_run, name="sweeper", daemon=True)
    thread.start()


def _run() -> None:
    stop = threading.Event()  # never set: the thread ends with its (daemon) process
    while not stop.wait(settings.AGENTDESK_SWEEP_INTERVAL_S):
        try:
            ownership.check_liveness()
            connection.close_if_unusable_or_obsolete()
            store.abandon_pending()  # claims a lost connection kept us from letting go
            store.never_sent_pending()  # ...and calls it kept us from saying never left
            sweeper.sweep()
        except Exception:  # database or Redis away: try again next interval
            log.warning("sweeper thread: sweep failed; retrying", exc_info=True)
            connection.close()
        finally:
            pool.give_back()
