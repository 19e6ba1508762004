"""A Stripe-compatible slice of the payments API: refunds (and payment intents).

Speaks what the official `stripe` SDK sends and expects: form-encoded bodies
with `metadata[key]=value`, Bearer `sk_test_*` keys, Stripe-shaped JSON and
errors, and Stripe's Idempotency-Key semantics (see sandbox.idempotency).
"""

from __future__ import annotations

import base64
import binascii
import json
import sqlite3
import time
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sandbox import store
from sandbox.db import run_sync
from sandbox.faults import in_flight_pause
from sandbox.idempotency import KeyInFlight, KeyMismatch, Outcome, execute, fingerprint
from sandbox.responses import (
    json_response,
    random_id,
    raw_json_response,
    stripe_error,
    stripe_error_body,
)
from sandbox.state import sandbox_of

REASONS = ("duplicate", "fraudulent", "requested_by_customer")


def parse_form(raw: bytes) -> dict[str, Any]:
    """Stripe's form encoding: `a=1&metadata[k]=v&expand[]=x` -> nested dicts/lists."""
    params: dict[str, Any] = {}
    for name, value in parse_qsl(raw.decode(), keep_blank_values=True):
        if "[" not in name or not name.endswith("]"):
            params[name] = value
            continue
        base, _, sub = name[:-1].partition("[")
        if sub == "":
            params.setdefault(base, []).append(value)
        else:
            container = params.setdefault(base, {})
            if isinstance(container, dict):
                container[sub] = value
    return params


def api_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    scheme, _, credentials = auth.partition(" ")
    if scheme.lower() == "bearer":
        return credentials.strip() or None
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(credentials).decode().partition(":")[0] or None
        except (binascii.Error, UnicodeDecodeError):
            return None
    return None


def _auth_error(request: Request) -> Response | None:
    key = api_key(request)
    if key is None:
        return stripe_error(
            401,
            "invalid_request_error",
            "You did not provide an API key. You need to provide your API key in the Authorization header,"
            " using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
        )
    if not key.startswith("sk_test_"):
        return stripe_error(
            401,
            "invalid_request_error",
            f"Invalid API Key provided: {key[:8]}****{key[-4:]}",
            code="api_key_invalid",
        )
    return None


def refund_json(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "refund",
        "amount": row["amount"],
        "balance_transaction": None,
        "charge": "ch_" + row["payment_intent"].removeprefix("pi_"),
        "created": row["created"],
        "currency": row["currency"],
        "destination_details": None,
        "metadata": json.loads(row["metadata"]),
        "payment_intent": row["payment_intent"],
        "reason": row["reason"],
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": row["status"],
        "transfer_reversal": None,
    }


def _invalid(
    message: str, code: str | None = None, param: str | None = None, status: int = 400
) -> Outcome:
    # store=False: a request refused before it did anything leaves no idempotent result.
    return Outcome(
        status, stripe_error_body("invalid_request_error", message, code, param), store=False
    )


def _amount(params: dict[str, Any], remaining: int) -> int | Outcome:
    if "amount" not in params:
        if remaining <= 0:
            return _invalid("Charge has already been refunded.", "charge_already_refunded")
        return remaining
    try:
        amount = int(params["amount"])
    except ValueError:
        return _invalid(
            f"Invalid integer: {params['amount']}", "parameter_invalid_integer", "amount"
        )
    if amount <= 0:
        return _invalid(
            "This value must be greater than or equal to 1.", "parameter_invalid_integer", "amount"
        )
    if amount > remaining:
        return _invalid(
            f"Refund amount (${amount / 100:,.2f}) is greater than unrefunded amount on charge (${remaining / 100:,.2f})",
            "amount_too_large",
            "amount",
        )
    return amount


def _check_params(params: dict[str, Any]) -> Outcome | None:
    if not params.get("payment_intent"):
        return _invalid(
            "You must provide either a charge or a payment_intent.",
            "parameter_missing",
            "payment_intent",
        )
    if params.get("reason") not in (None, "", *REASONS):
        return _invalid(
            "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer",
            "parameter_invalid_string",
            "reason",
        )
    if not isinstance(params.get("metadata", {}), dict):
        return _invalid("Invalid object", "parameter_invalid_object", "metadata")
    return None


def refund_create(conn: sqlite3.Connection, params: dict[str, Any], key: str | None) -> Outcome:
    problem = _check_params(params)
    if problem is not None:
        return problem
    try:
        order = store.order_get(conn, payment_intent=params["payment_intent"])
    except store.NotFound:
        message = f"No such payment_intent: '{params['payment_intent']}'"
        return _invalid(message, "resource_missing", "payment_intent", status=404)
    amount = _amount(params, order["total_cents"] - order["refunded_cents"])
    if isinstance(amount, Outcome):
        return amount
    refund_id = random_id("re_")
    conn.execute(
        "INSERT INTO refunds (id, payment_intent, order_id, amount, currency, reason, metadata, status, idempotency_key, created)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, 'succeeded', ?, ?)",
        (
            refund_id,
            order["payment_intent"],
            order["id"],
            amount,
            order["currency"],
            params.get("reason") or None,
            json.dumps(params.get("metadata", {})),
            key,
            int(time.time()),
        ),
    )
    row = conn.execute("SELECT * FROM refunds WHERE id = ?", (refund_id,)).fetchone()
    return Outcome(200, refund_json(row))


