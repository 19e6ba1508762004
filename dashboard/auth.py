"""Logging in: the lockout page, and counting failures and lockouts.

Throttling itself is django-axes (settings: AXES_*); this module is the part
people and operators see: a locked-out login gets a page that says what
happened and when to try again (429 with Retry-After), not a bare 403, and
each failure and lockout is counted in /metrics.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from axes.helpers import get_cool_off
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agents.observability import metrics


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the answer to a login while locked out."""
    cool_off = get_cool_off(request) or timedelta(0)
    seconds = max(1, math.ceil(cool_off.total_seconds()))
    context = {"minutes": max(1, math.ceil(seconds / 60)), "seconds": seconds}
    response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response


def on_login_failed(sender: Any, credentials: dict, request: HttpRequest | None = None, **kw):
    metrics.LOGIN_FAILURES.inc()


def on_locked_out(
    sender: Any, request: HttpRequest | None = None, username: str | None = None, **kwargs: Any
) -> None:
    from agents.audit import audit_record

    metrics.LOGIN_LOCKOUTS.inc()
    audit_record(
        kind="login.locked_out",
        request=request,
        actor=username or "",
        detail={"ip_address": kwargs.get("ip_address")},
    )


def connect() -> None:
    from axes.signals import user_locked_out
    from django.contrib.auth.signals import user_login_failed

    user_login_failed.connect(on_login_failed, dispatch_uid="dashboard.auth.failed")
    user_locked_out.connect(on_locked_out, dispatch_uid="dashboard.auth.locked_out")
