"""A turn parked on calls that were settled since goes back to a worker.

Called under the session lock by whoever settled the last call it waited
on: a person (agents/services.py: an in-doubt call resolved, a decision, a
raised budget), a sub-agent's answer (capabilities/subagents.py), a slot
that learned a call never left (store/evidence.py).
"""

from __future__ import annotations

from agents.events import EventSpec
from agents.models import PARKED_CALLS, Session, SessionRuntime, ToolCall, Turn
from agents.runtime import dispatch
from agents.transitions import session_move, turn_move

T = Turn.Status


def resume_if_unblocked(
    runtime: SessionRuntime, turn_id: int, specs: list[EventSpec], actor: str
) -> None:
    """After a call that held a parked turn was settled (a person's decision,
    a sub-agent's answer, a call found never sent): if the turn waits on
    nothing more, hand it back to a worker. (A turn still held by a worker
    is left alone; it re-reads the calls under this same lock before it
    would park.) The caller holds the session lock and appends `specs`."""
    turn = Turn.objects.get(pk=turn_id)
    if turn.status not in (T.WAITING, T.WAITING_SUBAGENT):
        return
    calls = ToolCall.objects.filter(session_id=turn.session_id, turn=turn)  # the session's index
    if calls.filter(status__in=PARKED_CALLS).exists():
        return
    turn_move(turn, T.RESUMING)
    session_move(runtime.session, Session.Status.RUNNING)
    specs.append(EventSpec("turn.resuming", {"number": turn.number}, turn.id, actor))
    dispatch.enqueue_on_commit(runtime.session_id)
