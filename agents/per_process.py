"""One object per process, for the threads a process owns."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    """Made on first use, and made again in a forked child: a child (Celery
    prefork) inherits the parent's object but none of its running threads."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._made: tuple[int, T] | None = None

    def get(self) -> T:
        with self._lock:
            if self._made is None or self._made[0] != os.getpid():
                self._made = (os.getpid(), self._factory())
            return self._made[1]

    def current(self) -> T | None:
        """This process's object if it was made, without making it."""
        made = self._made
        return made[1] if made is not None and made[0] == os.getpid() else None
