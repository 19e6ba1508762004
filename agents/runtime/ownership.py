"""Who may advance a session right now.

Exactly one worker slot advances a session at a time, and a worker process
holds many sessions at once (one per slot: a thread of the Celery pool). So
ownership has two parts:

- **The process is alive.** Each worker process holds ONE liveness lock: a
  session-level Postgres advisory lock `(LOCK_CLASS, key)` taken on a
  connection of its own and kept for the life of the process. When the
  process dies, that connection closes and Postgres frees the lock at once,
  so every session the process held is seen ownerless in the same instant
  (the sweeper looks every couple of seconds, with one query for all of them).
- **The slot owns the session.** A claim writes the owner's name
  (`host:pid/slot`) and the process's key on the session's runtime row,
  under the row lock. A claim that finds a name there asks whether that
  process's lock is held: held, a live slot is on it (leave it); free, the
  owner died: a recovery.

Neither part is enough to guard a write: the liveness connection may be
killed (`pg_terminate_backend`, a network blip) while the process goes on
computing, and the sweeper then hands its sessions to another slot. So every
claim also bumps the session's fencing token, and every record statement
carries the token it was claimed with; a stale slot's writes match no row
and it stops (store.LostClaim). Losing the liveness connection makes this
process take its lock again, with the SAME key while that is free (unless
another process drew it meanwhile): its slots were alive all along, and a
session the sweeper did not take over in the gap stays theirs, so a
connection blip does not pay again for every model call in flight (issue
26). A session taken over in the gap is fenced off as before: its old slot's
record matches no row (store.LostClaim). A key still held by the server
process of our own lost connection (a cut link the server has not noticed
yet) is freed by ending that process; with the key taken by another
process, a new one is drawn and every claim made under the old one is a
dead owner's.

Postgres connections: the liveness lock is one connection per process; all
claim and record work borrows from the process's small pool (settings'
AGENTDESK_DB_POOL_SIZE) and gives it back before any network wait, so a
process's connections never grow with the sessions it holds.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import socket
import threading
import time
from dataclasses import dataclass

import psycopg
from django.conf import settings
from django.db import connection, connections

from agents.per_process import PerProcess

log = logging.getLogger(__name__)

# The advisory lock namespace of worker liveness locks ('AD' + 1): the
# two-int form, so it never collides with the one-bigint locks of jobs.py.
LOCK_CLASS = 0x41440001

# Process keys whose liveness lock is held, in THIS database only: another
# Agentdesk database on the same server (a test or bench one) has keys of its own.
_HELD_LIVENESS_LOCKS = f"""
    FROM pg_locks
    WHERE locktype = 'advisory' AND classid = {LOCK_CLASS} AND objsubid = 2 AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""  # noqa: S608 (a constant)
LIVE_PROCESSES_SQL = f"SELECT objid::bigint {_HELD_LIVENESS_LOCKS}"  # noqa: S608
# The server process holding one process's lock (ownership._end_lost_backend).
HOLDER_SQL = f"SELECT pid {_HELD_LIVENESS_LOCKS} AND objid::bigint = %s"  # noqa: S608

IS_ALIVE_SQL = f"SELECT %s IN ({LIVE_PROCESSES_SQL})"  # noqa: S608 (a constant)


@dataclass(frozen=True)
class Owner:
    """A worker slot, as a claim writes it: who drives, and in which process."""

    name: str  # host:pid/slot, also the `actor` of the events the slot writes
    process: int  # the key of the process's liveness lock


