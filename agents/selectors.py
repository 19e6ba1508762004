"""Reads on sessions, for views, consumers and commands.

Every read a desk page makes goes through here, and each returns in a fixed
number of queries however many rows it shows (joins and `__in` lookups, never
a query per row): the pages are measured with 10,000 sessions and 500-event
sessions (bench/desk_scale.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Case, Count, IntegerField, Q, QuerySet, Value, When

from agents.models import Event, FollowUp, Job, Message, Session, SessionRuntime, ToolCall, Turn

S = Session.Status

# What needs a human comes first: an unknown outcome, then a pending
# decision, then a failure; then work in progress (a parent waiting on its
# sub-agent is work in progress: no person is needed), then the quiet ones.
NEEDS_HUMAN_ORDER = [
    *(S.IN_DOUBT, S.WAITING, S.PAUSED, S.FAILED),
    *(S.RUNNING, S.WAITING_SUBAGENT, S.IDLE, S.CANCELED),
]
NEEDS_HUMAN = frozenset({S.IN_DOUBT, S.WAITING, S.PAUSED, S.FAILED})


def sessions_for_user(*, user: AbstractBaseUser) -> QuerySet[Session]:
    """Every session the user may see (all of them, for any desk role)."""
    if not user.is_authenticated:
        return Session.objects.none()
    return Session.objects.order_by("-updated_at")


def events_after(*, session_id: int, seq: int = 0, limit: int = 1000) -> QuerySet[Event]:
    return _events(session_id).filter(seq__gt=seq).order_by("seq")[:limit]


def _events(session_id: int) -> QuerySet[Event]:
    """A session's events as the timeline, replay and history show them.
    Transcript rows ride on some events; those are read through Message."""
    return Event.objects.filter(session_id=session_id).defer("content")


# --- The sessions list -----------------------------------------------------------


def sessions_list(*, user: AbstractBaseUser, status: str = "", q: str = "") -> QuerySet[Session]:
    """Sessions matching the filters, what needs a human first, then newest."""
    rows = sessions_search(sessions_for_user(user=user), q)
    if status:
        rows = rows.filter(status=status)
    priority = Case(
        *(When(status=s, then=Value(i)) for i, s in enumerate(NEEDS_HUMAN_ORDER)),
        default=Value(len(NEEDS_HUMAN_ORDER)),
        output_field=IntegerField(),
    )
    return (
        rows.select_related("runtime")
        .annotate(priority=priority)
        .order_by("priority", "-updated_at", "-id")
    )


def session_counts(*, user: AbstractBaseUser, q: str = "") -> dict[str, int]:
    """Sessions per status (for the filter tabs), in one GROUP BY."""
    rows = sessions_search(sessions_for_user(user=user), q).order_by()
    counts = {s: 0 for s in NEEDS_HUMAN_ORDER}
    for row in rows.values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    return counts


def sessions_search(rows: QuerySet[Session], q: str) -> QuerySet[Session]:
    q = q.strip()
    if not q:
        return rows
    return rows.filter(Q(key__icontains=q) | Q(customer__icontains=q) | Q(title__icontains=q))


# --- One session -------------------------------------------------------------------


@dataclass
class TurnView:
    """A turn with what the page shows of it: its replies and their tool calls."""

    turn: Turn
    replies: list[dict[str, Any]] = field(default_factory=list)  # see _reply()
    calls: list[ToolCall] = field(default_factory=list)


@dataclass
class SessionView:
    session: Session
    runtime: SessionRuntime
    last_seq: int  # the page shows the state as of this event (read first)
    turns: list[TurnView]
    earlier_turns: int  # turns not shown (older than the ones shown)
    events: list[Event]
    earlier_events: int


def session_get(*, user: AbstractBaseUser, session_id: int) -> Session | None:
    return sessions_for_user(user=user).select_related("runtime").filter(pk=session_id).first()


def session_detail(
    *, user: AbstractBaseUser, session_id: int, max_turns: int | None = 20, max_events: int = 200
) -> SessionView | None:
    """Everything the session page shows, in six queries whatever its size.

    The session row (with its last_seq) is read first: the page then says
    "this is the state as of seq N", and a viewer replays from N, so a step
    that commits while the page is being built is shown twice at worst (the
    replay re-renders by stable id), never missed.
    """
    session = session_get(user=user, session_id=session_id)
    if session is None:
        return None
    runtime = session.runtime
    turns = list(Turn.objects.filter(session=session).order_by("-number")[:max_turns])  # None: all
    turns.reverse()
    earlier_turns = turns[0].number - 1 if turns else 0
    views = turn_views(session_id=session.id, turns=turns)
    events = list(_events(session.id).order_by("-seq")[:max_events])
    events.reverse()
    earlier = events[0].seq - 1 if events else 0
    return SessionView(session, runtime, runtime.last_seq, views, earlier_turns, events, earlier)


def turns_by_id(*, session_id: int, turn_ids: Iterable[int]) -> list[TurnView]:
    """Turns of one session re-rendered after their events (consumers)."""
    turns = list(
        Turn.objects.filter(session_id=session_id, pk__in=list(turn_ids)).order_by("number")
    )
    return turn_views(session_id=session_id, turns=turns)


# Functions that attach what a feature shows about a batch of tool calls
# (approvals registers itself at start: each call's `approval_view`), so a
# page with many calls reads it in a fixed number of queries and agents
# import nothing of the apps built on them.
CALL_DECORATORS: list = []


def turn_views(*, session_id: int, turns: list[Turn]) -> list[TurnView]:
    """Attach replies, tool calls, results and approvals: three queries."""
    if not turns:
        return []
    ids = [t.id for t in turns]
    messages = list(
        Message.objects.filter(session_id=session_id, turn_id__in=ids).order_by("position")
    )
    # Not the program snapshots of inner steps: state for the runtime, kilobytes each.
    calls = list(
        ToolCall.objects.filter(session_id=session_id, turn_id__in=ids)
        .defer("snapshot")
        .order_by("id")
    )
    _decorate(calls, turn_ids=ids)
    results = {m.position: m for m in messages if m.role == "user"}
    by_use_id = {}
    for call in calls:
        call.result_text = _result_text(results.get(call.result_position))
        by_use_id[call.tool_use_id] = call
    views = {t.id: TurnView(t) for t in turns}
    _nest_inner_steps(calls)
    for call in calls:
        if call.parent_id is None:  # an inner step is shown under its call
            views[call.turn_id].calls.append(call)
    for message in messages:
        if message.role == "assistant":
            views[message.turn_id].replies.append(_reply(message, by_use_id))
    return [views[t.id] for t in turns]


def _nest_inner_steps(calls: list[ToolCall]) -> None:
    """Each call's inner steps (a Code Mode program's host calls), in order,
    as `call.inner_steps`; they are rows of the same turn, read above."""
    by_id = {call.id: call for call in calls}
    for call in calls:
        call.inner_steps = []
    for call in sorted(calls, key=lambda c: c.step or 0):
        parent = by_id.get(call.parent_id) if call.parent_id else None
        if parent is not None:
            parent.inner_steps.append(call)


def _reply(message: Message, calls: dict[str, ToolCall]) -> dict[str, Any]:
    """An assistant message as a list of parts: text, or a tool call."""
    parts = []
    for block in message.content:
        if block.get("type") == "text":
            parts.append({"text": block.get("text", "")})
        elif block.get("type") == "tool_use":
            parts.append({"call": calls.get(block.get("id")), "block": block})
    return {"position": message.position, "parts": parts, "at": message.created_at}


def _result_text(message: Message | None) -> str | None:
    if message is None:
        return None
    for block in message.content:
        if block.get("type") == "tool_result":
            content = block.get("content", "")
            if isinstance(content, list):  # content blocks rather than a string
                return "\n".join(str(b.get("text", b)) for b in content)
            return str(content)
    return None


def tool_call_get(*, user: AbstractBaseUser, session_id: int, tool_call_id: int) -> ToolCall | None:
    """A tool call, only through the session it belongs to (another session's
    id in the URL finds nothing)."""
    return (
        ToolCall.objects.filter(
            pk=tool_call_id,
            session_id=session_id,
            session__in=sessions_for_user(user=user),
        )
        .select_related("session")
        .first()
    )


def tool_call_view(*, tool_call_id: int) -> ToolCall:
    """One call with its result and approval, as turn_views() attaches them."""
    call = ToolCall.objects.get(pk=tool_call_id)
    result = None
    if call.result_position is not None:
        result = Message.objects.filter(
            session_id=call.session_id, position=call.result_position
        ).first()
    call.result_text = _result_text(result)
    call.inner_steps = list(
        ToolCall.objects.filter(parent_id=call.id).defer("snapshot").order_by("step")
    )
    for step in call.inner_steps:  # their results are on the rows (no transcript row)
        step.result_text, step.inner_steps = None, []
    _decorate([call, *call.inner_steps])
    return call


def tool_calls_with_steps(*, calls: list[ToolCall]) -> list[ToolCall]:
    """Each call's result (from the transcript) as `result_text` and its
    inner steps in order as `inner_steps`, in two queries for the batch."""
    if not calls:
        return calls
    session_id = calls[0].session_id
    positions = {c.result_position for c in calls if c.result_position is not None}
    results = Message.objects.filter(session_id=session_id, position__in=positions)
    by_position = {m.position: m for m in results}
    steps = (
        ToolCall.objects.filter(session_id=session_id, parent_id__in=[c.id for c in calls])
        .defer("snapshot")
        .order_by("step")
    )
    by_parent: dict[int, list[ToolCall]] = {}
    for step in steps:
        by_parent.setdefault(step.parent_id, []).append(step)
    for call in calls:
        call.result_text = _result_text(by_position.get(call.result_position))
        call.inner_steps = by_parent.get(call.id, [])
    return calls


def _decorate(calls: list[ToolCall], turn_ids: list[int] | None = None) -> None:
    """What the features show about these calls (an approval), all at once."""
    for call in calls:
        call.approval_view = None
    for decorate in CALL_DECORATORS:
        decorate(calls, turn_ids=turn_ids)


def history_events(
    *, session_id: int, kinds: Iterable[str] = (), after: int = 0, limit: int | None = 1000
) -> QuerySet[Event]:
    """A session's event log in seq order, optionally only some kinds
    (`turn` matches every `turn.*`)."""
    rows = _events(session_id).filter(seq__gt=after).order_by("seq")
    wanted = Q()
    for kind in kinds:
        wanted |= Q(kind=kind) | Q(kind__startswith=f"{kind}.")
    if wanted:
        rows = rows.filter(wanted)
    return rows[:limit] if limit is not None else rows


def history_turn_rows(*, session_id: int) -> QuerySet[Turn]:
    return (
        Turn.objects.filter(session_id=session_id)
        .select_related("started_by", "cancel_requested_by")
        .order_by("number")
    )


def history_turns(*, session_id: int) -> list[Turn]:
    return list(history_turn_rows(session_id=session_id))


def history_kind_counts(*, session_id: int) -> dict[str, int]:
    """Events per kind family (`turn`, `model`, `tool`...), for the filter."""
    counts: dict[str, int] = defaultdict(int)
    rows = Event.objects.filter(session_id=session_id).order_by().values("kind")
    for row in rows.annotate(n=Count("seq")):
        counts[row["kind"].split(".")[0]] += row["n"]
    return dict(sorted(counts.items()))


def history_tool_call_rows(*, session_id: int) -> QuerySet[ToolCall]:
    return ToolCall.objects.filter(session_id=session_id).order_by("id")


# --- Follow-ups, jobs, storage (issue 5) -------------------------------------------------


def followups_for_session(*, session_id: int, limit: int = 50) -> list:
    """A session's follow-ups: pending first (soonest first), then the latest others."""
    rows = FollowUp.objects.filter(session_id=session_id)
    pending = list(rows.filter(status=FollowUp.Status.PENDING).order_by("due_at", "id")[:limit])
    done = list(rows.exclude(status=FollowUp.Status.PENDING).order_by("-id")[:limit])
    return pending + done


