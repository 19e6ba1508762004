"""One writer per status (agents/transitions.py): a tool call's, a turn's and a
session's status change only through a function that refuses an illegal move
and saves nothing then; the hot path's statements are checked by the same
table before they are sent; the database refuses a status outside the choices."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents import services
from agents.models import ToolCall, Turn
from agents.transitions import (
    TOOL_MOVES,
    IllegalTransition,
    check_tool_move_from,
    toolcall_move,
    turn_move,
)

pytestmark = pytest.mark.django_db

C = ToolCall.Status


def _call(status: str = C.PENDING) -> ToolCall:
    services.session_get_or_create(key="ticket:moves")
    turn = services.message_post(key="ticket:moves", text="hello")
    return ToolCall.objects.create(
        session_id=turn.session_id,
        turn=turn,
        tool_use_id="toolu_moves",
        idempotency_key="ticket:moves:toolu_moves",
        name="lookup_order",
        kind="read_only",
        status=status,
        input={},
        message_position=1,
        created_at=timezone.now(),
    )


def test_an_illegal_tool_call_move_is_refused_and_saves_nothing():
    call = _call(C.PENDING)

    with pytest.raises(IllegalTransition) as refused:
        toolcall_move(call, C.SUCCEEDED, output="done")

    assert (refused.value.current, refused.value.wanted) == (C.PENDING, C.SUCCEEDED)
    row = ToolCall.objects.get(pk=call.pk)
    assert (row.status, row.output) == (C.PENDING, "")


def test_a_legal_move_saves_the_status_with_its_fields():
    call = _call(C.PENDING)

    toolcall_move(call, C.RUNNING, attempts=1)

    row = ToolCall.objects.get(pk=call.pk)
    assert (row.status, row.attempts) == (C.RUNNING, 1)


def test_a_sub_agent_answer_settles_only_a_call_that_waits_for_one():
    assert C.SUCCEEDED in _moves(C.WAITING_SUBAGENT)
    assert C.SUCCEEDED not in _moves(C.WAITING)  # an approval's call runs first
    assert C.APPROVED not in _moves(C.WAITING_SUBAGENT)  # nobody approves a sub-agent


def test_the_hot_path_move_is_checked_before_it_is_sent():
    check_tool_move_from("lookup_order", C.RUNNING, C.SUCCEEDED)
    check_tool_move_from("lookup_order", C.FAILED, C.FAILED)  # a refused call, closed as it is
    with pytest.raises(IllegalTransition):
        check_tool_move_from("lookup_order", C.SUCCEEDED, C.FAILED)


def test_an_illegal_turn_move_is_refused():
    turn = _call().turn
    turn_move(turn, Turn.Status.RUNNING)

    with pytest.raises(IllegalTransition):
        turn_move(turn, Turn.Status.ACCEPTED)
    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.RUNNING


@pytest.mark.parametrize("model", [ToolCall, Turn])
def test_the_database_refuses_a_status_outside_the_choices(model):
    call = _call()
    pk = call.pk if model is ToolCall else call.turn_id
    with pytest.raises(IntegrityError), transaction.atomic():
        model.objects.filter(pk=pk).update(status="waiting_for_godot")


def _moves(status: str) -> frozenset[str]:
    return TOOL_MOVES[status]


# --- Sessions, and the moves of the SQL fast paths (issue 23) -----------------------


def test_a_settled_session_only_starts_a_turn_or_stays_settled():
    from agents.models import Session
    from agents.transitions import check_session_move

    idle = Session(key="ticket:settled", status=Session.Status.IDLE)
    check_session_move(idle, Session.Status.RUNNING)
    for to in ("waiting_for_approval", "in_doubt", "paused", "waiting_for_subagent"):
        with pytest.raises(IllegalTransition):
            check_session_move(idle, to)


def test_every_sql_fast_path_declares_legal_moves_and_an_illegal_one_fails():
    from agents import services
    from agents.runtime.store import claims, hot
    from agents.transitions import sql_moves

    assert hot.MOVES and claims.MOVES and services.MOVES  # checked when imported
    with pytest.raises(IllegalTransition):
        sql_moves(turn=[("succeeded", "running")])
    with pytest.raises(IllegalTransition):
        sql_moves(session=[("canceled", "in_doubt")])
