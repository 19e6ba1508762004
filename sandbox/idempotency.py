"""Idempotency-Key handling shared by the payments and helpdesk APIs, Stripe's way.

The first request with a key reserves it (an 'in_flight' row, committed on
its own so a concurrent duplicate sees it and gets a 409). The side effect
and the stored response are then written in ONE transaction, so a response
lost on the wire after that commit is replayed, never re-executed. A
request that fails validation releases its key: like Stripe, nothing was
executed, so nothing is remembered.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from sandbox.db import Database, run_sync

# An in-flight row older than this belongs to a request that died without
# finishing (process killed mid-request); a new request may take the key over.
STALE_IN_FLIGHT_SECONDS = 30.0


@dataclass(frozen=True)
class Outcome:
    """What a unit of work answered. `store=False` for requests that did nothing."""

    status: int
    body: dict[str, Any]
    store: bool = True


@dataclass(frozen=True)
class Answer:
    status: int
    body_text: str
    replayed: bool = False
    original_request_id: str | None = None


class KeyMismatch(Exception):
    """Same key, different request."""


class KeyInFlight(Exception):
    """Same key, and the first request has not finished yet."""


Work = Callable[[sqlite3.Connection], Outcome]


def fingerprint(method: str, path: str, params: Any) -> str:
    canonical = json.dumps([method.upper(), path, params], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


async def execute(
    db: Database,
    *,
    area: str,
    key: str | None,
    fingerprint: str,
    request_id: str,
    work: Work,
    in_flight_pause: float = 0.0,
) -> Answer:
    """Run `work` at most once per (area, key); raise KeyMismatch / KeyInFlight."""
    if not key:
        outcome = await run_sync(_run_work, db, work)
        return _answer(outcome)
    stored = await run_sync(_reserve, db, area, key, fingerprint, request_id)
    if stored is not None:
        return stored
    try:
        if in_flight_pause:
            # Fault injection: widen the in-flight window so tests can hit the 409.
            await anyio.sleep(in_flight_pause)
        outcome = await run_sync(_complete, db, area, key, work)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await run_sync(_release, db, area, key)
        raise
    return _answer(outcome)


def _answer(outcome: Outcome) -> Answer:
    return Answer(status=outcome.status, body_text=json.dumps(outcome.body))


def _run_work(db: Database, work: Work) -> Outcome:
    with db.write() as conn:
        return work(conn)


def _reserve(db: Database, area: str, key: str, fp: str, request_id: str) -> Answer | None:
    """Reserve the key (return None) or return the stored answer to replay."""
    with db.write() as conn:
        row = conn.execute(
            "SELECT * FROM idempotency_keys WHERE area = ? AND key = ?", (area, key)
        ).fetchone()
        if row is not None and row["fingerprint"] != fp:
            raise KeyMismatch(key)
        if row is not None and row["state"] == "done":
            return Answer(row["status"], row["body"], True, row["request_id"])
        if row is not None and time.time() - row["created"] < STALE_IN_FLIGHT_SECONDS:
            raise KeyInFlight(key)
        conn.execute(
            "INSERT OR REPLACE INTO idempotency_keys"
            " (area, key, fingerprint, state, request_id, created)"
            " VALUES (?, ?, ?, 'in_flight', ?, ?)",
            (area, key, fp, request_id, time.time()),
        )
    return None


def _complete(db: Database, area: str, key: str, work: Work) -> Outcome:
    # The side effect and the response it produced commit together.
    with db.write() as conn:
        outcome = work(conn)
        if outcome.store:
            conn.execute(
                "UPDATE idempotency_keys SET state = 'done', status = ?, body = ?"
                " WHERE area = ? AND key = ?",
                (outcome.status, json.dumps(outcome.body), area, key),
            )
        else:
            conn.execute("DELETE FROM idempotency_keys WHERE area = ? AND key = ?", (area, key))
    return outcome


def _release(db: Database, area: str, key: str) -> None:
    with db.write() as conn:
        conn.execute(
            "DELETE FROM idempotency_keys WHERE area = ? AND key = ? AND state = 'in_flight'",
            (area, key),
        )