async def refunds_create(request: Request) -> Response:
    if (error := _auth_error(request)) is not None:
        return error
    params = parse_form(await request.body())
    key = request.headers.get("idempotency-key")
    request_id = random_id("req_", 14)
    try:
        answer = await execute(
            sandbox_of(request).db,
            area="payments",
            key=key,
            fingerprint=fingerprint("POST", "/v1/refunds", params),
            request_id=request_id,
            work=lambda conn: refund_create(conn, params, key),
            in_flight_pause=in_flight_pause(request.scope),
        )
    except KeyMismatch:
        message = (
            "Keys for idempotent requests can only be used with the same parameters they were first used with."
            f" Try using a key other than '{key}' if you meant to execute a different request."
        )
        return stripe_error(400, "idempotency_error", message)
    except KeyInFlight:
        message = (
            "There is currently another in-progress request using this Idempotency-Key (that probably means you"
            f" submitted twice, and the other request is still going through): '{key}'. Please try again later."
        )
        return stripe_error(409, "invalid_request_error", message, code="idempotency_key_in_use")
    headers = {"Request-Id": request_id, **({"Idempotency-Key": key} if key else {})}
    if answer.replayed:
        headers.update(
            {"Idempotent-Replayed": "true", "Original-Request": answer.original_request_id or ""}
        )
    return raw_json_response(answer.body_text, answer.status, headers)


def _refund_get(request: Request) -> Outcome:
    with sandbox_of(request).db.read() as conn:
        row = conn.execute(
            "SELECT * FROM refunds WHERE id = ?", (request.path_params["refund_id"],)
        ).fetchone()
    if row is None:
        return _invalid(
            f"No such refund: '{request.path_params['refund_id']}'",
            "resource_missing",
            "id",
            status=404,
        )
    return Outcome(200, refund_json(row))


async def refunds_retrieve(request: Request) -> Response:
    if (error := _auth_error(request)) is not None:
        return error
    outcome = await run_sync(_refund_get, request)
    return json_response(outcome.body, outcome.status)


def _refund_list(request: Request, limit: int) -> dict[str, Any]:
    query, args = "SELECT * FROM refunds", []
    if pi := request.query_params.get("payment_intent"):
        query, args = query + " WHERE payment_intent = ?", [pi]
    # Newest first, like Stripe; rowid breaks ties within one second.
    with sandbox_of(request).db.read() as conn:
        rows = conn.execute(
            query + " ORDER BY created DESC, rowid DESC LIMIT ?", [*args, limit + 1]
        ).fetchall()
    return {
        "object": "list",
        "data": [refund_json(r) for r in rows[:limit]],
        "has_more": len(rows) > limit,
        "url": "/v1/refunds",
    }


async def refunds_list(request: Request) -> Response:
    if (error := _auth_error(request)) is not None:
        return error
    try:
        limit = int(request.query_params.get("limit", "10"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        return stripe_error(
            400, "invalid_request_error", "Invalid limit: must be between 1 and 100", param="limit"
        )
    return json_response(await run_sync(_refund_list, request, limit))


def _payment_intent_get(request: Request) -> Outcome:
    pi = request.path_params["payment_intent"]
    try:
        with sandbox_of(request).db.read() as conn:
            order = store.order_get(conn, payment_intent=pi)
    except store.NotFound:
        return _invalid(f"No such payment_intent: '{pi}'", "resource_missing", "id", status=404)
    body = {
        "id": pi,
        "object": "payment_intent",
        "amount": order["total_cents"],
        "amount_received": order["total_cents"],
        "currency": order["currency"],
        "status": "succeeded",
        "latest_charge": "ch_" + pi.removeprefix("pi_"),
        "metadata": {"order_id": order["id"]},
        "created": order["created"],
    }
    return Outcome(200, body)


async def payment_intent_retrieve(request: Request) -> Response:
    if (error := _auth_error(request)) is not None:
        return error
    outcome = await run_sync(_payment_intent_get, request)
    return json_response(outcome.body, outcome.status)


routes = [
    Route("/v1/refunds", refunds_create, methods=["POST"]),
    Route("/v1/refunds", refunds_list, methods=["GET"]),
    Route("/v1/refunds/{refund_id}", refunds_retrieve, methods=["GET"]),
    Route("/v1/payment_intents/{payment_intent}", payment_intent_retrieve, methods=["GET"]),
]
