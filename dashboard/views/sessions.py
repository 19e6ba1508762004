"""Sessions: the list, one session, and what support staff do to a session."""

from __future__ import annotations

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from agents import selectors, services
from agents import stream as live_events
from agents.errors import ServiceError
from agents.models import Session, Turn
from agents.runtime import live
from agents.transitions import IllegalTransition
from dashboard import outcomes, timeline
from dashboard.inputs import bounded_int
from dashboard.views.common import back, desk_view, invalid, rate_limited, refused
from dashboard.views.features import session_ops_context

PAGE_SIZE = 100
VIEW, OPERATE = "agents.view_session", "agents.operate_session"


@require_GET
@never_cache
@desk_view(VIEW)
def sessions(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    if status not in Session.Status.values:
        status = ""
    q = request.GET.get("q", "").strip()[:200]
    counts = selectors.session_counts(user=request.user, q=q)
    total = counts.get(status, 0) if status else sum(counts.values())
    # Past the end (or past bigint): the last page, not an OFFSET SQL refuses.
    last = max(1, -(-total // PAGE_SIZE))
    page = bounded_int(request.GET.get("page"), default=1, lo=1, hi=last)
    start = (page - 1) * PAGE_SIZE
    rows = list(
        selectors.sessions_list(user=request.user, status=status, q=q)[start : start + PAGE_SIZE]
    )
    outcomes.attach(rows)  # what each last turn did: two queries for the page
    context = {
        "rows": rows,
        "counts": counts,
        "all_count": sum(counts.values()),
        "status": status,
        "q": q,
        "page": page,
        "total": total,
        "has_next": start + PAGE_SIZE < total,
        "needs_human": selectors.NEEDS_HUMAN,
    }
    if request.htmx:  # the live refresh asks for the list only
        return render(request, "dashboard/partials/_session_list.html", context)
    return render(request, "dashboard/sessions.html", context)


@require_GET
@never_cache
@desk_view(VIEW)
def session(request: HttpRequest, session_id: int) -> HttpResponse:
    # The latest turns by default (a long session's page stays quick); all on request.
    every = request.GET.get("turns") == "all"
    view = selectors.session_detail(
        user=request.user, session_id=session_id, max_turns=None if every else 20
    )
    if view is None:
        raise Http404("no such session")
    timeline.attach(view.session.id, view.turns)  # each turn's waterfall: one query
    stream = _live_text(view)
    return render(
        request,
        "dashboard/session.html",
        {
            "view": view,
            "session": view.session,
            "runtime": view.runtime,
            "stream": stream,
            "events": [live_events.event_dict(e) for e in view.events],
            # Follow-ups, storage, fork (dashboard/views/features.py).
            **session_ops_context(request, view.session, view.runtime.transcript_len),
        },
    )


def _live_text(view: selectors.SessionView) -> dict | None:
    """The model text streamed so far, for a page loaded mid-reply (read after
    the state: a reply recorded meanwhile is replayed and replaces it)."""
    turn_id = view.runtime.current_turn_id
    if turn_id is None or view.session.status != Session.Status.RUNNING:
        return None
    text = live.partial_text(view.session.id, turn_id)
    return {"turn_id": turn_id, "text": text, "length": len(text)} if text else None


def _session_or_404(request: HttpRequest, session_id: int) -> Session:
    found = selectors.session_get(user=request.user, session_id=session_id)
    if found is None:
        raise Http404("no such session")
    return found


def _head(request: HttpRequest, session_id: int, **extra) -> dict:
    found = _session_or_404(request, session_id)
    return {"session": found, "runtime": found.runtime, **extra}


class MessageForm(forms.Form):
    text = forms.CharField(max_length=20_000, strip=True)


@require_POST
@desk_view(OPERATE)
@rate_limited("session_message", "AGENTDESK_POST_RATE")
def session_message(request: HttpRequest, session_id: int) -> HttpResponse:
    found = _session_or_404(request, session_id)
    partial = "dashboard/partials/_message_form.html"
    context = {"session": found}
    form = MessageForm(request.POST)
    if not form.is_valid():
        return invalid(
            request,
            "Write a message first (at most 20,000 characters).",
            partial=partial,
            context=context,
        )
    try:
        turn = services.message_post(
            key=found.key,
            text=form.cleaned_data["text"],
            trigger=Turn.Trigger.STAFF,
            user=request.user,
        )
    except ServiceError as exc:
        return refused(request, exc, partial=partial, context=context)
    if request.htmx:
        return render(request, partial, {**context, "sent": turn})
    return back(request, reverse("dashboard:session", args=[found.id]))


@require_POST
@desk_view(OPERATE)
def session_cancel(request: HttpRequest, session_id: int) -> HttpResponse:
    _session_or_404(request, session_id)
    try:
        services.turn_cancel(session_id=session_id, user=request.user)
    except (ServiceError, IllegalTransition) as exc:
        return refused(
            request,
            exc,
            partial="dashboard/partials/_session_head.html",
            context=_head(request, session_id),
        )
    return _head_response(request, session_id, notice="Cancel requested.")


@require_POST
@desk_view(OPERATE)
def session_resume(request: HttpRequest, session_id: int) -> HttpResponse:
    _session_or_404(request, session_id)
    try:
        services.session_resume(session_id=session_id, user=request.user)
    except (ServiceError, IllegalTransition) as exc:
        return refused(
            request,
            exc,
            partial="dashboard/partials/_session_head.html",
            context=_head(request, session_id),
        )
    return _head_response(
        request, session_id, notice="Resumed: a new turn asks the agent to carry on."
    )


def _head_response(request: HttpRequest, session_id: int, notice: str) -> HttpResponse:
    if request.htmx:
        context = _head(request, session_id, notice=notice)
        return render(request, "dashboard/partials/_session_head.html", context)
    return back(request, reverse("dashboard:session", args=[session_id]))


RESOLUTIONS = ("retry", "succeeded", "failed")


@require_POST
@desk_view(OPERATE)
def toolcall_resolve(request: HttpRequest, session_id: int, call_id: int) -> HttpResponse:
    call = selectors.tool_call_get(user=request.user, session_id=session_id, tool_call_id=call_id)
    if call is None:
        raise Http404("no such tool call in this session")
    partial = "dashboard/partials/_toolcall.html"
    resolution = request.POST.get("resolution", "")
    note = request.POST.get("note", "").strip()[:2000]

    def context() -> dict:
        return {"call": selectors.tool_call_view(tool_call_id=call.id), "session": call.session}

    if resolution not in RESOLUTIONS:
        return invalid(
            request,
            f"resolution must be one of {', '.join(RESOLUTIONS)}",
            partial=partial,
            context=context(),
        )
    try:
        services.toolcall_resolve(
            tool_call_id=call.id, user=request.user, resolution=resolution, note=note
        )
    except (ServiceError, IllegalTransition) as exc:
        return refused(request, exc, partial=partial, context=context())
    if request.htmx:
        return render(request, partial, context())
    return back(request, reverse("dashboard:session", args=[session_id]))
