"""A session's budget: an admin raises the session's spend limits, which
resumes a session its budget paused (agents/budgets.py)."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from agents import selectors, services
from agents.errors import ServiceError
from agents.transitions import IllegalTransition
from dashboard.views.common import back, desk_view, invalid, refused

RAISE = "agents.raise_budget"
HEAD = "dashboard/partials/_session_head.html"


class BudgetForm(forms.Form):
    # Blank is "no limit".
    max_total_tokens = forms.IntegerField(required=False, min_value=1, max_value=2**63 - 1)
    max_total_cost_usd = forms.DecimalField(
        required=False, min_value=Decimal("0.000001"), max_digits=12, decimal_places=6
    )


def _head(request: HttpRequest, session_id: int, **extra) -> dict:
    found = selectors.session_get(user=request.user, session_id=session_id)
    if found is None:
        raise Http404("no such session")
    return {"session": found, "runtime": found.runtime, **extra}


@require_POST
@desk_view(RAISE)
def session_raise_budget(request: HttpRequest, session_id: int) -> HttpResponse:
    context = _head(request, session_id)
    form = BudgetForm(request.POST)
    if not form.is_valid():
        return invalid(
            request,
            "A limit is a positive number of tokens or dollars, or blank for none.",
            partial=HEAD,
            context=context,
        )
    dollars = form.cleaned_data["max_total_cost_usd"]
    try:
        services.session_raise_budget(
            session_id=session_id,
            user=request.user,
            max_total_tokens=form.cleaned_data["max_total_tokens"],
            max_total_cost_micros=round(dollars * 1_000_000) if dollars is not None else None,
        )
    except (ServiceError, IllegalTransition) as exc:
        return refused(request, exc, partial=HEAD, context=context)
    if request.htmx:
        return render(request, HEAD, _head(request, session_id, notice="Budget updated."))
    return back(request, reverse("dashboard:session", args=[session_id]))
