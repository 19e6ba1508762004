"""The machine API's own state: tokens, idempotency keys, and the audit of
every write made through it."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class ApiToken(models.Model):
    """A person's API token. Only the sha256 of the secret is kept (the token
    is shown once, when made); the prefix is what lists and logs show."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)  # adk_<8 hex>, shown in lists
    digest = models.CharField(max_length=64, unique=True)  # sha256 hex of the whole token
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class IdempotencyKey(models.Model):
    """A write's Idempotency-Key and the first response to it (Stripe's
    semantics). `owner` scopes keys to who sent them: a user's tokens share
    their keys, the service token has its own."""

    class State(models.TextChoices):
        IN_FLIGHT = "in_flight"
        DONE = "done"

    owner = models.CharField(max_length=40)  # "user:<id>" or "service"
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)  # sha256 of method, path and body
    state = models.CharField(max_length=12, choices=State.choices, default=State.IN_FLIGHT)
    status = models.PositiveSmallIntegerField(null=True)
    body = models.JSONField(null=True)
    content_type = models.CharField(max_length=60, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    locked_at = models.DateTimeField(
        auto_now_add=True
    )  # an in-flight row older than the lease is abandoned

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="idempotency_owner_key"),
            models.CheckConstraint(
                condition=Q(state__in=["in_flight", "done"]), name="idempotency_state_valid"
            ),
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created_idx")]

    def __str__(self) -> str:
        return f"{self.owner} {self.key} ({self.state})"


class ApiAudit(models.Model):
    """One row per write through the API or the MCP endpoint: who (the
    token's user), through which token, what, and the answer. The events the
    write caused carry the same username as their actor, as a desk action's do."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    via = models.CharField(max_length=8, default="rest")  # rest | mcp | legacy
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=300)
    status = models.PositiveSmallIntegerField()
    idempotency_key = models.CharField(max_length=255, blank=True)
    replayed = models.BooleanField(default=False)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["user", "-at"], name="apiaudit_user_at_idx")]

    def __str__(self) -> str:
        return f"{self.method} {self.path} {self.status}"
