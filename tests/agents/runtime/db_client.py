"""A database client of its own process, for tests that put the database out
of its reach: started with the production settings (config.settings), its
DATABASE_URL, and in whatever network namespace the test chose.

    python -m tests.agents.runtime.db_client liveness  # take the liveness lock, then idle
    python -m tests.agents.runtime.db_client query     # a long query, then a new connection

It prints one JSON line per thing that happened ({"event": ..., ...}): the
test reads them as they come and keeps the time.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import django


def say(event: str, **data) -> None:
    print(json.dumps({"event": event, **data}), flush=True)


def liveness() -> None:
    """Take this process's liveness lock (agents/runtime/ownership.py), as a
    worker does, and sit idle on it: only the server's side of the link can
    let go of it then."""
    from agents.runtime import ownership

    say("locked", key=ownership.me().process)
    threading.Event().wait()


def query() -> None:
    """A query in flight on one of Django's connections (the pool's, with the
    settings' parameters), then the liveness connection made anew: how long
    each takes to fail when the server has gone silent."""
    from django.db import connection

    from agents.runtime import ownership

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        say("connected")
        started = time.monotonic()
        try:
            cursor.execute("SELECT pg_sleep(600)")
            say("query_returned", s=time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 (what a slot would meet)
            say("query_failed", s=time.monotonic() - started, error=str(exc)[:300])
    started = time.monotonic()
    try:
        ownership.me()
        say("connect_returned", s=time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001
        say("connect_failed", s=time.monotonic() - started, error=str(exc)[:300])


if __name__ == "__main__":
    django.setup()
    {"liveness": liveness, "query": query}[sys.argv[1]]()
