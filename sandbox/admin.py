"""Test-facing endpoints (`/_...`): health, side-effect counts, faults, reset."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sandbox.db import run_sync
from sandbox.faults import FaultError
from sandbox.responses import helpdesk_error, json_body, json_response
from sandbox.seed import seed_demo
from sandbox.state import ModelPace, Sandbox, sandbox_of


async def health(request: Request) -> Response:
    return json_response({"ok": True})


def _count(conn: Any, query: str) -> int:
    return int(conn.execute(query).fetchone()[0])


def stats_collect(sandbox: Sandbox) -> dict[str, Any]:
    with sandbox.db.read() as conn:
        by_key = conn.execute(
            "SELECT idempotency_key, COUNT(*) AS n FROM refunds WHERE idempotency_key IS NOT NULL GROUP BY idempotency_key"
        ).fetchall()
        in_flight = conn.execute(
            "SELECT area, key FROM idempotency_keys WHERE state = 'in_flight'"
        ).fetchall()
        deliveries = conn.execute(
            "SELECT state, COUNT(*) AS n FROM webhook_deliveries GROUP BY state"
        ).fetchall()
        stats = {
            "refunds": {
                "total": _count(conn, "SELECT COUNT(*) FROM refunds"),
                "amount_cents": _count(conn, "SELECT COALESCE(SUM(amount), 0) FROM refunds"),
                "without_idempotency_key": _count(
                    conn, "SELECT COUNT(*) FROM refunds WHERE idempotency_key IS NULL"
                ),
                # Refunds CREATED per key: anything above 1 is a double refund.
                "by_idempotency_key": {r["idempotency_key"]: r["n"] for r in by_key},
            },
            "tickets": _count(conn, "SELECT COUNT(*) FROM tickets"),
            "replies": _count(conn, "SELECT COUNT(*) FROM ticket_messages WHERE kind = 'reply'"),
            "notes": _count(conn, "SELECT COUNT(*) FROM ticket_messages WHERE kind = 'note'"),
            "customer_messages": _count(
                conn, "SELECT COUNT(*) FROM ticket_messages WHERE kind = 'customer'"
            ),
            "escalations": _count(conn, "SELECT COUNT(*) FROM escalations"),
            "webhooks": {r["state"]: r["n"] for r in deliveries},
            "idempotency": {
                "stored": _count(
                    conn, "SELECT COUNT(*) FROM idempotency_keys WHERE state = 'done'"
                ),
                "in_flight": [f"{r['area']}:{r['key']}" for r in in_flight],
            },
        }
    outcomes = sandbox.counters.snapshot("model.outcome.")
    stats["model_requests"] = {
        "total": sum(outcomes.values()),
        "by_outcome": outcomes,
        "by_mode": sandbox.counters.snapshot("model.mode."),
    }
    stats["model_requests"]["summaries"] = sandbox.counters.snapshot("model.summary.")
    stats["faults_applied"] = sandbox.counters.snapshot("faults.")
    stats["requests_by_key"] = sandbox.counters.snapshot("requests.by_key.")
    return stats


async def stats(request: Request) -> Response:
    return json_response(await run_sync(stats_collect, sandbox_of(request)))


def _refunds_all(sandbox: Sandbox) -> list[dict[str, Any]]:
    with sandbox.db.read() as conn:
        rows = conn.execute(
            "SELECT id, idempotency_key AS key, payment_intent, order_id, amount, currency, reason, created"
            " FROM refunds ORDER BY rowid"
        ).fetchall()
    return [dict(r) for r in rows]


async def refunds(request: Request) -> Response:
    return json_response({"refunds": await run_sync(_refunds_all, sandbox_of(request))})


def _wants_seed(request: Request, body: dict[str, Any] | None) -> bool:
    if request.query_params.get("seed_demo", "").lower() in ("1", "true", "yes"):
        return True
    return bool(body and body.get("seed_demo"))


def reset_all(sandbox: Sandbox, *, reseed: bool) -> None:
    sandbox.db.wipe()
    sandbox.faults.clear()
    sandbox.pace = sandbox.default_pace()
    sandbox.counters.clear()
    sandbox.requests.clear()
    sandbox.completed.clear()
    sandbox.slack.clear()
    sandbox.carrier.clear()
    if reseed:
        seed_demo(sandbox.db)


async def reset(request: Request) -> Response:
    """Wipe everything (data, faults, counters); `{"seed_demo": true}` reseeds."""
    reseed = _wants_seed(request, await json_body(request))
    await run_sync(reset_all, sandbox_of(request), reseed=reseed)
    return json_response({"ok": True, "seeded": reseed})


async def seed(request: Request) -> Response:
    await run_sync(seed_demo, sandbox_of(request).db)
    return json_response({"ok": True})


async def model_requests(request: Request) -> Response:
    """The last `?last=N` (default 10) Messages-API request bodies, newest last."""
    try:
        n = min(100, int(request.query_params.get("last", "10")))
    except ValueError:
        n = 10
    return json_response({"requests": sandbox_of(request).requests.last(n)})


async def model_repeats(request: Request) -> Response:
    """Model requests completed more than once (paid twice): when the answer
    that was lost was completed, and when it was asked for again."""
    return json_response({"repeats": sandbox_of(request).completed.repeats()})


async def faults_list(request: Request) -> Response:
    return json_response({"faults": sandbox_of(request).faults.list()})


async def faults_add(request: Request) -> Response:
    body = await json_body(request)
    if body is None:
        return helpdesk_error(400, "invalid_request", "Body must be a JSON object.")
    try:
        rule = sandbox_of(request).faults.add(body)
    except FaultError as exc:
        return helpdesk_error(400, "invalid_request", str(exc))
    return json_response({"id": rule.id, "faults": sandbox_of(request).faults.list()}, 201)


async def model_pace_get(request: Request) -> Response:
    return json_response(sandbox_of(request).pace.as_dict())


async def model_pace_set(request: Request) -> Response:
    """`{"ttft_ms": 2000, "tokens_per_s": 60}`: the Messages API's pace from now on."""
    body = await json_body(request)
    try:
        if body is None:
            raise ValueError("Body must be a JSON object.")
        ttft_ms = int(body.get("ttft_ms", 0))
        tokens_per_s = float(body.get("tokens_per_s", 0))
        if not (0 <= ttft_ms <= 600_000 and 0 <= tokens_per_s <= 1_000_000):
            raise ValueError("ttft_ms must be 0..600000 and tokens_per_s 0..1000000")
    except (TypeError, ValueError) as exc:
        return helpdesk_error(400, "invalid_request", str(exc))
    sandbox_of(request).pace = ModelPace(ttft_ms, tokens_per_s)
    return json_response(sandbox_of(request).pace.as_dict())


