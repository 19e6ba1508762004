"""Borrowing a database connection for a commit, and giving it back.

Claim and record are short transactions on a connection borrowed from the
process's pool (Django's psycopg pool, settings' AGENTDESK_DB_POOL_SIZE).
Django hands a thread the same connection until it is closed; the engine
gives it back before every network wait (a model stream, a tool call), so a
slot that waits holds no connection, and a process's connections are bounded
by its pool, not by the sessions it has in flight.

The pool pings a connection as it hands it out (settings' health checks): an
empty query, one more round trip. A step borrows twice (its model call and
its tool call each give the connection back first), so at zero latency that
ping was a sixth of a step's CPU (bench.profile). A connection given back
less than FRESH_S ago was in use a moment ago and is handed out unpinged;
one that sat in the pool longer is pinged as before. A connection that broke
in that second fails its next statement, as one breaking mid-step does: the
step ends and is retried, and the pool drops the broken connection.
"""

from __future__ import annotations

import time

from django.db import DEFAULT_DB_ALIAS, connections
from psycopg_pool import ConnectionPool

FRESH_S = 1.0


def give_back() -> None:
    """Return this thread's connection to the pool (a no-op without a pool,
    where a thread keeps its own persistent connection)."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.connection is None or db.in_atomic_block or db.pool is None:
        return
    db.connection._agentdesk_given_back = time.monotonic()
    _ping_only_stale(db.pool)
    db.close()


def check_unless_fresh(conn) -> None:
    """The pool's check on a borrow: ping a connection only if it sat idle."""
    given_back = getattr(conn, "_agentdesk_given_back", None)
    if given_back is not None and time.monotonic() - given_back < FRESH_S:
        return
    ConnectionPool.check_connection(conn)


def _ping_only_stale(pool: ConnectionPool) -> None:
    # psycopg_pool takes its check only as a constructor argument, and Django
    # builds the pool (with ConnectionPool.check_connection when health checks
    # are on); so ours replaces that one, and only that one (checks off stay off).
    if pool._check is ConnectionPool.check_connection:
        pool._check = check_unless_fresh
