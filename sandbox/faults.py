"""Fault injection: rules posted to /_faults, applied by an outer ASGI wrapper.

The wrapper sits OUTSIDE Starlette because dropping a connection needs the
server's cooperation: an ASGI app that returns a non-None value makes
uvicorn close the transport without writing anything, which is exactly a
response lost on the wire. (Raising would make uvicorn answer 500 instead.)
"""

from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandbox.responses import anthropic_error, helpdesk_error, stripe_error
from sandbox.state import Counters

log = logging.getLogger("sandbox.faults")

TARGETS = ("payments", "messages", "helpdesk")
KINDS = ("latency", "status", "drop_after_commit", "stall", "hold")
DEFAULT_LATENCY_MS = {"latency": 1000, "stall": 60000, "hold": 60000}
HOLD_POLL_S = 0.01
# A stalled stream still delivers this many body chunks (message_start,
# the first block start, a ping, a text delta) before going silent.
STALL_AFTER_CHUNKS = 4


class _CloseConnection:
    """Returned to uvicorn to make it close the socket without a response."""

    def __repr__(self) -> str:
        return "sandbox fault: connection closed without a response"


CLOSE_CONNECTION = _CloseConnection()


class FaultError(ValueError):
    pass


@dataclass
class Rule:
    id: int
    target: str
    kind: str
    count: int = 1
    status: int | None = None
    latency_ms: int = 0
    retry_after: float | None = None
    path_prefix: str | None = None
    method: str | None = None
    # latency only: "before" the request runs, "in_flight" while an
    # idempotency key is held (payments/helpdesk) so a duplicate meets a 409,
    # or "after_commit": the work is done, the response held back.
    phase: str = "before"
    applied: int = field(default=0)
    # hold only: requests held now, held ones whose client went away first
    # (phase "before": they never reached the app), and the release.
    holding: int = field(default=0)
    abandoned: int = field(default=0)
    released: bool = field(default=False)

    def matches(self, target: str, path: str, method: str) -> bool:
        return (
            self.target == target
            and (self.path_prefix is None or path.startswith(self.path_prefix))
            and (self.method is None or self.method == method)
        )