async def faults_release(request: Request) -> Response:
    """Let what a hold rule holds go on."""
    try:
        rule = sandbox_of(request).faults.release(int(request.path_params["rule_id"]))
    except FaultError as exc:
        return helpdesk_error(404, "not_found", str(exc))
    return json_response({"id": rule.id, "released": True})


async def faults_clear(request: Request) -> Response:
    sandbox_of(request).faults.clear()
    return json_response({"faults": []})


routes = [
    Route("/_health", health, methods=["GET"]),
    Route("/_stats", stats, methods=["GET"]),
    Route("/_refunds", refunds, methods=["GET"]),
    Route("/_model_requests", model_requests, methods=["GET"]),
    Route("/_model_repeats", model_repeats, methods=["GET"]),
    Route("/_reset", reset, methods=["POST"]),
    Route("/_seed", seed, methods=["POST"]),
    Route("/_faults", faults_list, methods=["GET"]),
    Route("/_faults", faults_add, methods=["POST"]),
    Route("/_faults", faults_clear, methods=["DELETE"]),
    Route("/_faults/{rule_id:int}/release", faults_release, methods=["POST"]),
    Route("/_model_pace", model_pace_get, methods=["GET"]),
    Route("/_model_pace", model_pace_set, methods=["POST"]),
]
