"""The worker's slots: a Celery pool whose threads all start with the worker.

A worker drives many sessions at once, one per slot (README "Sizing"), and
Celery's `threads` pool is a ThreadPoolExecutor, which makes a thread only
when a task arrives and none is idle: the consumer thread, the one that
takes messages from the broker, calls Thread.start() and waits until the
new thread has run. While a burst fills a fresh worker's slots, the slots
already busy hold the GIL, so each start waited milliseconds, and the
burst's triggers sat received but not started: at 960 tickets on a fresh
worker of 1,000 slots, accepted -> first claimed took 1.3 s at the median
and 11.3 s at the p95 (py-spy: the consumer thread in Thread.start), long
enough for the sweeper to take those triggers for lost and send each
again. Here every thread starts with the worker, before it consumes, and
waits on one queue; a task is handed over with a put.

Otherwise it behaves as the `threads` pool does: no time limits (the
engine keeps its own deadlines), no terminate, and a stop lets the running
tasks finish and drops the ones not started (their messages are not
acknowledged, so the broker delivers them again).

While the broker is away, a trigger this process cannot send is handed to
one of its own slots instead (`run`, agents/runtime/dispatch.py): the
sessions of a worker that died in a Redis outage are taken over within a
sweep, not when Redis is back.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from celery.concurrency.base import BasePool, apply_target

log = logging.getLogger(__name__)

_STOP = None  # what a slot's thread takes from the queue to end


class SlotPool(BasePool):
    body_can_be_buffer = True
    signal_safe = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inbox: queue.SimpleQueue[tuple | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def on_start(self) -> None:
        for number in range(self.limit):
            thread = threading.Thread(target=self._serve, name=f"slot-{number + 1}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self) -> None:
        while (item := self._inbox.get()) is not _STOP:
            target, args, kwargs, callback, accept_callback = item
            apply_target(target, args, kwargs, callback, accept_callback)

    def on_apply(
        self,
        target: Any,
        args: tuple | None = None,
        kwargs: dict | None = None,
        callback: Any = None,
        accept_callback: Any = None,
        **_: Any,
    ) -> None:
        self._inbox.put((target, args, kwargs, callback, accept_callback))

    def run(self, fn: Any, arg: Any) -> None:
        """fn(arg) on the next free slot, not through the broker: what
        raises is logged (a slot's thread must not end with it)."""
        self._inbox.put((_logged, (fn, arg), None, _ignore, None))

    def on_stop(self) -> None:
        dropped = 0
        while True:  # tasks not started: their messages go back to the broker
            try:
                if self._inbox.get_nowait() is not _STOP:
                    dropped += 1
            except queue.Empty:
                break
        if dropped:
            log.info("slot pool stopping: %d received task(s) not started", dropped)
        for _ in self._threads:
            self._inbox.put(_STOP)
        for thread in self._threads:
            thread.join()
        super().on_stop()

    def _get_info(self) -> dict[str, Any]:
        info = super()._get_info()
        info.update({"max-concurrency": self.limit, "threads": len(self._threads)})
        return info


def _logged(fn: Any, arg: Any) -> None:
    try:
        fn(arg)
    except Exception:
        log.exception("%s(%r) raised on a slot", getattr(fn, "__name__", fn), arg)


def _ignore(_: Any) -> None:
    pass
