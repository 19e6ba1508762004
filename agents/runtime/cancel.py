"""Noticing a cancel, or a deadline, while a model stream is in flight.

At step boundaries the engine learns of a cancel for free (every record
statement returns the flag). During a model call it needs a watcher: one
thread per worker process polls the flags of the sessions this process is
streaming for and fires their abort signals (which close the HTTP stream, so
even a stalled stream ends at once). The same thread cuts a call that runs
past its deadline: the SDK's timeouts are per read, so a stream that drips a
token now and then would otherwise never end.

Many sessions per process: one watcher for all of them; each poll borrows a
pooled connection for one query and gives it back (store.pool), so watching
holds no connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import connection

from agents.runtime.store import pool

POLL_S = 0.25
IDLE_CLOSE_S = 30.0


CANCELED = "canceled"
TIMED_OUT = "timed_out"


class AbortSignal:
    def __init__(self, deadline: float | None = None) -> None:
        # A flag under a lock, not a threading.Event (a Condition and a lock
        # of its own, made on every model call): nothing waits on it.
        self._fired = False
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self.deadline = deadline  # time.monotonic() past which the call is cut
        self.reason = ""  # CANCELED or TIMED_OUT, once fired

    def is_set(self) -> bool:
        return self._fired

    def on_abort(self, callback: Callable[[], None]) -> None:
        with self._lock:
            fire = self._fired
            if not fire:
                self._callbacks.append(callback)
        if fire:
            callback()

    @property
    def timed_out(self) -> bool:
        return self.reason == TIMED_OUT

    def fire(self, reason: str = CANCELED) -> None:
        with self._lock:
            if not self._fired:
                self.reason = reason
            self._fired = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # closing an already-closed stream, etc.
                pass


class _Watcher:
    """Polls every POLL_S while this process streams (a cancel reaches a
    stream within POLL_S), and sleeps once nothing has streamed for
    IDLE_CLOSE_S. A model call never wakes it: at one call per step that was
    a thread switch per step, most of them for calls already over.

    Nor does a model call take a lock on its way in or out: `watched` is a
    dict whose every change is one operation under the GIL. With a lock, a
    2,000-ticket burst queued 80-250 of a worker's slots on it (py-spy
    dump): each hand-over of the lock waited for the GIL behind hundreds of
    runnable threads. `cond` is taken only to start the thread and to wake it
    from its sleep: it says `asleep` before it looks at `watched` for the
    last time, and a call adds itself before it looks at `asleep`, so one of
    the two sees the other."""

    def __init__(self) -> None:
        self.watched: dict[int, AbortSignal] = {}
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None
        self.asleep = False

    @contextmanager
    def watch(self, session_id: int, timeout_s: float | None) -> Iterator[AbortSignal]:
        deadline = time.monotonic() + timeout_s if timeout_s else None
        signal = AbortSignal(deadline)
        self.watched[session_id] = signal
        if self.asleep or self.thread is None or not self.thread.is_alive():
            self._wake()
        try:
            yield signal
        finally:
            self.watched.pop(session_id, None)

    def _wake(self) -> None:
        with self.cond:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="cancel-watch", daemon=True)
                self.thread.start()
            if self.asleep:
                self.cond.notify()

    def _snapshot(self) -> list[tuple[int, AbortSignal]]:
        while True:
            try:
                return list(self.watched.items())
            except RuntimeError:  # changed while copied (a collection ran Python code)
                continue

    def _run(self) -> None:
        last_watched = time.monotonic()
        while True:
            with self.cond:
                if self.watched:
                    last_watched = time.monotonic()
                elif time.monotonic() - last_watched > IDLE_CLOSE_S:
                    connection.close()  # idle a while: give the connection back
                    self.asleep = True
                    while not self.watched:
                        self.cond.wait()
                    self.asleep = False
                # Most model calls end before the next tick; a cancel is read
                # for free at the step boundary after them (every record
                # statement returns the flag), so only longer calls are polled.
                self.cond.wait(POLL_S)
            watched = self._snapshot()
            if not watched:
                continue
            now = time.monotonic()
            for _, signal in watched:
                if signal.deadline is not None and now > signal.deadline:
                    signal.fire(TIMED_OUT)
            try:
                canceled = _canceled()
            except Exception:
                connection.close()
                canceled = set()
            finally:
                pool.give_back()
            for session_id in canceled:
                signal = self.watched.get(session_id)
                if signal is not None:
                    signal.fire(CANCELED)


def _canceled() -> set[int]:
    """Every session with a cancel pending, in the whole database: a few at
    any time (the flag is cleared as the turn ends), read through a partial
    index. Asking about the streaming sessions by id instead cost a process
    with 1,000 in flight a 1,000-id array four times a second (6% of its
    CPU while a burst came in, py-spy)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT session_id FROM agents_sessionruntime WHERE cancel_requested")
        return {row[0] for row in cursor.fetchall()}


_watcher = _Watcher()


def watch(session_id: int, timeout_s: float | None = None):
    """Context manager: an AbortSignal fired when the session's turn is
    canceled, or when the call runs past `timeout_s` (its reason says which)."""
    return _watcher.watch(session_id, timeout_s)
