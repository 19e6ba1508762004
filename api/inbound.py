"""Inbound channels: the helpdesk's signed webhook, and the messages API.

The webhook is signed Stripe-style: `Agentdesk-Signature: t=<unix>,v1=<hex>`
where v1 = HMAC-SHA256(secret, f"{t}.{raw body}"). A call that is unsigned,
wrongly signed or older than the tolerance is refused and changes nothing.

A sender retries when it lost our answer, so a replay of an event id
already accepted is answered with the first answer (api/views.py keeps it
as the event id's idempotency key) and does nothing twice; the
InboundDelivery row, written in the same transaction as the turn, is the
second guard.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from agents.errors import Forbidden, Invalid
from agents.models import InboundDelivery, Turn
from agents.services import message_post


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


def verified_event_id(*, body: bytes, signature: str) -> str:
    """The event id of a delivery whose signature holds (else Forbidden)."""
    verify(settings.AGENTDESK_WEBHOOK_SECRET, signature, body)
    return str(_parse(body)[0])[:100]


def _parse(body: bytes) -> tuple[Any, str, dict[str, Any]]:
    try:
        payload = json.loads(body)
        event_id, kind, ticket = payload["id"], payload["type"], payload["ticket"]
        ticket["id"]  # noqa: B018 (a ticket without an id is malformed)
    except (ValueError, KeyError, TypeError):
        raise Invalid("malformed webhook body") from None
    return event_id, kind, ticket


def helpdesk_webhook(*, body: bytes, signature: str) -> Turn | None:
    """The turn a delivery starts; None when its event id was accepted before."""
    verify(settings.AGENTDESK_WEBHOOK_SECRET, signature, body)
    event_id, kind, ticket = _parse(body)
    payload = json.loads(body)
    if kind not in ("ticket.created", "ticket.replied"):
        raise Invalid(f"unsupported event type {kind!r}")
    with transaction.atomic():
        try:
            with transaction.atomic():
                InboundDelivery.objects.create(event_id=str(event_id)[:100])
        except IntegrityError:
            return None  # accepted before: nothing to do twice
        return message_post(
            key=f"ticket:{ticket['id']}",
            text=_ticket_text(kind, ticket, payload.get("message") or {}),
            trigger=Turn.Trigger.CUSTOMER,
            title=str(ticket.get("subject", ""))[:300],
            customer=str(ticket.get("customer_email", "")),
            context=_context(ticket),
        )


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
