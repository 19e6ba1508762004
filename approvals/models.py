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
    # Issue 19. Every column below has a database default: the runtime
    # inserts approval rows in raw SQL (agents/runtime/store/hot.py) that
    # names none of them.
    # Bumped by every change a decider must have seen (a vote, an edit, an
    # assignment, an escalation): a decision names the version it was made
    # on, and one made on an older card is refused with the current state.
    version = models.PositiveIntegerField(default=1, db_default=1)
    # 0: the policy's role decides; 1: escalated (expiry with the `escalate`
    # policy) to the admin role, with a fresh clock from clock_started_at.
    escalations = models.PositiveSmallIntegerField(default=0, db_default=0)
    clock_started_at = models.DateTimeField(null=True, blank=True)  # None: created_at
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    assigned_at = models.DateTimeField(null=True, blank=True)
    # What the card shows besides the arguments, for an inner step of a
    # running call (agents/gate.py::NeedsApproval): a program's source and its
    # calls so far, a screenshot and the form's fields. Bounded by the raiser.
    preview = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "approved", "denied", "expired", "canceled"]),
                name="approval_status_valid",
            ),
            models.CheckConstraint(condition=Q(escalations__lte=1), name="approval_escalated_once"),
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

    @property
    def effective_hash(self) -> str:
        return arguments_hash(self.effective_arguments)

    @property
    def clock_start(self):
        return self.clock_started_at or self.created_at


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


class Vote(models.Model):
    """One person's vote on an approval that needs a quorum (or the single
    decision of one that does not): durable, append-only (trigger, approvals
    migration 0003). A vote counts for the arguments it was cast on and for
    the round it was cast in (an escalation starts a new round); the same
    person votes at most once per round (the unique constraint is the
    refusal of a double vote, whatever races the form)."""

    class Choice(models.TextChoices):
        APPROVE = "approve"
        DENY = "deny"

    # No database foreign keys (as Decision): the rows are append-only, so
    # they stay when the approval, its session or the voter goes.
    approval = models.ForeignKey(
        Approval, on_delete=models.DO_NOTHING, db_constraint=False, related_name="votes"
    )
    round = models.PositiveSmallIntegerField(default=0)  # Approval.escalations when cast
    voter = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    actor = models.CharField(max_length=150)  # the username at the time
    role = models.CharField(max_length=100, blank=True)
    decision = models.CharField(max_length=8, choices=Choice.choices)
    reason = models.TextField(blank=True)
    arguments_hash = models.CharField(max_length=64)  # what the voter approved
    edited_arguments = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["approval", "round", "voter"], name="vote_once_per_round"
            ),
            models.CheckConstraint(
                condition=Q(decision__in=["approve", "deny"]), name="vote_decision_valid"
            ),
        ]
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.actor} {self.decision} approval {self.approval_id}"


class SessionAssignment(models.Model):
    """An approver took a whole session: its pending approvals, and the
    ones it asks for later, are theirs unless a card names someone else."""

    session = models.OneToOneField(
        "agents.Session", on_delete=models.CASCADE, related_name="approval_assignment"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    assigned_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"session {self.session_id} -> {self.user_id}"
