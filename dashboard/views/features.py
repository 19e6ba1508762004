"""The desk for work that outlives a turn (agents/features/): follow-ups, jobs,
forks, storage. (The /ops/ page is views/operations.py.)

Thin like the other views: permission, parse, one service call, a partial
(htmx) or a redirect back (a plain form post).
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from agents import selectors
from agents.errors import ServiceError
from agents.features import followups, forks, jobs
from agents.models import Job, Session
from dashboard.inputs import strict_int
from dashboard.views.common import back, desk_view, invalid, refused

VIEW, OPERATE = "agents.view_session", "agents.operate_session"
FORK = "agents.fork_session"


def session_ops_context(request: HttpRequest, session: Session, transcript_len: int) -> dict:
    """What the session page shows of follow-ups, storage and forking."""
    return {
        "followups": selectors.followups_for_session(session_id=session.id),
        "storage": selectors.session_storage(session_id=session.id),
        "fork_upto": transcript_len,
    }


# --- Follow-ups --------------------------------------------------------------------------


def _followups_partial(request: HttpRequest, session: Session, **extra) -> dict:
    rows = selectors.followups_for_session(session_id=session.id)
    return {"session": session, "followups": rows, **extra}


@require_POST
@desk_view(OPERATE)
def followup_cancel(request: HttpRequest, session_id: int) -> HttpResponse:
    found = selectors.session_get(user=request.user, session_id=session_id)
    if found is None:
        raise Http404("no such session")
    partial = "dashboard/partials/_followups.html"
    followup_id = strict_int(request.POST.get("followup_id"))
    if followup_id is None:
        return invalid(
            request, "Which follow-up?", partial=partial, context=_followups_partial(request, found)
        )
    row = selectors.followup_get(user=request.user, session_id=found.id, followup_id=followup_id)
    if row is None:
        raise Http404("no such follow-up in this session")
    try:
        followups.followup_cancel(followup_id=row.id, user=request.user)
    except ServiceError as exc:
        return refused(request, exc, partial=partial, context=_followups_partial(request, found))
    if request.htmx:
        context = _followups_partial(request, found, notice="Follow-up canceled.")
        return render(request, partial, context)
    return back(request, reverse("dashboard:session", args=[found.id]))


# --- Jobs --------------------------------------------------------------------------------


@require_GET
@never_cache
@desk_view(VIEW)
def jobs_page(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    if status not in Job.Status.values:
        status = ""
    context = {
        "jobs": selectors.jobs_list(user=request.user, status=status),
        "counts": selectors.job_counts(),
        "status": status,
    }
    return render(request, "dashboard/jobs.html", context)


@require_POST
@desk_view(OPERATE)
def job_retry(request: HttpRequest, job_id: int) -> HttpResponse:
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        raise Http404("no such job")
    partial = "dashboard/partials/_job.html"
    try:
        job = jobs.job_retry(job_id=job.id, user=request.user)
    except ServiceError as exc:
        return refused(request, exc, partial=partial, context={"job": _fresh(job.id)})
    if request.htmx:
        return render(request, partial, {"job": _fresh(job.id), "notice": "Queued again."})
    return back(request, reverse("dashboard:jobs"))


def _fresh(job_id: int) -> Job:
    return Job.objects.select_related("created_by").get(pk=job_id)


@require_POST
@desk_view(OPERATE)
def customer_retriage(request: HttpRequest, session_id: int) -> HttpResponse:
    """Queue a job that asks the agent to re-triage every open ticket of this
    session's customer (double-click safe: the open job is reused)."""
    found = selectors.session_get(user=request.user, session_id=session_id)
    if found is None:
        raise Http404("no such session")
    if not found.customer:
        context = {"session": found}
        return invalid(
            request,
            "This session has no customer.",
            partial="dashboard/partials/_retriage.html",
            context=context,
        )
    reason = request.POST.get("reason", "").strip()[:500]
    job, created = jobs.job_start(
        kind="retriage_customer",
        arguments={"customer": found.customer, "reason": reason},
        user=request.user,
    )
    if request.htmx:
        context = {"session": found, "job": job, "created": created}
        return render(request, "dashboard/partials/_retriage.html", context)
    return HttpResponseRedirect(reverse("dashboard:jobs"), status=303)


# --- Forks -------------------------------------------------------------------------------


@require_POST
@desk_view(FORK)
def session_fork(request: HttpRequest, session_id: int) -> HttpResponse:
    found = selectors.session_get(user=request.user, session_id=session_id)
    if found is None:
        raise Http404("no such session")
    partial = "dashboard/partials/_fork.html"
    context = {"session": found, "fork_upto": found.runtime.transcript_len}
    upto = strict_int(request.POST.get("upto"), lo=0, hi=2**31 - 1)  # a transcript position
    if upto is None:
        return invalid(request, "Give a transcript position.", partial=partial, context=context)
    try:
        fork = forks.session_fork(session_id=found.id, upto=upto, user=request.user)
    except ServiceError as exc:
        return refused(request, exc, partial=partial, context=context)
    target = reverse("dashboard:session", args=[fork.id])
    if request.htmx:  # go to the new session's page
        response = HttpResponse(status=204)
        response["HX-Redirect"] = target
        return response
    return HttpResponseRedirect(target, status=303)
