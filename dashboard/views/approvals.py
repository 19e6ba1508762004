"""The approvals inbox: read a card, check an edit, decide."""

from __future__ import annotations

import re
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from agents import selectors
from agents.errors import ServiceError
from agents.transitions import IllegalTransition
from approvals import services
from approvals.models import Approval
from dashboard.edits import check_edit
from dashboard.inputs import parse_json_object
from dashboard.views.common import back, desk_view, invalid, rate_limited, refused

DECIDE = "approvals.decide_approval"
CARD = "approvals/partials/_card.html"
HASH = re.compile(r"^[0-9a-f]{64}$")


@require_GET
@never_cache
@desk_view(DECIDE)
def approvals(request: HttpRequest) -> HttpResponse:
    cards = selectors.approvals_pending(user=request.user)
    return render(request, "approvals/inbox.html", {"approvals": cards})


def _card_or_404(request: HttpRequest, approval_id: int) -> Approval:
    approval = selectors.approval_card(user=request.user, approval_id=approval_id)
    if approval is None:
        raise Http404("no such approval")
    return approval


@require_GET
@never_cache
@desk_view(DECIDE)
def approval_card(request: HttpRequest, approval_id: int) -> HttpResponse:
    approval = _card_or_404(request, approval_id)
    if request.htmx:
        return render(request, CARD, {"approval": approval})
    return render(request, "approvals/inbox.html", {"approvals": [approval], "single": True})


def _edited(raw: str) -> tuple[dict[str, Any] | None, str]:
    """The edited arguments as the approver typed them: (value, problem)."""
    if not raw.strip():
        return None, ""
    return parse_json_object(raw)  # size and depth checked before parsing


@require_POST
@desk_view(DECIDE)
@rate_limited("approval_decide", "AGENTDESK_DECISION_RATE")
def approval_decide(request: HttpRequest, approval_id: int) -> HttpResponse:
    approval = _card_or_404(request, approval_id)
    decision = request.POST.get("decision", "")
    reason = request.POST.get("reason", "").strip()[:4000]
    expected = request.POST.get("expected_hash", "")
    edited, problem = _edited(request.POST.get("edited", ""))
    if decision not in Approval.Decision.values:
        problem = "Choose approve or deny."
    elif not HASH.match(expected):
        # Never decide blind: the form carries the hash of what it showed.
        problem = "This form does not say which arguments it showed; reload the page."
    if problem:
        return invalid(request, problem, partial=CARD, context={"approval": approval})
    try:
        services.approval_decide(
            approval_id=approval.id,
            user=request.user,
            decision=decision,
            reason=reason,
            edited_input=edited if decision == Approval.Decision.APPROVE else None,
            expected_hash=expected,
            client_address=request.META.get("REMOTE_ADDR") or None,
        )
    except (ServiceError, IllegalTransition) as exc:
        fresh = _card_or_404(request, approval_id)
        return refused(request, exc, partial=CARD, context={"approval": fresh})
    if request.htmx:
        return render(request, CARD, {"approval": _card_or_404(request, approval_id)})
    return back(request, reverse("dashboard:approvals"))


@require_POST
@desk_view(DECIDE)
def approval_check(request: HttpRequest, approval_id: int) -> HttpResponse:
    """Validate an edit against the tool's schema and show what it changes.
    Changes nothing (a POST only because the arguments can be long)."""
    approval = _card_or_404(request, approval_id)
    edited, problem = _edited(request.POST.get("edited", ""))
    check = check_edit(approval, edited) if edited is not None else None
    context = {"approval": approval, "problem": problem, "check": check}
    status = 400 if problem or (check and check.problem) else 200
    return render(request, "approvals/partials/_edit_check.html", context, status=status)
