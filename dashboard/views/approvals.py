"""The approvals inbox: read a card, check an edit, decide, take or give
back, approve several low-risk cards at once."""

from __future__ import annotations

import re
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from agents import selectors as agent_selectors
from agents.errors import Invalid, ServiceError
from agents.transitions import IllegalTransition
from approvals import assignment, services
from approvals import selectors as approval_selectors
from approvals.models import Approval
from dashboard.edits import check_edit
from dashboard.inputs import bounded_int, parse_json_object
from dashboard.views.common import back, desk_view, invalid, rate_limited, refused

DECIDE = "approvals.decide_approval"
CARD = "approvals/partials/_card.html"
BULK = "approvals/partials/_bulk.html"
HASH = re.compile(r"^[0-9a-f]{64}$")
ITEM = re.compile(r"^([0-9]{1,18}):([0-9]{1,9})$")  # "<approval id>:<card version>"


@require_GET
@never_cache
@desk_view(DECIDE)
def approvals(request: HttpRequest) -> HttpResponse:
    box = approval_selectors.inbox(
        user=request.user,
        view=request.GET.get("view", "all"),
        sort=request.GET.get("sort", "time_left"),
        page=bounded_int(request.GET.get("page"), default=1, lo=1, hi=1_000_000),
    )
    context = {
        "approvals": box.cards,
        "inbox": box,
        "views": approval_selectors.VIEWS,
        "sorts": approval_selectors.SORTS,
        "deciders": approval_selectors.deciders_for_reassign(),
    }
    return render(request, "approvals/inbox.html", context)


def _card_or_404(request: HttpRequest, approval_id: int) -> Approval:
    approval = approval_selectors.card(user=request.user, approval_id=approval_id)
    if approval is None:
        raise Http404("no such approval")
    return approval


def _card_context(request: HttpRequest, approval: Approval) -> dict[str, Any]:
    return {"approval": approval, "deciders": approval_selectors.deciders_for_reassign()}


@require_GET
@never_cache
@desk_view(DECIDE)
def approval_card(request: HttpRequest, approval_id: int) -> HttpResponse:
    approval = _card_or_404(request, approval_id)
    context = _card_context(request, approval)
    if request.htmx:
        return render(request, CARD, context)
    return render(
        request, "approvals/inbox.html", {**context, "approvals": [approval], "single": True}
    )


def _edited(raw: str) -> tuple[dict[str, Any] | None, str]:
    """The edited arguments as the approver typed them: (value, problem)."""
    if not raw.strip():
        return None, ""
    return parse_json_object(raw)  # size and depth checked before parsing


def _version(raw: str) -> int | None:
    return int(raw) if raw.isdigit() and len(raw) < 10 else None


@require_POST
@desk_view(DECIDE)
@rate_limited("approval_decide", "AGENTDESK_DECISION_RATE")
def approval_decide(request: HttpRequest, approval_id: int) -> HttpResponse:
    approval = _card_or_404(request, approval_id)
    decision = request.POST.get("decision", "")
    reason = request.POST.get("reason", "").strip()[:4000]
    expected = request.POST.get("expected_hash", "")
    # The card's version (the form always sends it); without one, the
    # argument hash alone guards the decision, as before issue 19.
    version = _version(request.POST.get("expected_version", ""))
    edited, problem = _edited(request.POST.get("edited", ""))
    if decision not in Approval.Decision.values:
        problem = "Choose approve or deny."
    elif not HASH.match(expected) or (request.POST.get("expected_version") and version is None):
        # Never decide blind: the form carries the hash of what it showed.
        problem = "This form does not say which arguments it showed; reload the page."
    if problem:
        return invalid(request, problem, partial=CARD, context=_card_context(request, approval))
    try:
        services.approval_decide(
            approval_id=approval.id,
            user=request.user,
            decision=decision,
            reason=reason,
            edited_input=edited if decision == Approval.Decision.APPROVE else None,
            expected_hash=expected,
            expected_version=version,
            client_address=request.META.get("REMOTE_ADDR") or None,
        )
    except (ServiceError, IllegalTransition) as exc:
        fresh = _card_or_404(request, approval_id)
        return refused(request, exc, partial=CARD, context=_card_context(request, fresh))
    return _done(request, approval_id)


