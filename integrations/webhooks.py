"""Outbound webhooks: subscriptions, and sending the outbox.

Sending is at least once: a delivery is leased (its next_attempt_at moved
past the HTTP timeout) in a short transaction, sent outside any transaction,
and its outcome recorded in another; a worker that dies mid-send leaves the
lease to expire and the delivery is sent again with the same webhook-id, by
which a receiver drops the repeat (Standard Webhooks). A failed attempt is
retried with exponential backoff; after AGENTDESK_WEBHOOK_MAX_ATTEMPTS the
delivery is dead and waits for a person's re-send.

A target must be one an admin may send to (integrations/egress.py): checked
when subscribed, and again at every attempt, which sends to the very
address it checked. The delivery log keeps each attempt's status and
timing, never the receiver's reply (it could be an internal page).
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import time
from datetime import timedelta
from typing import Any

import urllib3
from celery import current_app
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from agents.backoff import backoff_s
from agents.errors import Conflict, Invalid
from integrations import egress
from integrations.models import EVENT_TYPES, WebhookAttempt, WebhookDelivery, WebhookSubscription

log = logging.getLogger(__name__)
D = WebhookDelivery.Status


# --- Subscriptions (admins, in the desk) ----------------------------------------


def subscription_create(
    *, url: str, event_types: list[str], description: str = "", user: AbstractBaseUser
) -> WebhookSubscription:
    egress.resolve(url)  # refused now, not first at delivery
    unknown = sorted(set(event_types) - set(EVENT_TYPES))
    if unknown or not event_types:
        raise Invalid(f"choose event types among {', '.join(EVENT_TYPES)}")
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    return WebhookSubscription.objects.create(
        url=url.strip(),
        description=description.strip()[:200],
        secret=secret,
        event_types=sorted(set(event_types)),
        created_by=user,
    )


def subscription_set_active(*, subscription_id: int, active: bool) -> WebhookSubscription:
    updated = WebhookSubscription.objects.filter(pk=subscription_id).update(is_active=active)
    if not updated:
        raise WebhookSubscription.DoesNotExist("no such subscription")
    return WebhookSubscription.objects.get(pk=subscription_id)


def delivery_resend(*, delivery_id: int) -> WebhookDelivery:
    """Send a delivery again from the start (a dead one, or one sent already)."""
    with transaction.atomic():
        delivery = WebhookDelivery.objects.select_for_update().get(pk=delivery_id)
        if delivery.status == D.PENDING:
            raise Conflict("this delivery is already on its way", current=delivery.status)
        delivery.status, delivery.attempts = D.PENDING, 0
        delivery.next_attempt_at, delivery.last_error = timezone.now(), ""
        delivery.save(update_fields=["status", "attempts", "next_attempt_at", "last_error"])
        # By name: the task module imports this one.
        transaction.on_commit(lambda: current_app.send_task("integrations.send_webhooks"))
    return delivery


# --- Sending ------------------------------------------------------------------------------


def deliveries_send(*, budget_s: float = 20.0, batch: int = 20) -> int:
    """Send what is due, for at most about `budget_s` (the task's slice)."""
    sent = 0
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        leased = _lease(batch)
        if not leased:
            break
        for delivery in leased:
            _attempt(delivery)
            sent += 1
    return sent


def _lease(batch: int) -> list[WebhookDelivery]:
    now = timezone.now()
    lease = timedelta(seconds=settings.AGENTDESK_WEBHOOK_TIMEOUT_S * 2 + 30)
    with transaction.atomic():
        # SKIP LOCKED: two workers sending at once take different rows.
        rows = list(
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .filter(status=D.PENDING, next_attempt_at__lte=now)
            .select_related("subscription")
            .order_by("next_attempt_at")[:batch]
        )
        WebhookDelivery.objects.filter(pk__in=[r.pk for r in rows]).update(
            next_attempt_at=now + lease
        )
    return rows


def signed_request(delivery: WebhookDelivery, now=None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one attempt, signed per Standard Webhooks."""
    now = now or timezone.now()
    body = json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False)
    signature = Webhook(delivery.subscription.secret).sign(delivery.message_id, now, body)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Agentdesk-Webhooks/1",
        "webhook-id": delivery.message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
    return body.encode(), headers


def _attempt(delivery: WebhookDelivery) -> None:
    if not delivery.subscription.is_active:
        _record(delivery, None, "the subscription is disabled", 0, final=True)
        return
    body, headers = signed_request(delivery)
    started = time.monotonic()
    code, error = None, ""
    try:
        # Resolved and checked now (the address may have changed since the
        # subscription), and the request goes to the address checked.
        target = egress.resolve(delivery.subscription.url)
    except egress.Refused as exc:
        _record(delivery, None, f"refused: {exc.message}", 0, final=True)
        return
    try:
        code = egress.post(target, body, headers, settings.AGENTDESK_WEBHOOK_TIMEOUT_S)
        if not 200 <= code < 300:
            error = f"HTTP {code}"  # a 3xx too: redirects are not followed
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        error = type(exc).__name__
    _record(delivery, code, error, int((time.monotonic() - started) * 1000))


def _record(
    delivery: WebhookDelivery, code: int | None, error: str, ms: int, *, final: bool = False
) -> None:
    now = timezone.now()
    with transaction.atomic():
        row = WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
        WebhookAttempt.objects.create(delivery=row, status_code=code, error=error, ms=ms)
        row.attempts += 1
        row.last_status_code, row.last_error = code, error
        if not error:
            row.status, row.delivered_at = D.SUCCEEDED, now
        elif final or row.attempts >= settings.AGENTDESK_WEBHOOK_MAX_ATTEMPTS:
            row.status = D.DEAD
            log.warning(
                "webhook %s to %s is dead: %s", row.message_id, delivery.subscription, error
            )
        else:
            row.next_attempt_at = now + timedelta(seconds=delivery_backoff_s(row.attempts))
        row.save()


def delivery_backoff_s(attempts: int) -> float:
    """Seconds before the next attempt after `attempts` failed ones, with up
    to 10% jitter (receivers that come back are not hit by every sender in
    the same second)."""
    return backoff_s(
        attempts,
        base=settings.AGENTDESK_WEBHOOK_BACKOFF_S,
        cap=settings.AGENTDESK_WEBHOOK_BACKOFF_MAX_S,
        jitter=0.1,
    )


def subscription_deliveries(*, subscription_id: int, limit: int = 100) -> list[dict[str, Any]]:
    rows = list(
        WebhookDelivery.objects.filter(subscription_id=subscription_id)
        .prefetch_related("log")
        .order_by("-id")[:limit]
    )
    return rows
