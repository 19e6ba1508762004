"""Django's PostgreSQL backend, less one round trip per borrow.

Every process borrows its connections from a small psycopg pool (settings:
OPTIONS["pool"]), and Django builds that pool with psycopg_pool's health
check, which pings a connection (an empty query, one round trip) each time
it is handed out. A busy process hands out connections given back moments
ago: a worker borrows twice per step, a web process once per request. So a
connection given back less than FRESH_S ago is handed out unpinged; one
that sat in the pool longer is pinged as before. A connection that broke in
that second fails its next statement, as one breaking mid-step or
mid-request does: the step is retried, the request answers 503
(config/errors.py), and the pool drops the broken connection.

Measured: the ping was a sixth of a zero-latency step's CPU (bench.profile)
and one of the nine round trips of an accepted webhook.
"""

from __future__ import annotations

import time

from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool

FRESH_S = 1.0


def check_unless_fresh(conn) -> None:
    """The pool's check on a borrow: ping a connection only if it sat idle."""
    given_back = getattr(conn, "_agentdesk_given_back", None)
    if given_back is not None and time.monotonic() - given_back < FRESH_S:
        return
    ConnectionPool.check_connection(conn)


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool | None:
        pool = super().pool
        # psycopg_pool takes its check only as a constructor argument, and
        # Django builds the pool (with ConnectionPool.check_connection when
        # health checks are on); so ours replaces that one, and only that one
        # (checks off stay off).
        if pool is not None and pool._check is ConnectionPool.check_connection:
            pool._check = check_unless_fresh
        return pool

    def _close(self) -> None:
        if self.connection is not None and self.settings_dict["OPTIONS"].get("pool"):
            self.connection._agentdesk_given_back = time.monotonic()
        super()._close()