def followup_get(*, user: AbstractBaseUser, session_id: int, followup_id: int):
    """A follow-up, only through the session it belongs to."""
    return FollowUp.objects.filter(
        pk=followup_id, session_id=session_id, session__in=sessions_for_user(user=user)
    ).first()


def jobs_list(*, user: AbstractBaseUser, status: str = "", limit: int = 100) -> list:
    if not user.is_authenticated:
        return []
    rows = Job.objects.select_related("created_by").order_by("-id")
    if status:
        rows = rows.filter(status=status)
    return list(rows[:limit])


def job_counts() -> dict[str, int]:
    counts = {s: 0 for s in Job.Status.values}
    for row in Job.objects.order_by().values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    return counts


STORAGE_SQL = """
SELECT 'transcript', count(*), coalesce(sum(pg_column_size(t.*)), 0)
    FROM agents_message t WHERE session_id = %(sid)s
UNION ALL SELECT 'events', count(*), coalesce(sum(pg_column_size(t.*)), 0)
    FROM agents_event t WHERE session_id = %(sid)s
UNION ALL SELECT 'tool calls', count(*), coalesce(sum(pg_column_size(t.*)), 0)
    FROM agents_toolcall t  -- found through its turns: no index on session_id
    WHERE turn_id IN (SELECT id FROM agents_turn WHERE session_id = %(sid)s)
UNION ALL SELECT 'turns', count(*), coalesce(sum(pg_column_size(t.*)), 0)
    FROM agents_turn t WHERE session_id = %(sid)s
UNION ALL SELECT 'archives', count(*), coalesce(sum(pg_column_size(t.*)), 0)
    FROM agents_sessionarchive t WHERE session_id = %(sid)s
"""


def session_storage(*, session_id: int) -> list[tuple[str, int, int]]:
    """(part, rows, bytes) of one session: the on-disk size of its rows as
    Postgres stores them (pg_column_size of the whole row, after TOAST
    compression; without page and index overhead). Each part is an index
    scan on session_id: for the session page and the admin, not the list."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(STORAGE_SQL, {"sid": session_id})
        return [(part, int(n), int(size)) for part, n, size in cursor.fetchall()]
