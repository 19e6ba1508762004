"""Noticing a cancel while a model stream is in flight.

At step boundaries the engine learns of a cancel for free (every record
statement returns the flag). During a model call it needs a watcher: one
thread per worker process, with its own database connection, polls the
flags of the sessions this process is streaming for and fires their abort
signals (which close the HTTP stream, so even a stalled stream ends at once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import connection

POLL_S = 0.25
IDLE_CLOSE_S = 30.0


class AbortSignal:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def is_set(self) -> bool:
        return self._event.is_set()

    def on_abort(self, callback: Callable[[], None]) -> None:
        with self._lock:
            fire = self._event.is_set()
            if not fire:
                self._callbacks.append(callback)
        if fire:
            callback()

    def fire(self) -> None:
        with self._lock:
            self._event.set()
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
    a thread switch per step, most of them for calls already over."""

    def __init__(self) -> None:
        self.watched: dict[int, AbortSignal] = {}
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None
        self.asleep = False

    @contextmanager
    def watch(self, session_id: int) -> Iterator[AbortSignal]:
        signal = AbortSignal()
        with self.cond:
            self.watched[session_id] = signal
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="cancel-watch", daemon=True)
                self.thread.start()
            if self.asleep:
                self.cond.notify()
        try:
            yield signal
        finally:
            with self.cond:
                self.watched.pop(session_id, None)

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
                ids = list(self.watched)
            if not ids:
                continue
            try:
                canceled = _canceled(ids)
            except Exception:
                connection.close()
                canceled = []
            for session_id in canceled:
                signal = self.watched.get(session_id)
                if signal is not None:
                    signal.fire()


def _canceled(ids: list[int]) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT session_id FROM agents_sessionruntime "
            "WHERE session_id = ANY(%s) AND cancel_requested",
            [ids],
        )
        return [row[0] for row in cursor.fetchall()]


_watcher = _Watcher()


def watch(session_id: int):
    """Context manager: an AbortSignal fired when the session's turn is canceled."""
    return _watcher.watch(session_id)