def _int(spec: dict[str, Any], name: str, default: int | None, low: int, high: int) -> int | None:
    value = spec.get(name, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise FaultError(f"{name} must be an integer between {low} and {high}")
    return value


def parse_rule(spec: dict[str, Any], rule_id: int) -> Rule:
    target, kind = spec.get("target"), spec.get("kind")
    if target not in TARGETS:
        raise FaultError(f"target must be one of {', '.join(TARGETS)}")
    if kind not in KINDS:
        raise FaultError(f"kind must be one of {', '.join(KINDS)}")
    status = _int(spec, "status", None, 400, 599)
    if kind == "status" and status is None:
        raise FaultError("status is required for kind=status")
    match = spec.get("match") or {}
    if not isinstance(match, dict):
        raise FaultError("match must be an object")
    retry_after = spec.get("retry_after")
    if retry_after is not None and (not isinstance(retry_after, int | float) or retry_after < 0):
        raise FaultError("retry_after must be a non-negative number of seconds")
    phase = spec.get("phase", "before")
    if phase not in ("before", "in_flight", "after_commit"):
        raise FaultError("phase must be 'before', 'in_flight' or 'after_commit'")
    if kind == "hold" and phase == "in_flight":
        raise FaultError("a hold is 'before' the work or 'after_commit'")
    return Rule(
        id=rule_id,
        target=target,
        kind=kind,
        count=_int(spec, "count", 1, 1, 1_000_000) or 1,
        status=status,
        latency_ms=_int(spec, "latency_ms", DEFAULT_LATENCY_MS.get(kind, 0), 0, 600_000) or 0,
        retry_after=retry_after,
        path_prefix=match.get("path_prefix"),
        method=(match.get("method") or "").upper() or None,
        phase=phase,
    )


class FaultBook:
    """Rules in the order they were added; each matching request uses one up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        # Hold rules, by id, until released: a used-up one still says what it holds.
        self._holds: dict[int, Rule] = {}
        self._ids = itertools.count(1)

    def add(self, spec: dict[str, Any]) -> Rule:
        with self._lock:
            rule = parse_rule(spec, next(self._ids))
            self._rules.append(rule)
            if rule.kind == "hold":
                self._holds[rule.id] = rule
            return rule

    def take(self, target: str, path: str, method: str) -> Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.matches(target, path, method):
                    rule.applied += 1
                    if rule.applied >= rule.count:
                        self._rules.remove(rule)
                    return rule
        return None

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            listed = [*self._rules, *(r for r in self._holds.values() if r not in self._rules)]
            return [{**asdict(r), "remaining": r.count - r.applied} for r in listed]

    def release(self, rule_id: int) -> Rule:
        """Let the requests a hold rule holds go on (and any it takes later)."""
        with self._lock:
            rule = self._holds.pop(rule_id, None)
            if rule is None:
                raise FaultError(f"no hold rule {rule_id}")
            rule.released = True
            return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            for rule in self._holds.values():  # nothing stays held by a rule that is gone
                rule.released = True
            self._holds.clear()

    def counted(self, rule: Rule, field_name: str, by: int) -> None:
        with self._lock:
            setattr(rule, field_name, getattr(rule, field_name) + by)


def target_for(path: str) -> str | None:
    if path.startswith("/v1/messages"):
        return "messages"
    if path.startswith("/v1/"):
        return "payments"
    if path.startswith("/helpdesk/"):
        return "helpdesk"
    return None


def error_response(rule: Rule) -> Response:
    """The provider's own error shape for an injected status."""
    status = rule.status or 500
    headers = {"retry-after": f"{rule.retry_after:g}"} if rule.retry_after is not None else {}
    message = f"Injected fault: HTTP {status}"
    if rule.target == "messages":
        return anthropic_error(status, message, headers)
    if rule.target == "payments":
        response = _stripe_fault(status, message)
    else:
        kind = {429: "rate_limited", 409: "conflict"}.get(
            status, "server_error" if status >= 500 else "invalid_request"
        )
        response = helpdesk_error(status, kind, message)
    response.headers.update(headers)
    return response


def _stripe_fault(status: int, message: str) -> Response:
    if status == 429:
        return stripe_error(429, "invalid_request_error", message, code="rate_limit")
    if status == 409:
        return stripe_error(409, "invalid_request_error", message, code="lock_timeout")
    if status >= 500:
        return stripe_error(status, "api_error", message)
    return stripe_error(status, "invalid_request_error", message)


class FaultInjector:
    """Outermost ASGI layer: consults the FaultBook for every API request."""

    def __init__(self, app: ASGIApp, book: FaultBook, counters: Counters) -> None:
        self.app = app
        self.book = book
        self.counters = counters

    def __getattr__(self, name: str) -> Any:
        # create_app() callers may reach for Starlette attributes (state, routes).
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> Any:
        target = target_for(scope.get("path", "")) if scope["type"] == "http" else None
        rule = self.book.take(target, scope["path"], scope["method"]) if target else None
        if rule is None:
            return await (self._reached if target else self.app)(scope, receive, send)
        self.counters.incr(f"faults.{rule.target}.{rule.kind}")
        log.info(
            "fault #%d %s applied to %s %s", rule.id, rule.kind, scope["method"], scope["path"]
        )
        if rule.target == "messages" and rule.kind in ("status", "drop_after_commit", "stall"):
            self.counters.incr(
                f"model.outcome.fault_{rule.kind if rule.kind != 'status' else rule.status}"
            )
        scope.setdefault("state", {})["sandbox_fault"] = rule
        scope["state"]["sandbox_faults"] = self.book
        return await _APPLY[rule.kind](self._reached, rule, scope, receive, send)

    async def _reached(self, scope: Scope, receive: Receive, send: Send) -> Any:
        """An API request reaches the app: counted by its Idempotency-Key, so
        a test can say how many times each keyed call ran here (GET /_stats,
        `requests_by_key`), reads included (our connectors key them too)."""
        for name, value in scope.get("headers") or ():
            if name == b"idempotency-key":
                self.counters.incr(f"requests.by_key.{value.decode('latin-1')}")
                break
        return await self.app(scope, receive, send)


async def _latency(app: ASGIApp, rule: Rule, scope: Scope, receive: Receive, send: Send) -> None:
    if rule.phase == "before":
        await anyio.sleep(rule.latency_ms / 1000)
    if rule.phase != "after_commit":
        await app(scope, receive, send)
        return
    # The work runs and commits at once; its response is held back, so the
    # caller sits between "it happened" and "I know it happened".
    held: list[Message] = []

    async def hold(message: Message) -> None:
        held.append(message)

    await app(scope, receive, hold)
    await anyio.sleep(rule.latency_ms / 1000)
    for message in held:
        await send(message)


async def _status(app: ASGIApp, rule: Rule, scope: Scope, receive: Receive, send: Send) -> None:
    # The work is NOT done: the request never reaches the app.
    await error_response(rule)(scope, receive, send)


async def _drop_after_commit(
    app: ASGIApp, rule: Rule, scope: Scope, receive: Receive, send: Send
) -> _CloseConnection:
    async def swallow(message: Message) -> None:
        return None

    # The app runs to completion (its transaction commits); nothing it says
    # reaches the client.
    await app(scope, receive, swallow)
    return CLOSE_CONNECTION


class _Stalled(Exception):
    pass


async def _stall(
    app: ASGIApp, rule: Rule, scope: Scope, receive: Receive, send: Send
) -> _CloseConnection:
    forwarded = 0
    streaming = stalled = False

    async def stalling_send(message: Message) -> None:
        nonlocal forwarded, streaming, stalled
        if stalled:
            return
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers") or [])
            streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
        if streaming and (
            message["type"] == "http.response.start" or forwarded < STALL_AFTER_CHUNKS
        ):
            forwarded += message["type"] == "http.response.body"
            await send(message)
            return
        stalled = True
        await anyio.sleep(rule.latency_ms / 1000)
        raise _Stalled

    try:
        await app(scope, receive, stalling_send)
    except _Stalled:
        pass
    return CLOSE_CONNECTION


async def _hold(app: ASGIApp, rule: Rule, scope: Scope, receive: Receive, send: Send) -> Any:
    """Hold the request until the rule is released (POST /_faults/{id}/release)
    or `latency_ms` passes: before it reaches the app, or, `after_commit`,
    with the work done and its response held back. A client that goes away
    while its request is held before the app is seen going (the socket
    closes): that request never reaches the app. So a test can hold a call
    at the provider, wait until it is there (`holding` in GET /_faults), and
    kill its caller at exactly that point."""
    book: FaultBook = scope["state"]["sandbox_faults"]
    if rule.phase == "after_commit":
        response: list[Message] = []

        async def keep(message: Message) -> None:
            response.append(message)

        await app(scope, receive, keep)
        await _held(book, rule, receive)
        for message in response:
            await send(message)
        return None
    body: list[Message] = []
    while not body or body[-1].get("more_body"):  # the request, read before it is held
        message = await receive()
        if message["type"] == "http.disconnect":
            return CLOSE_CONNECTION
        body.append(message)
    if await _held(book, rule, receive):
        book.counted(rule, "abandoned", 1)
        log.info("fault #%d: the client went away while held; %s never ran", rule.id, scope["path"])
        return CLOSE_CONNECTION

    async def replay() -> Message:
        return body.pop(0) if body else await receive()

    await app(scope, replay, send)
    return None


async def _held(book: FaultBook, rule: Rule, receive: Receive) -> bool:
    """Wait for the release or the deadline; True when the client went away first."""
    gone = False
    book.counted(rule, "holding", 1)
    try:
        with anyio.move_on_after(rule.latency_ms / 1000):
            async with anyio.create_task_group() as group:

                async def watch() -> None:
                    nonlocal gone
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    gone = True
                    group.cancel_scope.cancel()

                group.start_soon(watch)
                while not rule.released:
                    await anyio.sleep(HOLD_POLL_S)
                group.cancel_scope.cancel()
    finally:
        book.counted(rule, "holding", -1)
    return gone


_APPLY = {
    "latency": _latency,
    "status": _status,
    "drop_after_commit": _drop_after_commit,
    "stall": _stall,
    "hold": _hold,
}


def in_flight_pause(scope: Scope) -> float:
    """Seconds to hold an idempotency key before doing the work (phase=in_flight)."""
    rule = scope.get("state", {}).get("sandbox_fault")
    if isinstance(rule, Rule) and rule.kind == "latency" and rule.phase == "in_flight":
        return rule.latency_ms / 1000
    return 0.0
