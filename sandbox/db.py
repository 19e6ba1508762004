"""SQLite storage for the sandbox.

One connection per thread, kept for the thread's life (opening one, with its
pragmas, cost more than most of the statements run on it), WAL mode so
readers never wait for the writer, and `BEGIN IMMEDIATE` for every write so
two concurrent writers serialise on SQLite's own lock instead of failing
half-way with SQLITE_BUSY. Functions here are blocking; async callers go
through `run_sync`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS customers (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT NOT NULL UNIQUE COLLATE NOCASE,
    plan TEXT NOT NULL,
    created INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS orders (
    id TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    items TEXT NOT NULL,
    total_cents INTEGER NOT NULL,
    currency TEXT NOT NULL,
    status TEXT NOT NULL,
    payment_intent TEXT NOT NULL UNIQUE,
    created INTEGER NOT NULL
);
-- AUTOINCREMENT so a ticket id is never reused after /_reset: Agentdesk keys
-- sessions by ticket id and must not meet a stale session for a new ticket.
CREATE TABLE IF NOT EXISTS tickets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    order_id TEXT REFERENCES orders(id),
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    status TEXT NOT NULL,
    category TEXT,
    priority TEXT,
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL
);
-- kind: 'reply' (agent to customer), 'note' (internal), 'customer' (inbound).
CREATE TABLE IF NOT EXISTS ticket_messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ticket_id INTEGER NOT NULL REFERENCES tickets(id),
    kind TEXT NOT NULL CHECK (kind IN ('reply', 'note', 'customer')),
    body TEXT NOT NULL,
    idempotency_key TEXT,
    created INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS escalations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ticket_id INTEGER NOT NULL REFERENCES tickets(id),
    reason TEXT NOT NULL,
    created INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS refunds (
    id TEXT PRIMARY KEY,
    payment_intent TEXT NOT NULL,
    order_id TEXT NOT NULL REFERENCES orders(id),
    amount INTEGER NOT NULL,
    currency TEXT NOT NULL,
    reason TEXT,
    metadata TEXT NOT NULL,
    status TEXT NOT NULL,
    idempotency_key TEXT,
    created INTEGER NOT NULL
);
-- One row per (area, key). 'in_flight' rows are the lock that turns a
-- concurrent duplicate into a 409; 'done' rows hold the response to replay.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    area TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
    status INTEGER,
    body TEXT,
    request_id TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (area, key)
);
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    event_id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    url TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    last_status INTEGER,
    last_error TEXT,
    created INTEGER NOT NULL
);
"""

# Wiped by /_reset. sqlite_sequence is deliberately kept (see tickets above).
DATA_TABLES = (
    "idempotency_keys",
    "webhook_deliveries",
    "refunds",
    "escalations",
    "ticket_messages",
    "tickets",
    "orders",
    "customers",
)


class Database:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._local = threading.local()
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(SCHEMA)
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so the
        # transaction boundaries are exactly the ones written below.
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _thread_connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        # Autocommit: each statement reads the latest committed state.
        yield self._thread_connection()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A transaction holding SQLite's write lock from its first statement.

        IMMEDIATE (not DEFERRED) because every write here reads first
        (remaining refundable amount, idempotency row); a deferred transaction
        would let two requests read the same state before either writes.
        """
        conn = self._thread_connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def wipe(self) -> None:
        with self.write() as conn:
            for table in DATA_TABLES:
                conn.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed names


async def run_sync(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking storage code off the event loop (SQLite may wait on a lock)."""
    return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))
