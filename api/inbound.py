"""Inbound channels: the helpdesk's signed webhook, and the messages API.

The webhook is signed Stripe-style: `Agentdesk-Signature: t=<unix>,v1=<hex>`
where v1 = HMAC-SHA256(secret, f"{t}.{raw body}"). A call that is unsigned,
wrongly signed or older than the tolerance is refused and changes nothing.

A sender retries when it lost our answer, so a replay of an event id
already accepted is answered with the first answer (api/views.py keeps it
as the event id's idempotency key) and does nothing twice: the
InboundDelivery row, written in the same transaction as the turn, is the
guard. The signature is verified and the body parsed once per request
(delivery_verified); the delivery row, the session on first contact, the
turn and the answer kept for a replay commit in one short transaction, and
the trigger for a worker is the one publish after it.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from agents.errors import Forbidden, Invalid
from agents.models import InboundDelivery, Turn
from agents.services import message_post
from api import inbound_checks


def sign(secret: str, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, header: str, body: bytes, *, now: float | None = None) -> None:
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        timestamp = int(parts["t"])
        given = parts["v1"]
    except (KeyError, ValueError):
        raise Forbidden("missing or malformed signature") from None
    now = time.time() if now is None else now
    if abs(now - timestamp) > settings.AGENTDESK_WEBHOOK_TOLERANCE_S:
        raise Forbidden("stale signature")
    expected = sign(secret, body, timestamp).split("v1=", 1)[1]
    if not hmac.compare_digest(expected, given):
        raise Forbidden("bad signature")


@dataclass(frozen=True)
class Delivery:
    """A webhook delivery whose signature held, parsed (once)."""

    event_id: str
    kind: str
    ticket: dict[str, Any]
    message: dict[str, Any]
    payload: dict[str, Any]  # the whole body, as parsed


def delivery_verified(*, body: bytes, signature: str) -> Delivery:
    """The delivery, once its signature holds (else Forbidden) and its body
    is a webhook we take (else Invalid). The only place either is checked."""
    verify(settings.AGENTDESK_WEBHOOK_SECRET, signature, body)
    payload = inbound_checks.parsed(body)  # hostile values: Invalid, not a 500
    try:
        event_id, kind, ticket = payload["id"], payload["type"], payload["ticket"]
        ticket["id"]  # noqa: B018 (a ticket without an id is malformed)
        message = payload.get("message") or {}
        message.get("body")  # a message that is not an object is malformed
    except (ValueError, KeyError, TypeError, AttributeError):
        raise Invalid("malformed webhook body") from None
    if kind not in KINDS:
        raise Invalid(f"unsupported event type {kind!r}")
    return Delivery(str(event_id)[:100], kind, ticket, message, payload)


KINDS = ("ticket.created", "ticket.replied")


def helpdesk_accept(delivery: Delivery) -> Turn | None:
    """The turn a verified delivery starts, in the caller's transaction (or
    one of its own); None when its event id was accepted before. A ticket
    just opened creates its session with the turn (no lookup first, and not
    the path of a customer's reply)."""
    ticket = delivery.ticket
    with transaction.atomic(savepoint=False):  # nothing here is caught: no savepoint
        with connection.cursor() as cursor:
            # A concurrent delivery of the same event waits here on ours,
            # then finds it taken.
            cursor.execute(DELIVERY_SQL, [delivery.event_id])
            if cursor.fetchone() is None:
                return None  # accepted before: nothing to do twice
        return message_post(
            key=f"ticket:{ticket['id']}",
            text=_ticket_text(delivery.kind, ticket, delivery.message),
            trigger=Turn.Trigger.CUSTOMER,
            title=str(ticket.get("subject", ""))[:300],
            customer=str(ticket.get("customer_email", ""))[:200],
            context=_context(ticket),
            likely_new=delivery.kind == "ticket.created",
        )


DELIVERY_SQL = f"""
INSERT INTO {InboundDelivery._meta.db_table} (event_id, received_at) VALUES (%s, now())
ON CONFLICT (event_id) DO NOTHING RETURNING id
"""  # noqa: S608 (the table name is the model's)


def helpdesk_webhook(*, body: bytes, signature: str) -> Turn | None:
    """Verify, parse and accept a delivery (for callers without a request)."""
    return helpdesk_accept(delivery_verified(body=body, signature=signature))


def _ticket_text(kind: str, ticket: dict[str, Any], message: dict[str, Any]) -> str:
    who = f"{ticket.get('customer_name', '')} <{ticket.get('customer_email', '')}>".strip()
    if kind == "ticket.replied":
        return f"Customer {who} replied on ticket #{ticket['id']}:\n\n{message.get('body', '')}"
    lines = [f"Ticket #{ticket['id']} from {who}", f"Subject: {ticket.get('subject', '')}"]
    if ticket.get("order_id"):
        lines.append(f"Order: {ticket['order_id']}")
    lines += ["", str(ticket.get("body", ""))]
    return "\n".join(lines)


def _context(ticket: dict[str, Any]) -> dict[str, Any]:
    keep = ("id", "subject", "customer_email", "customer_name", "order_id", "status", "priority")
    return {k: ticket[k] for k in keep if k in ticket}
