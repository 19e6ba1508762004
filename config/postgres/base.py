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
  process still holds at most the pool's max_size. Under contention the
  shelf steps aside: while a borrower queues in the pool, connections go
  back through the pool's queue, first come first served (shelved, a
  waiter could starve: 1,000 slots on 4 connections timed out after 30 s).
  One that sat FRESH_S or more, or is past its lifetime, goes back to the
  pool, which pings or replaces it as before.

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
from psycopg_pool import ConnectionPool
from psycopg_pool.pool import AddConnection

FRESH_S = 1.0
# The longest a lost connection waits for its next try (psycopg_pool's own
# backoff doubles from 1 s up to its 5-minute reconnect_timeout).
RECONNECT_EVERY_S = 2.0


def check_unless_fresh(conn) -> None:
    """The pool's check on a borrow: ping a connection only if it sat idle.

    One found broken means the others idle in the pool most likely are too
    (the database restarted, every backend was terminated, the link was
    cut): they are all pinged now, and the broken ones replaced at once
    (the pool's own check()). Else the borrower found them one by one,
    with the pool's growing pauses between (none, then 1, 2, 4 ... s): a
    pool of four had a working connection 6.6 s after a restart, not at
    once (tests/config/test_postgres.py), and the chaos campaign's own
    loop crawled for minutes while the database crashed every few seconds."""
    given_back = getattr(conn, "_agentdesk_given_back", None)
    if given_back is not None and time.monotonic() - given_back < FRESH_S:
        return
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        pool = getattr(conn, "_pool", None)  # set by the pool lending it
        if pool is not None:
            pool.check()
        raise


class Shelf:
    """Connections of one pool given back by this process's threads, for
    the next borrow. Entries: thread id -> (connection, given back at)."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.lock = threading.Lock()
        self.kept: dict[int, tuple[object, float]] = {}
        self.waiting = 0  # borrowers that found the shelf empty, in the pool's queue
        self.inherited: list[object] = []  # a forked child's: see _forget_after_fork
        _shelves.add(self)

    def put(self, conn) -> None:
        now = time.monotonic()
        conn._agentdesk_given_back = now
        me = threading.get_ident()
        earlier = None
        with self.lock:
            # A borrower in (or on its way to) the pool's queue gets it there,
            # in the queue's order; shelved meanwhile, it would wait on.
            shelve = not self.waiting
            if shelve:
                earlier = self.kept.pop(me, None)
                self.kept[me] = (conn, now)
        if not shelve:
            self.pool.putconn(conn)
        if earlier is not None:  # (a thread holds one connection at a time)
            self.pool.putconn(earlier[0])

    def borrow(self):
        """A shelved connection (this thread's, else the freshest), else one
        from the pool. A borrower that finds the shelf empty counts itself
        as waiting before it leaves the lock, so nothing is shelved while it
        queues in the pool: whoever gives back next hands it over there."""
        while True:
            with self.lock:
                entry = self._pop()
                if entry is None:
                    self.waiting += 1
                    break
            conn, given_back = entry
            if _fit(conn, given_back):
                return conn
            self.pool.putconn(conn)  # the pool pings, rolls back or replaces it
        try:
            return self.pool.getconn()
        finally:
            with self.lock:
                self.waiting -= 1

    def _pop(self) -> tuple[object, float] | None:
        entry = self.kept.pop(threading.get_ident(), None)
        if entry is None and self.kept:
            entry = self.kept.pop(next(reversed(self.kept)))  # the freshest
        return entry

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
        self.waiting = 0


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


def reconnect_soon(pool: ConnectionPool) -> None:
    """Try a lost connection again every RECONNECT_EVERY_S at most.

    psycopg_pool replaces a connection it lost (the database restarted,
    every backend terminated, the link cut) with tries 1, 2, 4, 8, 16 ... s
    apart: after an outage of 10 s the next try may come 20 s after the
    database is back, and meanwhile every claim and record of the process
    waits for a connection. The pool takes its backoff from no argument, so
    its scheduling of those tries is capped here, the way `_check` is
    replaced below: a process tries its few connections every 2 s while the
    database is away, and is back within 2 s of it.
    """
    schedule = pool.schedule_task

    def schedule_task(task, delay: float) -> None:
        attempt = getattr(task, "attempt", None)
        if isinstance(task, AddConnection) and attempt is not None:
            attempt.delay = min(attempt.delay, RECONNECT_EVERY_S)
            delay = min(delay, RECONNECT_EVERY_S)
        schedule(task, delay)

    pool.schedule_task = schedule_task


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
        if pool is not None and "schedule_task" not in pool.__dict__:
            reconnect_soon(pool)
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
