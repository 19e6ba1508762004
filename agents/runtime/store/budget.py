"""Commits for budgets and memory: a turn ended or a session paused by a
budget, and a memory snapshot. Rare (at most once per turn, or once per
summary), so ORM in `transaction.atomic()` with the fence checked, like
store.control.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents import events
from agents.budgets import Exceeded
from agents.events import EventSpec
from agents.models import MemorySnapshot, Session, Turn
from agents.runtime.state import Claimed
from agents.runtime.store.control import (
    cancel_open_calls,
    finish_turn,
    session_move,
    turn_move,
)
from agents.runtime.store.lock import lock_session

T = Turn.Status


def end_turn_over_budget(claimed: Claimed, exceeded: Exceeded) -> None:
    """A turn limit would be crossed: the turn fails with the reason, which
    the timeline shows as `budget.exceeded` and the turn as its error."""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        turn = Turn.objects.get(pk=claimed.turn_id)
        specs = [EventSpec("budget.exceeded", exceeded.data(), turn.id, claimed.owner)]
        cancel_open_calls(runtime, turn, specs, claimed.owner)  # none at a model boundary
        finish_turn(runtime, turn, T.FAILED, specs, claimed.owner, error=exceeded.reason)
        # Released: the engine's next claim (a queued turn) is not a recovery.
        runtime.owner = ""
        runtime.save()
        events.append(runtime, specs)
    claimed.turn_done = True


def pause_over_budget(claimed: Claimed, exceeded: Exceeded) -> None:
    """A session limit would be crossed: the turn waits (as for an approval),
    the session is `paused` and released; nothing runs until an admin raises
    the budget (services.session_raise_budget), which resumes the turn."""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        turn = Turn.objects.get(pk=claimed.turn_id)
        turn_move(turn, T.WAITING, error=exceeded.reason)
        session_move(runtime.session, Session.Status.PAUSED)
        runtime.owner = ""
        runtime.save(update_fields=["owner", "updated_at"])
        events.append(
            runtime, [EventSpec("budget.exceeded", exceeded.data(), turn.id, claimed.owner)]
        )


def record_memory(
    claimed: Claimed,
    *,
    upto: int,
    summary: str,
    model: str,
    in_tokens: int,
    out_tokens: int,
    cost_micros: int,
    data: dict[str, Any],
) -> bool:
    """Commit a summary of the rows before `upto` and what it cost; False
    when a snapshot for that position already exists (a re-run after a
    crash: the unique constraint keeps it at one). (Long for a reason: its
    keyword parameters, one per line.)"""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        # Every snapshot is written under the session lock, so this check
        # cannot race; the unique constraint is the database's backstop.
        created = not MemorySnapshot.objects.filter(
            session_id=claimed.session_id, upto_position=upto
        ).exists()
        if created:
            MemorySnapshot.objects.create(
                session_id=claimed.session_id,
                upto_position=upto,
                summary=summary,
                model=model[:100],
            )
        # The summary call was spent either way: it counts toward the budgets
        # (tokens and cost), not toward the turn's model steps.
        runtime.turn_input_tokens += in_tokens
        runtime.turn_output_tokens += out_tokens
        runtime.input_tokens += in_tokens
        runtime.output_tokens += out_tokens
        runtime.turn_cost_micros += cost_micros
        runtime.cost_micros += cost_micros
        runtime.step_attempts = 0
        runtime.save()
        data = {**data, "upto_position": upto, "created": created}
        events.append(runtime, [EventSpec("memory.snapshot", data, claimed.turn_id, claimed.owner)])
    return created
