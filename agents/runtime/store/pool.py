"""Borrowing a database connection for a commit, and giving it back.

Claim and record are short transactions on a connection borrowed from the
process's pool (Django's psycopg pool, settings' AGENTDESK_DB_POOL_SIZE).
Django hands a thread the same connection until it is closed; the engine
gives it back before every network wait (a model stream, a tool call), so a
slot that waits holds no connection, and a process's connections are bounded
by its pool, not by the sessions it has in flight.
"""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections


def give_back() -> None:
    """Return this thread's connection to the pool (a no-op without a pool,
    where a thread keeps its own persistent connection)."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.connection is None or db.in_atomic_block or db.pool is None:
        return
    db.close()