def _done(request: HttpRequest, approval_id: int) -> HttpResponse:
    if request.htmx:
        return render(request, CARD, _card_context(request, _card_or_404(request, approval_id)))
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


@require_POST
@desk_view(DECIDE)
def approval_assign(request: HttpRequest, approval_id: int) -> HttpResponse:
    """Take (`action=take`), give back (`give_back`) or, for an admin,
    reassign (`reassign`, `to=<username>`) one card."""
    approval = _card_or_404(request, approval_id)
    action = request.POST.get("action", "")
    try:
        if action == "take":
            assignment.approval_take(approval_id=approval.id, user=request.user)
        elif action == "give_back":
            assignment.approval_give_back(approval_id=approval.id, user=request.user)
        elif action == "reassign":
            to = request.POST.get("to", "").strip()[:150]
            assignment.approval_reassign(approval_id=approval.id, user=request.user, to_username=to)
        else:
            raise Invalid("Choose take, give back or reassign.")
    except (ServiceError, IllegalTransition) as exc:
        fresh = _card_or_404(request, approval_id)
        return refused(request, exc, partial=CARD, context=_card_context(request, fresh))
    return _done(request, approval_id)


@require_POST
@desk_view(DECIDE)
def session_approvals_assign(request: HttpRequest, session_id: int) -> HttpResponse:
    """Take a whole session's approvals (`action=take`) or give them back."""
    if not agent_selectors.sessions_for_user(user=request.user).filter(pk=session_id).exists():
        raise Http404("no such session")
    action = request.POST.get("action", "")
    try:
        if action == "take":
            assignment.session_take(session_id=session_id, user=request.user)
        elif action == "give_back":
            assignment.session_give_back(session_id=session_id, user=request.user)
        else:
            raise Invalid("Choose take or give back.")
    except (ServiceError, IllegalTransition) as exc:
        return refused(request, exc, partial="approvals/partials/_refusal.html", context={})
    if request.htmx:
        done = "taken: its approvals are yours" if action == "take" else "given back"
        return render(request, "approvals/partials/_refusal.html", {"notice": f"Session {done}."})
    return back(request, reverse("dashboard:approvals") + "?view=mine")


def _bulk_items(request: HttpRequest) -> tuple[list[services.BulkItem], str]:
    items, seen = [], set()
    for raw in request.POST.getlist("item")[:500]:
        match = ITEM.match(raw)
        if not match:
            return [], "The selection is malformed; reload the page."
        approval_id, version = int(match.group(1)), int(match.group(2))
        if approval_id not in seen:
            seen.add(approval_id)
            items.append(services.BulkItem(approval_id, version))
    if not items:
        return [], "Select at least one approval (x, or the checkbox on a card)."
    return items, ""


@require_POST
@desk_view(DECIDE)
@rate_limited("approval_decide", "AGENTDESK_DECISION_RATE")
def approvals_bulk(request: HttpRequest) -> HttpResponse:
    """Two steps: without `confirm`, the confirmation listing the selected
    cards (nothing done); with it, approve them all or none."""
    items, problem = _bulk_items(request)
    shown = [
        a
        for i in items
        if (a := approval_selectors.card(user=request.user, approval_id=i.approval_id))
    ]
    context: dict[str, Any] = {"cards": shown, "items": items}
    if problem or len(shown) != len(items):
        context["error"] = problem or "Some of the selected approvals are gone; reload the page."
        return render(request, BULK, context, status=400)
    if request.POST.get("confirm") != "yes":
        return render(request, BULK, {**context, "confirming": True})
    try:
        services.approvals_bulk_approve(
            items=items,
            user=request.user,
            client_address=request.META.get("REMOTE_ADDR") or None,
        )
    except (ServiceError, IllegalTransition) as exc:
        fresh = [
            a
            for i in items
            if (a := approval_selectors.card(user=request.user, approval_id=i.approval_id))
        ]
        return refused(request, exc, partial=BULK, context={"cards": fresh, "items": items})
    done = [approval_selectors.card(user=request.user, approval_id=i.approval_id) for i in items]
    return render(request, BULK, {"cards": done, "items": items, "done": True})
