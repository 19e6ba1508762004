"""Outbound webhooks: subscriptions, and an outbox of deliveries.

A delivery row is written by a trigger on agents_event (see
migrations/0002_outbox_trigger.py) in the same transaction as the event it
describes: an event that commits has its deliveries, an event rolled back
has none, and the engine's own statements stay as they are.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

# Webhook event types, and the event-log kind each comes from.
EVENT_TYPES = {
    "approval.requested": "approval.requested",
    "approval.decided": "approval.decided",
    "approval.expired": "approval.expired",
    "turn.succeeded": "turn.succeeded",
    "turn.failed": "turn.failed",
    "tool.in_doubt": "tool.in_doubt",
    # A session budget crossed: budget.exceeded with action "paused".
    "session.paused": "budget.exceeded",
}


class WebhookSubscription(models.Model):
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    # "whsec_" + base64 of 32 random bytes (the Standard Webhooks format).
    secret = models.CharField(max_length=100)
    event_types = models.JSONField(default=list)  # a subset of EVENT_TYPES
    is_active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        permissions = [("manage_webhooks", "Can manage outbound webhooks")]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"  # due at next_attempt_at
        SUCCEEDED = "succeeded"
        DEAD = "dead"  # every attempt failed; waits for a re-send

    subscription = models.ForeignKey(
        WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries"
    )
    # webhook-id: the same on every attempt, so a receiver can drop repeats.
    message_id = models.CharField(max_length=100)
    event_type = models.CharField(max_length=40)
    session_id = models.BigIntegerField()
    seq = models.BigIntegerField()
    payload = models.JSONField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_status_code = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "message_id"], name="webhook_delivery_once"
            ),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "succeeded", "dead"]),
                name="webhook_delivery_status_valid",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="pending"),
                name="webhook_delivery_due_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.message_id} ({self.status})"


class WebhookAttempt(models.Model):
    """The delivery log: one row per HTTP attempt."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="log")
    at = models.DateTimeField(auto_now_add=True)
    status_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    ms = models.IntegerField(default=0)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.delivery_id} {self.status_code or self.error[:40]}"


class Notification(models.Model):
    """A person told that an approval waits (or is about to expire), on one
    channel. One row per (approval, kind, channel): each is sent once."""

    class Kind(models.TextChoices):
        REQUESTED = "requested"
        EXPIRING = "expiring"

    class Channel(models.TextChoices):
        EMAIL = "email"
        SLACK = "slack"

    class Status(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        SENT = "sent"
        FAILED = "failed"  # after its attempts; the approval is still in the inbox

    approval = models.ForeignKey(
        "approvals.Approval", on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=12, choices=Kind.choices)
    channel = models.CharField(max_length=12, choices=Channel.choices)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    attempts = models.IntegerField(default=0)
    recipients = models.JSONField(default=list, blank=True)  # emails, or the Slack channel
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["approval", "kind", "channel"], name="notification_once"
            ),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "sending", "sent", "failed"]),
                name="notification_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.channel} for approval {self.approval_id} ({self.status})"
