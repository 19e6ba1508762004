"""The helpdesk JSON API: customers, orders, tickets and what happens on them.

Views parse and call one store function; errors use the helpdesk shape
`{"error": {"type": ..., "message": ...}}`. Replies and notes honour an
Idempotency-Key; escalations deliberately do not (each call is one more row),
so Agentdesk's tests can tell an idempotent tool from a non-idempotent one.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sandbox import store
from sandbox.db import run_sync
from sandbox.faults import in_flight_pause
from sandbox.idempotency import Answer, KeyInFlight, KeyMismatch, Outcome, execute, fingerprint
from sandbox.responses import helpdesk_error, json_body, json_response, random_id, raw_json_response
from sandbox.state import Sandbox, sandbox_of
from sandbox.webhooks import event_build


def _error_body(type_: str, message: str) -> dict[str, Any]:
    return {"error": {"type": type_, "message": message}}


def _guarded(
    fn: Callable[[sqlite3.Connection], Any], status: int = 200
) -> Callable[[sqlite3.Connection], Outcome]:
    """Wrap a store call so not-found / invalid become answers, not exceptions."""

    def work(conn: sqlite3.Connection) -> Outcome:
        try:
            return Outcome(status, fn(conn))
        except store.NotFound as exc:
            return Outcome(404, _error_body("not_found", str(exc)), store=False)
        except store.Invalid as exc:
            return Outcome(400, _error_body("invalid_request", str(exc)), store=False)

    return work


def _run_read(sandbox: Sandbox, fn: Callable[[sqlite3.Connection], Any]) -> Outcome:
    with sandbox.db.read() as conn:
        return _guarded(fn)(conn)


async def _read(request: Request, fn: Callable[[sqlite3.Connection], Any]) -> Response:
    outcome = await run_sync(_run_read, sandbox_of(request), fn)
    return json_response(outcome.body, outcome.status)


def _answer_response(answer: Answer) -> Response:
    headers = {"Idempotent-Replayed": "true"} if answer.replayed else None
    return raw_json_response(answer.body_text, answer.status, headers)


async def _write(
    request: Request,
    fn: Callable[[sqlite3.Connection], Any],
    *,
    status: int = 200,
    key: str | None = None,
    params: Any = None,
) -> Response:
    try:
        answer = await execute(
            sandbox_of(request).db,
            area="helpdesk",
            key=key,
            fingerprint=fingerprint(request.method, request.url.path, params),
            request_id=random_id("req_"),
            work=_guarded(fn, status),
            in_flight_pause=in_flight_pause(request.scope),
        )
    except KeyMismatch:
        return helpdesk_error(
            400,
            "idempotency_error",
            "This Idempotency-Key was already used with a different request.",
        )
    except KeyInFlight:
        return helpdesk_error(
            409,
            "idempotency_error",
            "A request with this Idempotency-Key is still in progress.",
            code="idempotency_key_in_use",
        )
    return _answer_response(answer)


async def _body(request: Request, *fields: str) -> dict[str, Any] | Response:
    body = await json_body(request)
    if body is None:
        return helpdesk_error(400, "invalid_request", "Body must be a JSON object.")
    missing = [f for f in fields if not isinstance(body.get(f), str) or not body[f].strip()]
    if missing:
        return helpdesk_error(400, "invalid_request", f"Missing or empty: {', '.join(missing)}")
    return body


async def customer_by_email(request: Request) -> Response:
    email = request.query_params.get("email")
    if not email:
        return helpdesk_error(400, "invalid_request", "The email query parameter is required.")
    return await _read(request, lambda conn: store.customer_get(conn, email=email))


async def customer_detail(request: Request) -> Response:
    customer_id = request.path_params["customer_id"]
    return await _read(request, lambda conn: store.customer_get(conn, customer_id=customer_id))


async def order_detail(request: Request) -> Response:
    order_id = request.path_params["order_id"]
    return await _read(request, lambda conn: store.order_get(conn, order_id=order_id))


async def ticket_open(
    sandbox: Sandbox, *, customer_email: str, subject: str, body: str, order_id: str | None = None
) -> dict[str, Any]:
    """Create a ticket and announce it (the API and the generator both come here)."""

    def create() -> dict[str, Any]:
        with sandbox.db.write() as conn:
            return store.ticket_create(
                conn, customer_email=customer_email, subject=subject, body=body, order_id=order_id
            )

    ticket = await run_sync(create)
    sandbox.webhooks.emit(event_build("ticket.created", ticket, ticket["body"]))
    return ticket


async def ticket_create(request: Request) -> Response:
    body = await _body(request, "customer_email", "subject", "body")
    if isinstance(body, Response):
        return body
    order_id = body.get("order_id") or None
    try:
        ticket = await ticket_open(
            sandbox_of(request),
            customer_email=body["customer_email"],
            subject=body["subject"],
            body=body["body"],
            order_id=order_id,
        )
    except store.NotFound as exc:
        return helpdesk_error(400, "invalid_request", str(exc))
    except store.Invalid as exc:
        return helpdesk_error(400, "invalid_request", str(exc))
    return json_response(ticket, 201)


async def ticket_list(request: Request) -> Response:
    status = request.query_params.get("status") or None
    try:
        limit = min(int(request.query_params.get("limit", "100")), 1000)
    except ValueError:
        return helpdesk_error(400, "invalid_request", "limit must be an integer")
    outcome = await run_sync(
        _run_read,
        sandbox_of(request),
        lambda conn: {"tickets": store.tickets_list(conn, status=status, limit=limit)},
    )
    return json_response(outcome.body, outcome.status)


async def ticket_detail(request: Request) -> Response:
    ticket_id = request.path_params["ticket_id"]
    return await _read(
        request, lambda conn: store.ticket_get(conn, ticket_id=ticket_id, detail=True)
    )


async def _ticket_message(request: Request, kind: str) -> Response:
    body = await _body(request, "body")
    if isinstance(body, Response):
        return body
    ticket_id, key = request.path_params["ticket_id"], request.headers.get("idempotency-key")
    return await _write(
        request,
        lambda conn: store.message_add(
            conn, ticket_id=ticket_id, kind=kind, body=body["body"], key=key
        ),
        status=201,
        key=key,
        params=body,
    )


async def reply_create(request: Request) -> Response:
    return await _ticket_message(request, "reply")


async def note_create(request: Request) -> Response:
    return await _ticket_message(request, "note")


async def classification_set(request: Request) -> Response:
    body = await _body(request, "category", "priority")
    if isinstance(body, Response):
        return body
    ticket_id = request.path_params["ticket_id"]
    return await _write(
        request,
        lambda conn: store.ticket_classify(
            conn, ticket_id=ticket_id, category=body["category"], priority=body["priority"]
        ),
    )


async def escalation_create(request: Request) -> Response:
    body = await _body(request, "reason")
    if isinstance(body, Response):
        return body
    ticket_id = request.path_params["ticket_id"]
    # No key passed on purpose: this endpoint is the non-idempotent one.
    return await _write(
        request,
        lambda conn: store.escalation_add(conn, ticket_id=ticket_id, reason=body["reason"]),
        status=201,
    )


async def customer_reply(request: Request) -> Response:
    body = await _body(request, "body")
    if isinstance(body, Response):
        return body
    sandbox, ticket_id = sandbox_of(request), request.path_params["ticket_id"]

    def add(conn: sqlite3.Connection) -> dict[str, Any]:
        message = store.message_add(conn, ticket_id=ticket_id, kind="customer", body=body["body"])
        return {"message": message, "ticket": store.ticket_get(conn, ticket_id=ticket_id)}

    response = await _write(request, add, status=201)
    if response.status_code == 201:
        sandbox.webhooks.emit(
            event_build("ticket.replied", json.loads(response.body)["ticket"], body["body"])
        )
    return response


routes = [
    Route("/helpdesk/customers", customer_by_email, methods=["GET"]),
    Route("/helpdesk/customers/{customer_id}", customer_detail, methods=["GET"]),
    Route("/helpdesk/orders/{order_id}", order_detail, methods=["GET"]),
    Route("/helpdesk/tickets", ticket_create, methods=["POST"]),
    Route("/helpdesk/tickets", ticket_list, methods=["GET"]),
    Route("/helpdesk/tickets/{ticket_id:int}", ticket_detail, methods=["GET"]),
    Route("/helpdesk/tickets/{ticket_id:int}/replies", reply_create, methods=["POST"]),
    Route("/helpdesk/tickets/{ticket_id:int}/notes", note_create, methods=["POST"]),
    Route("/helpdesk/tickets/{ticket_id:int}/classification", classification_set, methods=["POST"]),
    Route("/helpdesk/tickets/{ticket_id:int}/escalations", escalation_create, methods=["POST"]),
    Route("/helpdesk/tickets/{ticket_id:int}/customer_reply", customer_reply, methods=["POST"]),
]
