"""A trigger that meets the database away is sent again later, not dropped.

A restart, a failover, every backend terminated, this host cut off: the
task of a trigger that arrives meanwhile fails before it can claim (taking
the liveness lock again, borrowing a connection) or while it claims. Left
to fail, the trigger is gone, its mark still says one is on its way, and
the session waits for the sweeper to call the trigger lost (10 s after its
mark, up to 2 minutes while the queue holds a backlog): the slowest
recoveries of the chaos campaign's database restarts (issue 26).

So the task sends its session's trigger again, with a fresh mark, after a
delay that grows with how long this process has seen the database away:
about a second at first (a restart takes a few), up to CAP_S for a long
outage, so hundreds of sessions do not knock every second on a database
that is not there. The first task that gets through ends the streak.
Sessions a claim had already taken are let go first (engine: abandon), so
the trigger's claim is a recovery.
"""

from __future__ import annotations

import logging
import random
import threading
import time

import psycopg
from django.db import InterfaceError, OperationalError

from agents.observability import metrics
from agents.runtime import dispatch

log = logging.getLogger(__name__)

# What a task meets when the database is away: Django's errors around its
# connections, psycopg's around the liveness lock's own (ownership.py).
ERRORS = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)

FIRST_S = 1.0
CAP_S = 10.0


class _Streak:
    """Since when this process's tasks have met the database away."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None

    def delay(self) -> float:
        """Seconds until the trigger is sent again: FIRST_S, growing by half
        the time away so far, up to CAP_S, with a fifth of jitter either way."""
        now = time.monotonic()
        with self._lock:
            if self._since is None:
                self._since = now
            away = now - self._since
        return min(CAP_S, FIRST_S + away / 2) * random.uniform(0.8, 1.2)  # noqa: S311 (jitter)

    def end(self) -> None:
        if self._since is not None:
            with self._lock:
                self._since = None


_streak = _Streak()


def send_again_later(session_id: int, exc: BaseException) -> None:
    """The task for this session met the database away: trigger it again."""
    delay = _streak.delay()
    log.warning(
        "session %s: the database is away (%s); trigger sent again in %.1fs",
        session_id,
        str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__,
        delay,
    )
    metrics.TRIGGERS_SENT_AGAIN.labels("database_away").inc()
    dispatch.enqueue(session_id, countdown=delay, urgent=True)


def reached() -> None:
    """A task got through to the database: the streak is over."""
    _streak.end()
