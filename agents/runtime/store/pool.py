"""Borrowing a database connection for a commit, and giving it back.

Claim and record are short transactions on a connection borrowed from the
process's pool (Django's psycopg pool, settings' AGENTDESK_DB_POOL_SIZE).
Django hands a thread the same connection until it is closed; the engine
gives it back before every network wait (a model stream, a tool call), so a
slot that waits holds no connection, and a process's connections are bounded
by its pool, not by the sessions it has in flight.

A step borrows twice, moments apart, so the backend (config/postgres/
base.py) keeps a connection given back on a shelf for the next borrow in
the process (its own thread's first), unpinged and past psycopg_pool's
bookkeeping; one that sat over a second goes back to the pool, which pings
it. Shelved connections still count against the pool's size, and a slot
that needs one takes any shelved one rather than wait.

The record statements borrow through `borrow()`, Django's connect() less
what cannot change between two borrows of a pooled connection: the
connection parameters (built anew on every connect(), then unused: the
pool made its connections with them long ago), the autocommit switch (a
pooled connection is in autocommit unless a transaction was left on it,
which is checked), the server version check (done once per process) and
the connection_created signal (nothing listens). Everything connect()
resets on Django's side is reset the same way.
"""

from __future__ import annotations

import time

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import RAN_DB_VERSION_CHECK
from django.db.backends.signals import connection_created


def give_back() -> None:
    """Return this thread's connection to the pool (a no-op without a pool,
    where a thread keeps its own persistent connection)."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.connection is None or db.in_atomic_block or db.pool is None:
        return
    db.close()


def borrow(db) -> None:
    """Give this thread's Django connection `db` (which has none open) a pooled
    connection, as connect() would. The first borrow of a process, and any
    with a connection_created listener, go through connect() itself."""
    if db.pool is None or db.alias not in RAN_DB_VERSION_CHECK or connection_created.receivers:
        db.ensure_connection()
        return
    with db.wrap_database_errors:
        # In pool mode the parameters are not read: the pool made its
        # connections with them (the backend may hand out one given back a
        # moment ago, config/postgres/base.py).
        conn = db.get_new_connection({})
        if not conn.autocommit:  # left in a transaction's mode: the pool rolled it back
            conn.autocommit = True
    # What connect() sets on Django's side (django/db/backends/base/base.py).
    db.in_atomic_block = db.needs_rollback = db.closed_in_transaction = False
    db.savepoint_ids, db.atomic_blocks, db.run_on_commit = [], [], []
    db.health_check_enabled = db.settings_dict["CONN_HEALTH_CHECKS"]
    db.health_check_done = True  # the pool's own check ran (or was not due)
    db.errors_occurred = False
    max_age = db.settings_dict["CONN_MAX_AGE"]
    db.close_at = None if max_age is None else time.monotonic() + max_age
    db.connection = conn
    db.autocommit = True
    db.run_commit_hooks_on_set_autocommit_on = False
