"""One object per process, for the threads a process owns."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    """Made on first use, and made again in a forked child: a child (Celery
    prefork) inherits the parent's object but none of its running threads.

    A fork forgets the object (os.register_at_fork), so `get()` is one
    attribute read once it is made: it runs on every published commit, where
    a lock and an os.getpid() system call per call were measurable.
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._made: T | None = None
        os.register_at_fork(after_in_child=self._forget)

    def get(self) -> T:
        made = self._made
        if made is not None:
            return made
        with self._lock:
            if self._made is None:
                self._made = self._factory()
            return self._made

    def current(self) -> T | None:
        """This process's object if it was made, without making it."""
        return self._made

    def clear(self) -> None:
        """The next `get()` makes it again (settings changed: tests, benches)."""
        with self._lock:
            self._made = None

    def _forget(self) -> None:
        # The child's copy of the lock may be held by a parent thread that
        # does not exist here: a new one.
        self._lock = threading.Lock()
        self._made = None
