"""API tokens: made and revoked by their user, stored as a sha256 digest.

A token is `adk_<8 hex>_<43 url-safe chars>` (256 bits of secret): the
prefix finds nothing by itself and is there so that a person can tell their
tokens apart in the desk and in logs. A high-entropy secret needs no slow
hash (no dictionary to guess from), so sha256 of the whole token is the
lookup key, as GitHub and Stripe do.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agents.errors import Conflict, Invalid
from api.models import ApiToken

PREFIX = "adk_"
# What the shared service token may do, and nothing else.
SERVICE_PERMS = frozenset({"agents.post_message"})


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_create(*, user: AbstractBaseUser, name: str) -> tuple[ApiToken, str]:
    """A new token for the user: (the row, the token shown once)."""
    name = name.strip()
    if not name or len(name) > 100:
        raise Invalid("a token needs a name of at most 100 characters")
    visible = f"{PREFIX}{secrets.token_hex(4)}"
    token = f"{visible}_{secrets.token_urlsafe(32)}"
    row = ApiToken.objects.create(user=user, name=name, prefix=visible, digest=digest(token))
    return row, token


def token_revoke(*, user: AbstractBaseUser, token_id: int) -> ApiToken:
    """Revoke one of the user's own tokens (another user's is not found)."""
    with transaction.atomic():
        row = ApiToken.objects.select_for_update().get(pk=token_id, user=user)
        if row.revoked_at is not None:
            raise Conflict("this token is already revoked", current="revoked")
        row.revoked_at = timezone.now()
        row.save(update_fields=["revoked_at"])
    return row


def tokens_for_user(*, user: AbstractBaseUser) -> list[ApiToken]:
    return list(ApiToken.objects.filter(user=user))


@dataclass(frozen=True)
class Principal:
    """Who a request speaks for: a user through one of their tokens, or the
    service token (no user, only SERVICE_PERMS)."""

    user: AbstractBaseUser | None
    token: ApiToken | None = None
    service_perms: frozenset[str] = field(default_factory=frozenset)

    @property
    def owner(self) -> str:
        return f"user:{self.user.pk}" if self.user is not None else "service"

    @property
    def rate_key(self) -> str:
        return f"token:{self.token.pk}" if self.token is not None else "service"

    def has_perm(self, perm: str) -> bool:
        if self.user is None:
            return perm in self.service_perms
        # A person's token may post messages wherever they may operate sessions.
        if perm == "agents.post_message":
            perm = "agents.operate_session"
        return self.user.is_active and self.user.has_perm(perm)


def authenticate(token: str) -> Principal | None:
    """The principal for a bearer token, or None (unknown, revoked, inactive)."""
    service = settings.AGENTDESK_API_TOKEN
    if service and hmac.compare_digest(service.encode(), token.encode()):
        return Principal(user=None, service_perms=SERVICE_PERMS)
    if not token.startswith(PREFIX) or len(token) > 200:
        return None
    row = (
        ApiToken.objects.select_related("user")
        .filter(digest=digest(token), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if row is None:
        return None
    now = timezone.now()
    if row.last_used_at is None or (now - row.last_used_at).total_seconds() > 60:
        # At most one write a minute per token: "last used" is for people, not a log.
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return Principal(user=row.user, token=row)
