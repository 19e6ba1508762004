"""Outbound webhooks (ticket.created, ticket.replied), signed Stripe-style.

Header: `Agentdesk-Signature: t=<unix ts>,v1=<hex HMAC-SHA256(secret, f"{t}.{raw_body}")>`.
Delivery runs in the background with a timeout and retries with backoff;
every attempt is recorded in `webhook_deliveries` and logged.

As a helpdesk's delivery workers do, at most SENDERS deliveries are on the
wire at once, each sender thread on a kept-alive connection of its own.
They have their own threads: on the thread pool the API's storage uses, a
burst of deliveries (each waiting on the receiver's answer) held every
thread, and ticket creation and the tools' reads queued behind them (2,000
tickets from 32 clients took 36 s to open).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http.client
import json
import logging
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread

from sandbox.db import Database, run_sync
from sandbox.responses import random_id

log = logging.getLogger("sandbox.webhooks")

SIGNATURE_HEADER = "Agentdesk-Signature"
TIMEOUT_SECONDS = 5.0
SENDERS = 32
BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0)  # between attempts; len + 1 attempts in all


def sign(secret: str, body: bytes | str, timestamp: int) -> str:
    """The Agentdesk-Signature header value for `body` sent at `timestamp`."""
    raw = body.encode() if isinstance(body, str) else body
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + raw, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def event_build(type_: str, ticket: dict[str, Any], message_body: str) -> dict[str, Any]:
    return {
        "id": random_id("evt_"),
        "type": type_,
        "created": int(time.time()),
        "ticket": ticket,
        "message": {"body": message_body},
    }


class WebhookSender:
    def __init__(self, db: Database, url: str | None, secret: str | None) -> None:
        self.db = db
        self.url = url
        self.secret = secret
        self._tasks: set[asyncio.Task[None]] = set()
        self._senders = anyio.CapacityLimiter(SENDERS)
        self._connections = threading.local()  # each sender thread's kept-alive connection

    def emit(self, event: dict[str, Any]) -> None:
        """Deliver `event` in the background; the caller's response does not wait."""
        if not self.url:
            return
        task = asyncio.get_running_loop().create_task(self._deliver(event))
        # Keep a reference: the loop holds tasks weakly.
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _deliver(self, event: dict[str, Any]) -> None:
        assert self.url is not None
        body = json.dumps(event).encode()
        await run_sync(_record, self.db, event, self.url, "pending", 0, None, None)
        for attempt in range(1, len(BACKOFF_SECONDS) + 2):
            status, error = await anyio.to_thread.run_sync(
                self._post, body, event, limiter=self._senders
            )
            delivered = status is not None and 200 <= status < 300
            final = delivered or attempt > len(BACKOFF_SECONDS)
            state = "delivered" if delivered else ("failed" if final else "pending")
            await run_sync(_record, self.db, event, self.url, state, attempt, status, error)
            log.info(
                "webhook %s %s attempt %d: %s", event["type"], event["id"], attempt, error or status
            )
            if final:
                return
            await asyncio.sleep(BACKOFF_SECONDS[attempt - 1])

    def _post(self, body: bytes, event: dict[str, Any]) -> tuple[int | None, str | None]:
        assert self.url is not None
        headers = {"Content-Type": "application/json", "Agentdesk-Event": event["type"]}
        if self.secret:
            # Signed per attempt, like Stripe: the timestamp is the send time.
            headers[SIGNATURE_HEADER] = sign(self.secret, body, int(time.time()))
        target = urlsplit(self.url)
        path = target.path + (f"?{target.query}" if target.query else "")
        for reused in (True, False):
            conn = self._connection(target, fresh=not reused)
            try:
                conn.request("POST", path or "/", body, headers)
                response = conn.getresponse()
                response.read()
            except (http.client.HTTPException, OSError) as exc:
                conn.close()
                self._connections.conn = None
                if reused and _stale(exc):
                    continue  # the receiver closed an idle kept-alive connection: once more
                return None, str(exc) or type(exc).__name__
            if response.will_close:
                conn.close()
                self._connections.conn = None
            if 200 <= response.status < 300:
                return response.status, None
            return response.status, f"HTTP {response.status}"
        return None, "unreachable"  # not reached: the fresh connection answers or fails

    def _connection(self, target: Any, *, fresh: bool) -> http.client.HTTPConnection:
        conn = getattr(self._connections, "conn", None)
        if conn is None or fresh:
            kind = (
                http.client.HTTPSConnection
                if target.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = kind(target.hostname, target.port, timeout=TIMEOUT_SECONDS)
            self._connections.conn = conn
        return conn


def _stale(exc: Exception) -> bool:
    """A kept-alive connection the receiver had closed: nothing was taken in."""
    return isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError))


def _record(
    db: Database,
    event: dict[str, Any],
    url: str,
    state: str,
    attempts: int,
    status: int | None,
    error: str | None,
) -> None:
    with db.write() as conn:
        conn.execute(
            "INSERT INTO webhook_deliveries (event_id, type, url, attempts, state, last_status, last_error, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (event_id) DO UPDATE SET attempts = excluded.attempts, state = excluded.state,"
            " last_status = excluded.last_status, last_error = excluded.last_error",
            (event["id"], event["type"], url, attempts, state, status, error, event["created"]),
        )
