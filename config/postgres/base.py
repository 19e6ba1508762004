"""Django's PostgreSQL backend, less pool overhead per borrow.

Every process borrows its connections from a small psycopg pool (settings:
OPTIONS["pool"]). A busy process borrows and gives back all the time: a
worker slot twice per step (it holds no connection while it waits on the
network, agents/runtime/store/pool.py), a web process once per request.
Two costs of that are cut here, and nothing else changes:

- The pool's health check pings a connection (an empty query, one round
  trip) each time it is handed out. A connection given back less than
  FRESH_S ago is handed out unpinged; one that sat longer is pinged as
  before. A connection that broke in that second fails its next
  statement, as one breaking mid-step or mid-request does: the step is
  retried, the request answers 503 (config/errors.py), and the pool drops
  the broken connection.
- psycopg_pool's getconn and putconn (locks, statistics, logging, the
  reset and expiry checks) cost a zero-latency step about a fifth of its
  time. A connection given back goes on the pool's Shelf instead, and the
  next borrow in this process takes it from there: its own thread's first,
  else the freshest. Shelved connections are the pool's, checked out: the
  process still holds at most the pool's max_size, and nobody waits on a
  shelved one. One that sat FRESH_S or more, or is past its lifetime, goes
  back to the pool, which pings or replaces it as before.

Measured: the ping was a sixth of a zero-latency step's CPU (bench.profile)
and one of the nine round trips of an accepted webhook; the shelf took the
zero-latency engine from 367-469 to 514-528 steps/s and its CPU from 0.99-1.09
to 0.87-0.93 ms a step (alternated runs, engine row in-process, S = 50).
"""

from __future__ import annotations

import os
import threading
import time
import weakref

from django.db.backends.postgresql import base
from psycopg import pq
from psycopg_pool import ConnectionPool, PoolTimeout

FRESH_S = 1.0
WAIT_SLICE_S = 0.05  # a borrower waiting in the pool looks at the shelf this often


def check_unless_fresh(conn) -> None:
    """The pool's check on a borrow: ping a connection only if it sat idle."""
    given_back = getattr(conn, "_agentdesk_given_back", None)
    if given_back is not None and time.monotonic() - given_back < FRESH_S:
        return
    ConnectionPool.check_connection(conn)


class Shelf:
    """Connections of one pool given back by this process's threads, for
    the next borrow. Entries: thread id -> (connection, given back at)."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.lock = threading.Lock()
        self.kept: dict[int, tuple[object, float]] = {}
        self.inherited: list[object] = []  # a forked child's: see _forget_after_fork
        _shelves.add(self)

    def put(self, conn) -> None:
        now = time.monotonic()
        conn._agentdesk_given_back = now
        if self.pool._waiting:  # a borrower waits in the pool: hand it over now
            self.pool.putconn(conn)
            return
        with self.lock:
            earlier = self.kept.pop(threading.get_ident(), None)
            self.kept[threading.get_ident()] = (conn, now)
        if earlier is not None:  # (a thread holds one connection at a time)
            self.pool.putconn(earlier[0])

    def borrow(self):
        """A connection: a shelved one, else one from the pool. The wait in
        the pool is sliced, and the shelf looked at between slices: a
        connection shelved just after this borrower found the shelf empty
        (and before it queued in the pool, where put() would have seen it)
        is found at the next slice, not after the pool's whole timeout."""
        deadline = time.monotonic() + self.pool.timeout
        while True:
            conn = self.take()
            if conn is not None:
                return conn
            left = deadline - time.monotonic()
            try:
                return self.pool.getconn(timeout=max(0.001, min(WAIT_SLICE_S, left)))
            except PoolTimeout:
                if left <= WAIT_SLICE_S:
                    raise PoolTimeout(
                        f"couldn't get a connection after {self.pool.timeout:.2f} sec"
                    ) from None

    def take(self):
        """A shelved connection fit to use at once, or None (borrow from the
        pool). Stale ones met on the way go back to the pool."""
        me = threading.get_ident()
        while True:
            with self.lock:
                entry = self.kept.pop(me, None)
                if entry is None:
                    if not self.kept:
                        return None
                    entry = self.kept.pop(next(reversed(self.kept)))  # the freshest
            conn, given_back = entry
            if _fit(conn, given_back):
                return conn
            self.pool.putconn(conn)  # the pool pings, rolls back or replaces it

    def give_all_back(self) -> None:
        with self.lock:
            entries, self.kept = list(self.kept.values()), {}
        for conn, _ in entries:
            self.pool.putconn(conn)

    def _forget_after_fork(self) -> None:
        # A forked child (Celery prefork) inherits the parent's connections:
        # it must neither use them nor close them (closing says goodbye to
        # the server on the parent's socket), so it keeps them out of reach.
        self.lock = threading.Lock()
        self.inherited.extend(conn for conn, _ in self.kept.values())
        self.kept = {}


_shelves: weakref.WeakSet[Shelf] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for shelf in list(_shelves):
        shelf._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _fit(conn, given_back: float) -> bool:
    return (
        time.monotonic() - given_back < FRESH_S
        and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
        and conn._expire_at > time.monotonic()  # psycopg_pool's max_lifetime
    )


def shelf_of(pool: ConnectionPool) -> Shelf:
    shelf = pool.__dict__.get("_agentdesk_shelf")
    if shelf is None:
        shelf = pool._agentdesk_shelf = Shelf(pool)
    return shelf


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

    def get_new_connection(self, conn_params):
        pool = self.pool
        if pool is None or "isolation_level" in self.settings_dict["OPTIONS"]:
            return super().get_new_connection(conn_params)
        # Django's get_new_connection for a pool, but borrowing via the shelf.
        self.isolation_level = base.IsolationLevel.READ_COMMITTED
        if pool.closed:  # opened by the first borrow, as Django does
            pool.open()
        return shelf_of(pool).borrow()

    def _close(self) -> None:
        conn = self.connection
        pool = getattr(conn, "_pool", None)  # set by the pool that lent it
        if pool is not None:
            if conn.pgconn.transaction_status == pq.TransactionStatus.IDLE:
                shelf_of(pool).put(conn)
                self.connection = None
                return
            conn._agentdesk_given_back = time.monotonic()
        super()._close()

    def close_pool(self) -> None:
        pool = self._connection_pools.get(self.alias)
        if pool is not None:
            shelf_of(pool).give_all_back()
        super().close_pool()
