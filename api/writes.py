"""What every write through the API goes through, in this order: the
permission, the token's rate limit, the Idempotency-Key, the service call,
the audit row. Views stay one service call each."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.http import Http404, HttpRequest, HttpResponse

from agents.errors import ServiceError
from agents.transitions import IllegalTransition
from api import idempotency, ratelimit
from api.auth import need
from api.models import ApiAudit
from api.problems import problem
from api.renderers import json_response

log = logging.getLogger(__name__)


def write(perm: str, *, via: str = "rest") -> Callable:
    def decorate(view: Callable[..., tuple[int, Any]]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def run(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                principal = need(request, perm)
            except ServiceError as exc:
                return service_problem(exc)
            wait = ratelimit.retry_after(principal.rate_key)
            if wait:
                return problem(
                    429,
                    "too many writes with this token; retry after the given seconds",
                    slug="rate-limited",
                    headers={"Retry-After": str(wait)},
                )
            key = request.headers.get(idempotency.HEADER)
            response, replayed = idempotency.run(
                owner=principal.owner,
                key=key,
                request=request,
                call=lambda: _answer(view, request, args, kwargs),
            )
            audit(request, principal, response.status_code, key or "", replayed, via)
            return response

        return run

    return decorate


def _answer(view: Callable, request: HttpRequest, args: tuple, kwargs: dict) -> HttpResponse:
    try:
        status, body = view(request, *args, **kwargs)
    except (ServiceError, IllegalTransition, ObjectDoesNotExist, Http404) as exc:
        return service_problem(exc)
    return json_response(body, status)


def service_problem(exc: Exception) -> HttpResponse:
    """A service's refusal as a problem: 409 with the current state, 403, 400, 404."""
    if isinstance(exc, IllegalTransition):
        return problem(409, str(exc), slug="conflict", current=exc.current)
    if isinstance(exc, ObjectDoesNotExist | Http404):
        return problem(404, str(exc) if isinstance(exc, Http404) else "no such resource")
    slug = {409: "conflict", 403: "forbidden", 400: "invalid"}.get(exc.status, "")
    return problem(exc.status, exc.message, slug=slug, current=exc.current)


def audit(request, principal, status: int, key: str, replayed: bool, via: str) -> None:
    ApiAudit.objects.create(
        user=principal.user,
        token=principal.token,
        via=via,
        method=request.method[:8],
        path=request.path[:300],
        status=status,
        idempotency_key=key[:255],
        replayed=replayed,
    )
