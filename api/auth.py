"""Bearer tokens for the API: a person's token or the service token."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from agents.errors import Forbidden
from api import tokens
from api.tokens import Principal


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Principal | None:
        return tokens.authenticate(token)


def need(request: HttpRequest, perm: str) -> Principal:
    """The request's principal, if it holds `perm` (else 403)."""
    principal: Principal = request.auth
    if not principal.has_perm(perm):
        raise Forbidden(f"this token may not do that (needs {perm})")
    return principal


def reader(request: HttpRequest):
    """The user whose view a read takes (the service token reads nothing)."""
    return need(request, "agents.view_session").user
