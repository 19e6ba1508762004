"""What every desk view shares: permission checks and refusals."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme

from agents.errors import Conflict, ServiceError
from agents.transitions import IllegalTransition


def desk_view(permission: str) -> Callable:
    """Log in first (anonymous: redirect to the login page), then the
    permission (missing: 403). Checked on every page and every POST."""

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.has_perm(permission):
                _audit_refusal(request, "permission.refused", f"needs {permission}", kwargs)
                raise PermissionDenied(f"needs {permission}")
            return view(request, *args, **kwargs)

        logged_in = login_required(checked)

        @wraps(view)
        def entry(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated and request.htmx:
                return _to_login(request)
            return logged_in(request, *args, **kwargs)

        return entry

    return decorate


def rate_limited(group: str, setting: str) -> Callable:
    """At most settings.<setting> (e.g. "30/m") POSTs per user to views of
    `group`, counted in the shared Redis cache (django-ratelimit's fixed
    windows); over it, 429 with Retry-After and nothing done. Goes inside
    desk_view: only a logged-in user with the permission is counted."""

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            from django.conf import settings
            from django_ratelimit.core import get_usage

            rate = getattr(settings, setting)
            usage = get_usage(
                request, group=group, key="user", rate=rate, method="POST", increment=True
            )
            if usage is not None and usage["should_limit"]:
                retry = max(1, int(usage["time_left"]))
                context = {"retry": retry, "rate": rate}
                response = render(request, "429.html", context, status=429)
                response["Retry-After"] = str(retry)
                return response
            return view(request, *args, **kwargs)

        return limited

    return decorate


def _audit_refusal(request: HttpRequest, kind: str, why: str, kwargs: dict[str, Any]) -> None:
    """A refused attempt is an append-only audit row (agents.AuditEntry)."""
    from agents.audit import audit_record

    ids = {k: v for k, v in kwargs.items() if isinstance(v, int)}
    audit_record(
        kind=kind,
        request=request,
        session_id=ids.get("session_id"),
        detail={"reason": why, "view": request.resolver_match.url_name, **ids},
    )


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: a forged (or stale) request is refused, audited,
    and told what to do; nothing was done."""
    from agents.audit import audit_record

    audit_record(kind="csrf.refused", request=request, detail={"reason": reason[:200]})
    return render(request, "403_csrf.html", {"reason": reason}, status=403)


def _to_login(request: HttpRequest) -> HttpResponse:
    """An htmx request from a tab whose login ended (logged out elsewhere,
    password changed): the whole tab goes to the login page, back to the page
    it showed afterwards. A plain redirect would be followed inside the XHR
    and the login form swapped into a card. Nothing was done."""
    from django.contrib.auth.views import redirect_to_login

    current = request.headers.get("HX-Current-URL", "")
    page = urlsplit(current).path if current else request.path
    if not url_has_allowed_host_and_scheme(page, allowed_hosts=None):
        page = "/"
    response = HttpResponse("Your session has ended; log in again.", status=401)
    response["HX-Redirect"] = redirect_to_login(page).url
    return response


def as_service_error(exc: Exception) -> ServiceError:
    """A move the transition table refuses is a conflict with the current state."""
    if isinstance(exc, IllegalTransition):
        return Conflict(str(exc), current=exc.current)
    assert isinstance(exc, ServiceError)
    return exc


def refused(
    request: HttpRequest,
    exc: Exception,
    *,
    partial: str,
    context: dict[str, Any],
) -> HttpResponse:
    """The service said no: the same partial, with the reason and the current
    state, and the service's status (409/403/400). Without htmx, a page."""
    error = as_service_error(exc)
    if error.status == 403:  # e.g. approving one's own turn's side effect
        kind = (
            "decision.refused"
            if "approval" in request.resolver_match.url_name
            else "operation.refused"
        )
        _audit_refusal(request, kind, error.message, request.resolver_match.kwargs)
    context = {**context, "error": error.message, "current": error.current}
    if request.htmx:
        return render(request, partial, context, status=error.status)
    return render(request, "dashboard/refused.html", context, status=error.status)


def invalid(request: HttpRequest, message: str, *, partial: str, context: dict[str, Any]):
    """A malformed request (the service was not called)."""
    from agents.errors import Invalid

    return refused(request, Invalid(message), partial=partial, context=context)


def back(request: HttpRequest, default: str) -> HttpResponseRedirect:
    """After a plain (non-htmx) POST: back where the form was, if it is ours."""
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = default
    response = HttpResponseRedirect(target)
    response.status_code = 303  # See Other: the browser GETs the page again
    return response
