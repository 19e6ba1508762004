"""Approvals: durable decisions bound to one tool call and its exact arguments."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Approval(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        DENIED = "denied"
        EXPIRED = "expired"
        CANCELED = "canceled"

    class Decision(models.TextChoices):
        APPROVE = "approve"
        DENY = "deny"

    tool_call = models.OneToOneField(
        "agents.ToolCall", on_delete=models.CASCADE, related_name="approval"
    )
    session = models.ForeignKey("agents.Session", on_delete=models.CASCADE, related_name="+")
    turn = models.ForeignKey("agents.Turn", on_delete=models.CASCADE, related_name="approvals")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    policy = models.CharField(max_length=64)  # the rule that asked for it
    policy_detail = models.CharField(max_length=300, blank=True)  # why, in words
    tool_name = models.CharField(max_length=128)
    # The exact arguments the approver sees; a decision must name their hash,
    # so a decision made on a screen showing other arguments is refused.
    arguments = models.JSONField()
    arguments_hash = models.CharField(max_length=64)
    edited_arguments = models.JSONField(null=True, blank=True)
    reasoning = models.TextField(blank=True)  # the model's text before the call
    requested_by = models.ForeignKey(  # who started the turn (separation of duties)
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "approved", "denied", "expired", "canceled"]),
                name="approval_status_valid",
            ),
        ]
        indexes = [
            models.Index(
                fields=["created_at"], condition=Q(status="pending"), name="approval_pending_idx"
            )
        ]
        permissions = [("decide_approval", "Can approve or deny agent side effects")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.status}"

    @property
    def is_pending(self) -> bool:
        return self.status == self.Status.PENDING

    @property
    def effective_arguments(self) -> dict:
        return self.edited_arguments if self.edited_arguments is not None else self.arguments


def arguments_hash(arguments: dict) -> str:
    """A stable fingerprint of exact arguments (key order does not matter)."""
    import hashlib
    import json

    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Decision(models.Model):
    """One decision on an approval, as it was made: append-only in the
    database (trigger, approvals migration 0002), kept when the approval,
    its session or the deciding user goes (no foreign-key constraints to
    cascade through). The approval row holds the current state; this is the
    record of who did what, from where, and on which arguments."""

    class Kind(models.TextChoices):
        APPROVED = "approved"
        DENIED = "denied"
        EXPIRED = "expired"

    approval_id = models.BigIntegerField()
    session_id = models.BigIntegerField()
    tool_call_id = models.BigIntegerField()
    tool_name = models.CharField(max_length=128)
    decision = models.CharField(max_length=12, choices=Kind.choices)
    actor_id = models.BigIntegerField(null=True, blank=True)  # None: the system (expiry)
    actor = models.CharField(max_length=150)  # the username at the time, or "system"
    role = models.CharField(max_length=100, blank=True)  # the actor's desk roles at the time
    client_address = models.GenericIPAddressField(null=True, blank=True)
    arguments_before = models.JSONField()  # what the approver was shown
    arguments_after = models.JSONField(null=True, blank=True)  # what runs, when edited
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["approval_id"], name="decision_approval_idx")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.decision} by {self.actor}"
