"""The statuses of turns, tool calls and sessions: the legal moves (one table
each) and the one writer of each status (STYLE.md, rule 1).

- `toolcall_move`, `turn_move`, `session_move` change a status on the ORM
  paths: they refuse an illegal move (IllegalTransition, which views turn
  into HTTP 409 with the current state) and save the row in the caller's
  transaction, which holds the session lock and writes the event that says
  why (toolcall_move takes it, the others append it to the caller's list).
- The hot path's statements (runtime/store/hot.py, claims.py, the turn a
  message queues in agents/services.py) change the same statuses in SQL,
  one round trip each: record_tool_result checks its move here before it is
  sent (`check_tool_move_from`); every module of such statements declares
  the moves they make (`sql_moves`), checked against these tables when it is
  imported, and their WHERE clauses name the from-states; the statements
  themselves are read by tests/agents/test_status_sql.py, which holds every
  move they can make to the tables and to the module's declaration.
- A session's status follows its turns; SESSION_MOVES says how: a session
  that is not in the middle of a turn (idle, failed, canceled) only starts
  one (running) or stays settled.

The database backs the choices with CheckConstraints (agents/models.py).
Approval statuses are the approvals app's (approvals/services.py).
"""

from __future__ import annotations

from typing import Any

from agents import events
from agents.events import EventSpec
from agents.models import Session, SessionRuntime, ToolCall, Turn

T = Turn.Status
C = ToolCall.Status
S = Session.Status

TURN_MOVES: dict[str, frozenset[str]] = {
    T.ACCEPTED: frozenset({T.RUNNING, T.CANCELED}),
    T.RUNNING: frozenset({T.WAITING, T.WAITING_SUBAGENT, T.SUCCEEDED, T.FAILED, T.CANCELED}),
    T.WAITING: frozenset({T.RESUMING, T.RUNNING, T.WAITING_SUBAGENT, T.FAILED, T.CANCELED}),
    T.WAITING_SUBAGENT: frozenset({T.RESUMING, T.RUNNING, T.WAITING, T.FAILED, T.CANCELED}),
    T.RESUMING: frozenset({T.RUNNING, T.WAITING, T.WAITING_SUBAGENT, T.FAILED, T.CANCELED}),
}

TOOL_MOVES: dict[str, frozenset[str]] = {
    C.PENDING: frozenset({C.RUNNING, C.WAITING, C.FAILED, C.CANCELED}),
    C.WAITING: frozenset({C.APPROVED, C.DENIED, C.CANCELED}),
    # A call waiting on a sub-agent is settled with the child's answer
    # (capabilities/subagents.py): succeeded or failed.
    C.WAITING_SUBAGENT: frozenset({C.SUCCEEDED, C.FAILED, C.CANCELED}),
    # ...denied when its approval lapsed before it could start (approvals.services).
    C.APPROVED: frozenset({C.RUNNING, C.CANCELED, C.DENIED}),
    # ...a running delegate call parks on its child, and a call that gates
    # inside (Code Mode, the browser) waits on an inner step's approval; a
    # call that certainly never left (the provider refused the connection)
    # goes back to wait for its retry (runtime/store/control.py::retry_call_later,
    # note_never_sent); a read-only call cut off by its turn's end changed
    # nothing, so it is canceled, not in doubt (control.py::_close_call).
    C.RUNNING: frozenset(
        {
            C.SUCCEEDED,
            C.FAILED,
            C.IN_DOUBT,
            C.RUNNING,
            C.WAITING_SUBAGENT,
            C.WAITING,
            C.PENDING,
            C.APPROVED,
            C.CANCELED,
        }
    ),
    # A human resolves an in-doubt call: retry it (approved), or say what happened.
    C.IN_DOUBT: frozenset({C.APPROVED, C.SUCCEEDED, C.FAILED, C.CANCELED}),
}


_SETTLED = frozenset({S.IDLE, S.FAILED, S.CANCELED})
_ACTIVE = frozenset(S.values) - _SETTLED
SESSION_MOVES: dict[str, frozenset[str]] = {
    **{settled: _SETTLED | {S.RUNNING} for settled in _SETTLED},
    # In a turn: any other state of a turn in progress, or settled.
    **{active: frozenset(S.values) for active in _ACTIVE},
}


class IllegalTransition(Exception):
    def __init__(self, what: str, current: str, wanted: str) -> None:
        super().__init__(f"{what} is {current}; it cannot become {wanted}")
        self.current = current
        self.wanted = wanted


def check_turn_move(turn: Turn, to: str) -> None:
    if to not in TURN_MOVES.get(turn.status, frozenset()):
        raise IllegalTransition(f"turn {turn.number}", turn.status, to)


def check_tool_move(call: ToolCall, to: str) -> None:
    if to not in TOOL_MOVES.get(call.status, frozenset()):
        raise IllegalTransition(f"tool call {call.name}", call.status, to)


def check_session_move(session: Session, to: str) -> None:
    if to not in SESSION_MOVES.get(session.status, frozenset()):
        raise IllegalTransition(f"session {session.key}", session.status, to)


def sql_moves(**moves: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """The moves a module's SQL statements make (turn=[(from, to)], tool=...,
    session=...), checked against the tables above: a statement that makes
    an illegal move fails its module's import, hence every test."""
    tables = {"turn": TURN_MOVES, "tool": TOOL_MOVES, "session": SESSION_MOVES}
    for model, pairs in moves.items():
        for current, to in pairs:
            if to != current and to not in tables[model].get(current, frozenset()):
                raise IllegalTransition(f"a SQL statement's {model}", current, to)
    return moves


def check_tool_move_from(name: str, current: str, to: str) -> None:
    """For a write in SQL: staying put (a refused call recorded as it is) or
    a legal move."""
    if to != current and to not in TOOL_MOVES.get(current, frozenset()):
        raise IllegalTransition(f"tool call {name}", current, to)


# --- The writers ------------------------------------------------------------------------


def toolcall_move(
    call: ToolCall,
    to: str,
    *,
    runtime: SessionRuntime | None = None,
    event: EventSpec | None = None,
    **fields: Any,
) -> None:
    """Move a tool call (row locked by the caller, under the session lock) to
    `to` with the other fields that change with it; `event`, when given, is
    written on `runtime` in the same transaction. Staying in the same status
    only saves the fields (a refused call closed as it is)."""
    if to != call.status:
        check_tool_move(call, to)
    call.status = to
    for name, value in fields.items():
        setattr(call, name, value)
    call.save(update_fields=["status", *fields])
    if event is not None:
        assert runtime is not None, "an event needs the session's runtime row"
        events.append(runtime, [event])


def turn_move(turn: Turn, to: str, **fields: Any) -> None:
    """Move a turn; the caller appends the `turn.*` event in its transaction."""
    check_turn_move(turn, to)
    turn.status = to
    for name, value in fields.items():
        setattr(turn, name, value)
    turn.save(update_fields=["status", *fields])


def session_move(session: Session, to: str) -> None:
    """A session's status follows its turns (SESSION_MOVES; the
    CheckConstraint keeps it one of the choices)."""
    if session.status != to:
        check_session_move(session, to)
        session.status = to
        session.save(update_fields=["status", "updated_at"])
