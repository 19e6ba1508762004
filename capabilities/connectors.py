"""The built-in connectors: the support-triage tools of the helpdesk and the
payment provider (a capability like MCP tools and sub-agents, so it lives
with them; the code profiles of registry.py offer them).

Everything that reaches the outside world is here; the runtime only sees the
Tool objects (schema, kind, timeout, run).
"""

from __future__ import annotations

import json
from typing import Any

import stripe
from django.conf import settings

from agents.errors import ServiceError
from agents.features.followups import followup_schedule
from agents.tools import http
from agents.tools.base import (
    Kind,
    NotSent,
    OutcomeUnknown,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
)


def _ticket_path(ctx: ToolContext, suffix: str) -> str:
    if ctx.ticket_id is None:
        raise ToolError("this session is not about a ticket")
    return http.helpdesk_url(f"/helpdesk/tickets/{ctx.ticket_id}{suffix}")


def _as_output(body: Any, external_id: str = "") -> ToolOutput:
    return ToolOutput(content=json.dumps(body, sort_keys=True), external_id=external_id)


def _read_key(ctx: ToolContext) -> dict[str, str]:
    """A read carries its call's key too: the server ignores it on a GET, and
    it names the call in the server's logs (the sandbox counts calls by it)."""
    return {"Idempotency-Key": ctx.idempotency_key} if ctx.idempotency_key else {}


