"""The desk's API token page: a person makes and revokes their own tokens.

A new token is shown once, in the answer to the POST that made it (never
stored in clear, never in a URL or a redirect); a token carries its
user's desk permissions (api/tokens.py::Principal).
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from agents.errors import ServiceError
from api import tokens
from api.models import ApiToken


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    context: dict = {}
    status = 200
    if request.method == "POST":
        try:
            row, secret = tokens.token_create(user=request.user, name=request.POST.get("name", ""))
            context.update(created=row, secret=secret)
        except ServiceError as exc:
            context["error"], status = exc.message, exc.status
    context["tokens"] = tokens.tokens_for_user(user=request.user)
    return render(request, "api/tokens.html", context, status=status)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    context: dict = {}
    status = 200
    try:
        row = tokens.token_revoke(user=request.user, token_id=token_id)
        context["notice"] = f"Token {row.prefix}… ({row.name}) is revoked."
    except ApiToken.DoesNotExist:
        raise Http404("no such token") from None
    except ServiceError as exc:
        context["error"], status = exc.message, exc.status
    context["tokens"] = tokens.tokens_for_user(user=request.user)
    return render(request, "api/tokens.html", context, status=status)