class _Liveness:
    """This process's liveness lock, on a connection that does nothing else."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._key = 0
        self._last_key = 0  # held before the connection was lost: taken again if free
        self._backend = 0  # the server process that took it (its pid)
        self.retaken_at: float | None = None  # monotonic: the lock taken again after a loss

    def key(self) -> int:
        """The key of a lock this process holds right now (taken on first use)."""
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return self._key
        with self._lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._acquire()
            return self._key

    def check(self) -> None:
        """Ask the server whether the lock's connection is still there (the
        watchdog's liveness thread, every sweep interval): a lost one is
        taken again, with the same key while that is free. One that could
        not be taken again (the database still away) is tried on every
        check until it is: it used to wait for a slot's next claim, and a
        process whose slots all waited on the model meanwhile looked dead
        to every other sweeper, which took its sessions over (calls paid
        twice after a PostgreSQL crash, issue 26)."""
        conn = self._conn
        if conn is None:
            if self._last_key:  # lost, and not taken again yet
                self.key()
            return
        try:
            with self._lock:
                conn.execute("SELECT 1")
        except psycopg.Error:
            log.warning("liveness connection lost; taking the liveness lock again", exc_info=True)
            self.close()
            self.key()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except psycopg.Error:
                    pass
            self._conn, self._key = None, 0

    def release(self) -> None:
        """Let go for good (a clean exit): not taken again by a check."""
        self.close()
        self._last_key, self.retaken_at = 0, None

    def _acquire(self) -> None:
        if self._conn is not None:  # broken: the server lets go once it notices
            try:
                self._conn.close()
            except psycopg.Error:
                pass
        conn = psycopg.connect(**_connect_params(), autocommit=True)
        if self._last_key:
            _end_lost_backend(conn, self._last_key, self._backend)
        previous = self._last_key
        for _ in range(100):  # a taken key (another process drew it) is drawn again
            key, previous = previous or random.randint(1, 2**31 - 1), 0
            row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_CLASS, key]).fetchone()
            if row[0]:
                if self._last_key:  # not the first: this process lost its lock and took it again
                    self.retaken_at = time.monotonic()
                self._conn, self._key, self._last_key = conn, key, key
                self._backend = conn.info.backend_pid
                log.info("worker %s holds liveness lock %s", process_name(), key)
                return
        conn.close()
        raise RuntimeError("could not take a liveness lock: 100 keys taken")


def _end_lost_backend(conn: psycopg.Connection, key: int, backend: int) -> None:
    """Our lock may still be held by the server process of the connection
    we lost: a link cut or gone silent, the server has not noticed yet (its
    keepalive tells it within about 11 s, settings' keepalives). That
    backend is ours, the very one that took the lock, so it is ended and
    the same key taken again. Drawing a new key instead made every session
    this process's live slots held a dead owner's, taken over by the other
    workers and their model calls paid again (seen: a worker on seven keys
    in one three-minute chaos campaign of cuts and crashes)."""
    try:
        row = conn.execute(HOLDER_SQL, [key]).fetchone()
        if row is None or row[0] != backend:
            return  # free, or another process's
        log.warning("liveness lock %s still held by our lost connection: ending it", key)
        conn.execute("SELECT pg_terminate_backend(%s, 5000)", [backend])
    except psycopg.Error:  # not ours to end (another role): a new key, as before
        log.warning("could not end our lost liveness connection", exc_info=True)


def _connect_params() -> dict:
    """The default database (the test database under pytest) for a plain
    psycopg connection outside Django's pool, with every libpq parameter
    Django's own connections are made with: the timeouts and keepalives of
    both ends among them (settings.py, config/keepalive.py), without which
    a host gone silent would keep this lock, and so its sessions, for
    hours. Less what only Django's cursors read."""
    params = connections["default"].get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    params["application_name"] = params.get("application_name") or f"agentdesk pid={os.getpid()}"
    return params


_liveness: PerProcess[_Liveness] = PerProcess(_Liveness)
_slots = threading.local()
_slot_numbers = itertools.count(1)


def process_name() -> str:
    # Recomputed after fork: prefork children must not share the parent's name.
    return f"{socket.gethostname()}:{os.getpid()}"


def slot() -> int:
    """This thread's slot number in this process: 1, 2, 3 ... in the order
    threads first drove a session (a pool's threads are reused, so the
    numbers stay as few as the pool's threads)."""
    if getattr(_slots, "pid", None) != os.getpid():
        _slots.pid, _slots.number = os.getpid(), next(_slot_numbers)
        # Log lines name their thread: the same number as the owner's name.
        threading.current_thread().name = f"slot-{_slots.number}"
    return _slots.number


def me() -> Owner:
    """The calling slot (this thread) of this process, as an owner."""
    return Owner(name=f"{process_name()}/{slot()}", process=_liveness.get().key())


def is_alive(process: int) -> bool:
    """Whether the process with this liveness key is still running (asked
    under the session lock, on the caller's connection)."""
    if not process:
        return False
    with connection.cursor() as cursor:
        cursor.execute(IS_ALIVE_SQL, [process])
        return cursor.fetchone()[0]


def rejoining_now() -> bool:
    """rejoining(), once this process has looked at its own lock (taking it
    again if it went): what a sweep asks before a takeover. This process
    learns that its lock went (the database restarted) only when it looks,
    and until then rejoining() says no. A claim looks the same way, outside
    its transaction (store/claims.py)."""
    check_liveness()
    return rejoining()


def rejoining() -> bool:
    """Whether this process took its liveness lock again a moment ago
    (within two sweep intervals). What takes every worker's lock away at
    once (the database restarted, every backend terminated, a network blip)
    takes this process's too; so for that moment another process's lock
    being free says little: that process may be alive and about to take it
    again (its watchdog does within a sweep interval), its slots' model
    calls still running. Taking its sessions over now would fence off
    calls already paid for (issue 26: model calls paid twice per database
    fault); a process that really died is taken over once the moment has
    passed."""
    made = _liveness.current()
    if made is None or made.retaken_at is None:
        return False
    return time.monotonic() - made.retaken_at < 2 * settings.AGENTDESK_SWEEP_INTERVAL_S


def check_liveness() -> None:
    """Re-take this process's liveness lock if its connection was lost."""
    made = _liveness.current()
    if made is not None:
        made.check()


def release_liveness() -> None:
    """Let go of the liveness lock (a clean exit; tests dropping their database)."""
    made = _liveness.current()
    if made is not None:
        made.release()
