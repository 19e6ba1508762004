"""The desk's pages. Thin: parse, call a selector or service, render."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agents.selectors import sessions_for_user


@login_required
def sessions(request: HttpRequest) -> HttpResponse:
    rows = sessions_for_user(user=request.user)[:200]
    return render(request, "dashboard/sessions.html", {"sessions": rows})
