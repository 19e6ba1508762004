"""What the consumers send: events, and the page fragments they change.

Synchronous (the ORM and templates); consumers call these through
database_sync_to_async. The fragments are the same partials the pages and
htmx responses use, rendered with autoescape, so a push carries no markup
that did not come from our templates. They depend on the viewer's
permissions only (never on who the viewer is), so viewers with the same
permissions share one rendering of a batch (consumers.shared_render).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.context_processors import PermWrapper
from django.contrib.auth.models import AbstractBaseUser
from django.template.loader import render_to_string
from django.urls import reverse

from agents import selectors
from agents.events import payload
from agents.models import Event, Session
from approvals.models import Approval
from dashboard import timeline

VIEW = "agents.view_session"
DECIDE = "approvals.decide_approval"
FRAGMENT_PERMS = ("agents.operate_session", "approvals.decide_approval", "agents.view_history")


def access_problem(user: AbstractBaseUser, permission: str, session_id: int | None = None) -> int:
    """0 when the user may subscribe; else a WebSocket close code
    (4401 not logged in, 4403 no permission, 4404 no such session)."""
    if not user.is_authenticated:
        return 4401
    if not user.has_perm(permission):
        return 4403
    if session_id is not None and selectors.session_get(user=user, session_id=session_id) is None:
        return 4404
    return 0


def perm_signature(user: AbstractBaseUser) -> tuple[bool, ...]:
    return tuple(user.has_perm(p) for p in FRAGMENT_PERMS)


def event_dict(event: Event) -> dict[str, Any]:
    """An event read back from the log, as a live push shows it (no transcript row)."""
    return payload(
        seq=event.seq,
        kind=event.kind,
        turn_id=event.turn_id,
        data=event.data,
        actor=event.actor,
        at=event.created_at.isoformat(),
    )


def lean(event: dict[str, Any]) -> dict[str, Any]:
    """An event as viewers get it: without the transcript content a live
    push carries along (the fragments show that, escaped)."""
    return {k: event.get(k) for k in ("seq", "kind", "turn_id", "data", "actor", "at")}


def events_from_db(session_id: int, after: int, limit: int) -> list[dict[str, Any]]:
    rows = selectors.events_after(session_id=session_id, seq=after, limit=limit)
    return [event_dict(e) for e in rows]


def session_swaps(
    session_id: int, events: list[dict[str, Any]], user: AbstractBaseUser
) -> list[dict[str, str]]:
    """The fragments a batch of events changes: the session header, each
    turn it touched (re-rendered whole, by stable id), a line per event.

    `target` is the element to replace; when the viewer has none yet (a new
    turn, a new event) it is appended to `into`.
    """
    perms = PermWrapper(user)
    session = Session.objects.select_related("runtime").get(pk=session_id)
    base = {"session": session, "runtime": session.runtime, "perms": perms}
    swaps = [
        {
            "target": "session-head",
            "html": render_to_string("dashboard/partials/_session_head.html", base),
        }
    ]
    turn_ids = {e["turn_id"] for e in events if e.get("turn_id")}
    views = selectors.turns_by_id(session_id=session_id, turn_ids=turn_ids)
    timeline.attach(session_id, views)
    for view in views:
        html = render_to_string("dashboard/partials/_turn.html", {**base, "tv": view})
        swaps.append({"target": f"turn-{view.turn.id}", "into": "turns", "html": html})
    for event in events:
        html = render_to_string("dashboard/partials/_event.html", {"event": event})
        swaps.append({"target": f"event-{event['seq']}", "into": "events", "html": html})
    return swaps


# A push stays far below Daphne's 1 MiB frame limit: a card whose HTML is
# bigger than PUSH_CARD_CHARS, or that would take a push past
# PUSH_FRAME_CHARS, goes as a reference ({"id", "created", "ref"}) the page
# fetches (the card's URL, as htmx asks for it) instead of its HTML.
PUSH_CARD_CHARS = 64_000
PUSH_FRAME_CHARS = 256_000


def approvals_delta(user: AbstractBaseUser, shown: set[int]) -> dict[str, list[dict[str, Any]]]:
    """What an inbox showing `shown` must add (new pending approvals, oldest
    first, rendered, or by reference when big) and remove (decided, expired
    or canceled since)."""
    pending = selectors.approvals_pending(user=user)
    add: list[dict[str, Any]] = []
    budget = PUSH_FRAME_CHARS
    for a in pending:
        if a.id in shown:
            continue
        card = {"id": a.id, "created": a.created_at.isoformat()}
        html = render_to_string(
            "approvals/partials/_card.html",
            {"approval": a, "perms": PermWrapper(user), "user": user},
        )
        if len(html) <= min(PUSH_CARD_CHARS, budget):
            card["html"], budget = html, budget - len(html)
        else:
            card["ref"] = reverse("dashboard:approval", args=[a.id])
        add.append(card)
    pending_ids = {a.id for a in pending}
    statuses = selectors.approvals_status(approval_ids=shown - pending_ids)
    remove = []
    for approval_id in sorted(shown - pending_ids):
        status, who, _ = statuses.get(approval_id, ("gone", "", 0))
        if status == Approval.Status.PENDING:
            continue  # still pending, beyond the inbox's first page
        remove.append({"id": approval_id, "status": status, "by": who})
    return {"add": add, "remove": remove}
