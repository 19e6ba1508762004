"""Logging in: the lockout page, and counting failures and lockouts.

Two limits, so that nobody can lock out everyone else:

- per user name *and* address (django-axes, settings AXES_*): the person
  guessing at a name from one place is locked there; the same user logs in
  from elsewhere, and others log in from the same address (an office, a
  VPN's exit);
- per address alone, higher and slower (AGENTDESK_LOGIN_ADDRESS_LIMIT
  failures within AGENTDESK_LOGIN_ADDRESS_WINDOW_S, counted in the shared
  cache): one address trying many names is stopped too.

A locked-out login gets a page that says what happened and when to try
again (429 with Retry-After), not a bare 403, and each failure and lockout
is counted in /metrics and audited.
"""

from __future__ import annotations

import math
import time
from datetime import timedelta
from typing import Any

from axes.helpers import get_cool_off
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agents.observability import metrics


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the answer to a login while locked out."""
    cool_off = get_cool_off(request) or timedelta(0)
    return _page(request, max(1, math.ceil(cool_off.total_seconds())))


def _page(request: HttpRequest, seconds: int) -> HttpResponse:
    context = {"minutes": max(1, math.ceil(seconds / 60)), "seconds": seconds}
    response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response


def _address_key(request: HttpRequest) -> str:
    return f"login-failures:{request.META.get('REMOTE_ADDR', '')}"


class LoginView(auth_views.LoginView):
    """Django's login, refused while the client's address is over its limit."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        key = _address_key(request)
        counted = cache.get_many([key, key + ":ends"])
        if (counted.get(key) or 0) >= settings.AGENTDESK_LOGIN_ADDRESS_LIMIT:
            ends = counted.get(key + ":ends") or time.time()
            return _page(request, max(1, math.ceil(ends - time.time())))
        return super().post(request, *args, **kwargs)


def on_login_failed(sender: Any, credentials: dict, request: HttpRequest | None = None, **kw):
    metrics.LOGIN_FAILURES.inc()
    if request is None:
        return
    key = _address_key(request)
    # A window from the address's first failure (add leaves a running one as it is).
    window = settings.AGENTDESK_LOGIN_ADDRESS_WINDOW_S
    if cache.add(key, 0, timeout=window):
        cache.set(key + ":ends", time.time() + window, timeout=window)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between the two calls
        return
    if count == settings.AGENTDESK_LOGIN_ADDRESS_LIMIT:
        on_locked_out(
            sender,
            request,
            username="",
            ip_address=request.META.get("REMOTE_ADDR"),
            scope="address",
        )


def on_locked_out(
    sender: Any, request: HttpRequest | None = None, username: str | None = None, **kwargs: Any
) -> None:
    from agents.audit import audit_record

    metrics.LOGIN_LOCKOUTS.inc()
    audit_record(
        kind="login.locked_out",
        request=request,
        actor=username or "",
        detail={
            "ip_address": kwargs.get("ip_address"),
            "scope": kwargs.get("scope", "user+address"),
        },
    )


def connect() -> None:
    from axes.signals import user_locked_out
    from django.contrib.auth.signals import user_login_failed

    user_login_failed.connect(on_login_failed, dispatch_uid="dashboard.auth.failed")
    user_locked_out.connect(on_locked_out, dispatch_uid="dashboard.auth.locked_out")