def lookup_customer(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    body = http.call(
        "GET",
        http.helpdesk_url("/helpdesk/customers"),
        params={"email": args["email"]},
        headers=_read_key(ctx),
        timeout_s=LOOKUP_CUSTOMER.timeout_s,
    )
    return _as_output(body)


def lookup_order(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    body = http.call(
        "GET",
        http.helpdesk_url(f"/helpdesk/orders/{args['order_id']}"),
        headers=_read_key(ctx),
        timeout_s=LOOKUP_ORDER.timeout_s,
    )
    return _as_output(body)


def classify_ticket(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    body = http.call(
        "POST", _ticket_path(ctx, "/classification"), json=args, timeout_s=CLASSIFY.timeout_s
    )
    return _as_output(body)


def _keyed_post(ctx: ToolContext, suffix: str, payload: dict[str, Any], timeout_s: float):
    return http.call(
        "POST",
        _ticket_path(ctx, suffix),
        json=payload,
        headers={"Idempotency-Key": ctx.idempotency_key},
        timeout_s=timeout_s,
    )


def send_reply(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    body = _keyed_post(ctx, "/replies", {"body": args["body"]}, SEND_REPLY.timeout_s)
    return _as_output(body, external_id=str(body.get("id", "")))


def add_internal_note(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    body = _keyed_post(ctx, "/notes", {"body": args["body"]}, ADD_NOTE.timeout_s)
    return _as_output(body, external_id=str(body.get("id", "")))


def escalate_to_human(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    # The helpdesk's escalation endpoint ignores idempotency keys: this tool is
    # declared NOT_IDEMPOTENT, so an unknown outcome goes to a human.
    body = http.call(
        "POST",
        _ticket_path(ctx, "/escalations"),
        json={"reason": args["reason"]},
        timeout_s=ESCALATE.timeout_s,
    )
    return _as_output(body, external_id=str(body.get("id", "")))


def _error_code(exc: stripe.StripeError) -> str:
    """Stripe's error code: the SDK sets `code` on some errors only (a 409 is a
    plain APIError), the body always has it."""
    if exc.code:
        return exc.code
    body = exc.json_body if isinstance(exc.json_body, dict) else {}
    error = body.get("error")
    return str(error.get("code") or "") if isinstance(error, dict) else ""


def _stripe_client() -> stripe.StripeClient:
    return stripe.StripeClient(
        settings.STRIPE_API_KEY,
        base_addresses={"api": settings.STRIPE_API_BASE},
        max_network_retries=0,  # the runtime owns retries, always with the same key
        # The tool's timeout, not the SDK's 80 s default: a stalled provider
        # must not hold a worker for minutes.
        http_client=stripe.RequestsClient(timeout=ISSUE_REFUND.timeout_s),
    )


def issue_refund(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    order = http.call(
        "GET",
        http.helpdesk_url(f"/helpdesk/orders/{args['order_id']}"),
        timeout_s=LOOKUP_ORDER.timeout_s,
    )
    params = {
        "payment_intent": order["payment_intent"],
        "amount": args["amount_cents"],
        "reason": "requested_by_customer",
        "metadata": {"order_id": args["order_id"], "session": ctx.session_key},
    }
    try:
        refund = _stripe_client().v1.refunds.create(
            params=params, options={"idempotency_key": ctx.idempotency_key}
        )
    except stripe.APIConnectionError as exc:
        raise OutcomeUnknown(f"payment provider unreachable mid-request: {exc}") from exc
    except stripe.RateLimitError as exc:  # refused before anything happened
        raise NotSent("payment provider answered 429 (rate limited)") from exc
    except stripe.StripeError as exc:
        status = exc.http_status or 0
        if status == 409 and _error_code(exc) == http.KEY_IN_USE:
            # Our key's first request is still running there: this one was
            # refused and did nothing; sent again later it gets that answer.
            raise NotSent("payment provider answered 409 (idempotency key in use)") from exc
        if status >= 500 or status == 409:
            raise OutcomeUnknown(f"payment provider answered {status}") from exc
        raise ToolError(f"refund refused by the payment provider: {exc.user_message}") from exc
    summary = {
        "refund_id": refund.id,
        "status": refund.status,
        "amount_cents": refund.amount,
        "currency": refund.currency,
        "order_id": args["order_id"],
    }
    return _as_output(summary, external_id=refund.id)


def schedule_followup(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    # Our own database, keyed by the call's idempotency key: a re-sent call
    # (a worker died after the commit) finds the row the first one made.
    try:
        row, created = followup_schedule(
            session_key=ctx.session_key,
            key=ctx.idempotency_key,
            note=args["note"],
            due_at=_followup_due(args),
            cancel_on_reply=args.get("cancel_on_reply", True),
        )
    except ServiceError as exc:
        raise ToolError(exc.message) from exc
    body = {
        "followup_id": row.id,
        "due_at": row.due_at.isoformat(),
        "status": row.status,
        "cancel_on_reply": row.cancel_on_reply,
        "already_scheduled": not created,
    }
    return _as_output(body, external_id=f"followup:{row.id}")


def _followup_due(args: dict[str, Any]):
    from datetime import datetime, timedelta

    from django.utils import timezone

    if "delay_minutes" in args:
        return timezone.now() + timedelta(minutes=args["delay_minutes"])
    if "due_at" not in args:
        raise ToolError("give delay_minutes or due_at")
    try:
        due = datetime.fromisoformat(args["due_at"])
    except ValueError:
        raise ToolError("due_at must be an ISO 8601 date and time") from None
    if due.tzinfo is None:
        raise ToolError("due_at needs a time zone (e.g. 2025-01-31T09:00:00+00:00)")
    return due


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_TEXT = {"type": "string", "minLength": 1, "maxLength": 5000}

LOOKUP_CUSTOMER = Tool(
    name="lookup_customer",
    description="Look up a customer account by email address.",
    input_schema=_schema({"email": {"type": "string", "format": "email"}}, ["email"]),
    kind=Kind.READ_ONLY,
    run=lookup_customer,
    timeout_s=10,
)
LOOKUP_ORDER = Tool(
    name="lookup_order",
    description="Look up an order by id (ORD-1234): items, total, status, refunds.",
    input_schema=_schema({"order_id": {"type": "string", "pattern": "^ORD-[0-9]+$"}}, ["order_id"]),
    kind=Kind.READ_ONLY,
    run=lookup_order,
    timeout_s=10,
)
CLASSIFY = Tool(
    name="classify_ticket",
    description="Set the ticket's category and priority.",
    input_schema=_schema(
        {
            "category": {"enum": ["billing", "shipping", "account", "technical", "other"]},
            "priority": {"enum": ["low", "normal", "high", "urgent"]},
        },
        ["category", "priority"],
    ),
    kind=Kind.IDEMPOTENT_BY_KEY,  # setting the same values twice is the same
    run=classify_ticket,
    timeout_s=10,
)
ISSUE_REFUND = Tool(
    name="issue_refund",
    description=(
        "Refund part or all of an order to the customer's original payment method. "
        "Refunds above the approval limit wait for a human approver."
    ),
    input_schema=_schema(
        {
            "order_id": {"type": "string", "pattern": "^ORD-[0-9]+$"},
            "amount_cents": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
            "reason": {"type": "string", "maxLength": 500},
        },
        ["order_id", "amount_cents"],
    ),
    kind=Kind.IDEMPOTENT_BY_KEY,
    run=issue_refund,
    timeout_s=20,
)
SEND_REPLY = Tool(
    name="send_reply",
    description="Send a reply to the customer on the ticket.",
    input_schema=_schema({"body": _TEXT}, ["body"]),
    kind=Kind.IDEMPOTENT_BY_KEY,
    run=send_reply,
    timeout_s=10,
)
ADD_NOTE = Tool(
    name="add_internal_note",
    description="Add an internal note to the ticket (not visible to the customer).",
    input_schema=_schema({"body": _TEXT}, ["body"]),
    kind=Kind.IDEMPOTENT_BY_KEY,
    run=add_internal_note,
    timeout_s=10,
)
ESCALATE = Tool(
    name="escalate_to_human",
    description="Hand the ticket to a human agent, with the reason.",
    input_schema=_schema({"reason": _TEXT}, ["reason"]),
    kind=Kind.NOT_IDEMPOTENT,
    run=escalate_to_human,
    timeout_s=10,
)

SCHEDULE_FOLLOWUP = Tool(
    name="schedule_followup",
    description=(
        "Schedule a follow-up on this ticket: after delay_minutes (or at due_at, ISO 8601 "
        "with a time zone) you get a new turn with the note as its instruction. With "
        "cancel_on_reply (default true) a reply from the customer cancels it."
    ),
    input_schema=_schema(
        {
            "delay_minutes": {"type": "integer", "minimum": 1, "maximum": 129_600},
            "due_at": {"type": "string", "maxLength": 40},
            "note": {"type": "string", "minLength": 1, "maxLength": 2000},
            "cancel_on_reply": {"type": "boolean"},
        },
        ["note"],
    ),
    kind=Kind.IDEMPOTENT_BY_KEY,  # keyed by the call's idempotency key
    run=schedule_followup,
    timeout_s=10,
)

SUPPORT_TOOLS = (
    LOOKUP_CUSTOMER,
    LOOKUP_ORDER,
    CLASSIFY,
    ISSUE_REFUND,
    SEND_REPLY,
    ADD_NOTE,
    ESCALATE,
    SCHEDULE_FOLLOWUP,
)
