"""Who may advance a session right now.

Exactly one worker advances a session at a time. It holds a session-level
Postgres advisory lock keyed by the session id on its own database
connection: when the worker process dies, its connection closes and Postgres
frees the lock at once, so a dead owner is noticed as soon as anyone looks
(the sweeper looks every couple of seconds).

The lock alone is not enough: if the connection is killed
(`pg_terminate_backend`, a network blip) the lock is gone while the worker
may still be computing. So every claim also bumps the session's fencing
token, and every record statement carries the token it was claimed with; a
stale worker's writes match no row and it stops (store.LostClaim).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


def worker_id() -> str:
    # Recomputed after fork: prefork children must not share the parent's id.
    return f"{socket.gethostname()}:{os.getpid()}"


@contextmanager
def session_lock(session_id: int) -> Iterator[bool]:
    """Try to become the session's owner; yields whether we are.

    Never waits: if another worker owns the session, it will do the work.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [session_id])
        (acquired,) = cursor.fetchone()
    try:
        yield acquired
    finally:
        if acquired:
            _unlock(session_id)


def _unlock(session_id: int) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [session_id])
    except Exception:
        # The connection is gone, and with it the lock: nothing to release.
        connection.close()


# Session ids whose advisory lock is held, in THIS database only: another
# Agentdesk database on the same server (a test or bench one) may hold a lock
# on the same number.
OWNED_SESSIONS_SQL = """
    SELECT objid::bigint FROM pg_locks
    WHERE locktype = 'advisory' AND classid = 0 AND objsubid = 1 AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
