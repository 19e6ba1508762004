"""One log line when a dependency goes away and one when it is back.

Live events and streamed text go to Redis after every commit: during a
30 s Redis outage at load, one warning with its traceback per failed send
was 24,000 lines in five minutes of a chaos campaign, burying the lines an
operator needs (the broker lost and found, a session given up). An Outage
says it once, with the first failure's traceback, and once more when a send
works again: how long it lasted and how many sends were dropped meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time


class Outage:
    """failed() after each failed send, ok() after each one that worked;
    thread-safe, and ok() costs one attribute read while nothing is wrong."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log = log
        self._what = what  # "live events not published", "streamed text not buffered"
        self._lock = threading.Lock()
        self._since: float | None = None  # monotonic: the first failure of this outage
        self._dropped = 0

    def failed(self) -> None:
        with self._lock:
            self._dropped += 1
            if self._since is not None:
                return
            self._since = time.monotonic()
        self._log.warning("%s: Redis away; said once until it is back", self._what, exc_info=True)

    def ok(self) -> None:
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            lasted, dropped = time.monotonic() - self._since, self._dropped
            self._since, self._dropped = None, 0
        self._log.warning("%s for %.1fs (%d dropped); Redis is back", self._what, lasted, dropped)
