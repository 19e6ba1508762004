"""The legal moves of turns and tool calls: one table each, one checker each.

Every status write goes through `check_turn_move` / `check_tool_move` (ORM
paths) or through a statement in runtime/store/hot.py whose WHERE clause names
the same from-states. A refused move raises IllegalTransition, which views
turn into HTTP 409 with the current state.
"""

from __future__ import annotations

from agents.models import ToolCall, Turn

T = Turn.Status
C = ToolCall.Status

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
    # ...and a running delegate call parks on its child.
    C.RUNNING: frozenset({C.SUCCEEDED, C.FAILED, C.IN_DOUBT, C.RUNNING, C.WAITING_SUBAGENT}),
    # A human resolves an in-doubt call: retry it (approved), or say what happened.
    C.IN_DOUBT: frozenset({C.APPROVED, C.SUCCEEDED, C.FAILED, C.CANCELED}),
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
