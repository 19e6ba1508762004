"""Sessions, their turns and tool calls; messages, cancel and resume."""

from typing import Literal

from django.http import Http404, HttpRequest
from ninja import Query, Router

from agents import selectors, services
from agents.models import Session, ToolCall, Turn
from api import pagination
from api.auth import reader
from api.routes.common import READ_ERRORS, WRITE_ERRORS
from api.schemas import (
    NO_NUL,
    Accepted,
    MessageIn,
    SessionOut,
    SessionPage,
    SessionStatusOut,
    ToolCallOut,
    ToolCallPage,
    TurnPage,
)
from api.writes import write
from capabilities.codemode import CAPABILITY as CODE_MODE
from capabilities.codemode.view import program_view

router = Router(tags=["sessions"])
Status = Literal[tuple(Session.Status.values)]  # type: ignore[valid-type]


def _session(request: HttpRequest, session_id: int) -> Session:
    session = selectors.session_get(user=reader(request), session_id=session_id)
    if session is None:
        raise Http404("no such session")
    return session


@router.get("/sessions", response={200: SessionPage, **READ_ERRORS})
def sessions_list(
    request: HttpRequest,
    status: Status = None,
    q: str = Query("", max_length=200, pattern=NO_NUL, description="in key, customer or title"),
    profile: str = Query("", max_length=64, pattern=NO_NUL),
    cursor: int = pagination.Cursor,
    limit: int = pagination.Limit,
):
    """Sessions, newest first; filter by status, a search text, a profile."""
    rows = selectors.sessions_for_user(user=reader(request)).select_related("runtime")
    if status:
        rows = rows.filter(status=status)
    if profile:
        rows = rows.filter(profile=profile)
    if q.strip():
        rows = selectors.sessions_search(rows, q)
    return pagination.page(rows, field="id", cursor=cursor, limit=limit, descending=True)


@router.get("/sessions/by-key", response={200: SessionOut, **READ_ERRORS})
def session_by_key(
    request: HttpRequest, key: str = Query(..., min_length=1, max_length=200, pattern=NO_NUL)
):
    """The session of a domain key (`ticket:4812`)."""
    session = (
        selectors.sessions_for_user(user=reader(request))
        .select_related("runtime")
        .filter(key=key)
        .first()
    )
    if session is None:
        raise Http404("no session has this key")
    return session


@router.get("/sessions/{session_id}", response={200: SessionOut, **READ_ERRORS})
def session_get(request: HttpRequest, session_id: int = pagination.Id):
    return _session(request, session_id)


@router.get("/sessions/{session_id}/turns", response={200: TurnPage, **READ_ERRORS})
def turns_list(
    request: HttpRequest,
    session_id: int = pagination.Id,
    cursor: int = pagination.Cursor,
    limit: int = pagination.Limit,
):
    """A session's turns, oldest first."""
    session = _session(request, session_id)
    rows = Turn.objects.filter(session=session).select_related("started_by")
    return pagination.page(rows, field="number", cursor=cursor, limit=limit)


@router.get("/sessions/{session_id}/tool-calls", response={200: ToolCallPage, **READ_ERRORS})
def tool_calls_list(
    request: HttpRequest,
    session_id: int = pagination.Id,
    status: Literal[tuple(ToolCall.Status.values)] = None,  # type: ignore[valid-type]
    parent: int = Query(
        None, ge=0, le=pagination.MAX_KEY, description="only the inner steps of this call"
    ),
    cursor: int = pagination.Cursor,
    limit: int = pagination.Limit,
):
    """A session's tool calls, oldest first; a Code Mode program's host calls
    are among them, each with its `parent_id` and `step`."""
    session = _session(request, session_id)
    rows = ToolCall.objects.filter(session=session).defer("snapshot")
    if status:
        rows = rows.filter(status=status)
    if parent is not None:
        rows = rows.filter(parent_id=parent)
    found = pagination.page(rows, field="id", cursor=cursor, limit=limit)
    _with_programs(found["items"])
    return found


@router.get(
    "/sessions/{session_id}/tool-calls/{call_id}", response={200: ToolCallOut, **READ_ERRORS}
)
def tool_call_get(
    request: HttpRequest, session_id: int = pagination.Id, call_id: int = pagination.Id
):
    call = selectors.tool_call_get(
        user=reader(request), session_id=session_id, tool_call_id=call_id
    )
    if call is None:
        raise Http404("no such tool call in this session")
    _with_programs([call])
    return call


def _with_programs(calls: list) -> None:
    """A run_code call carries its program: source, host calls, result."""
    programs = [c for c in calls if c.name == CODE_MODE and c.parent_id is None]
    for call in selectors.tool_calls_with_steps(calls=programs):
        call.program = program_view(call)


@router.post("/messages", response={202: Accepted, **WRITE_ERRORS})
@write("agents.post_message")
def message_post(request: HttpRequest, body: MessageIn):
    """A message for the agent of a session (made on first contact): starts
    a turn, or queues one, as the session's message policy says."""
    turn = services.message_post(
        key=body.session_key, text=body.text, trigger=Turn.Trigger.API, user=request.auth.user
    )
    return 202, accepted(turn)


@router.post("/sessions/{session_id}/cancel", response={200: SessionStatusOut, **WRITE_ERRORS})
@write("agents.operate_session")
def session_cancel(request: HttpRequest, session_id: int = pagination.Id):
    """Cancel the session's open turns (409 when nothing is open)."""
    _session(request, session_id)
    session = services.turn_cancel(session_id=session_id, user=request.auth.user)
    return 200, SessionStatusOut(id=session.id, key=session.key, status=session.status)


@router.post("/sessions/{session_id}/resume", response={202: Accepted, **WRITE_ERRORS})
@write("agents.operate_session")
def session_resume(request: HttpRequest, session_id: int = pagination.Id):
    """Ask the agent to carry on after a failure or a cancel (409 while a turn is open)."""
    _session(request, session_id)
    turn = services.session_resume(session_id=session_id, user=request.auth.user)
    return 202, accepted(turn)


def accepted(turn: Turn) -> Accepted:
    return Accepted(
        session=turn.session.key,
        session_id=turn.session_id,
        turn=turn.number,
        turn_id=turn.id,
        status=turn.status,
    )
