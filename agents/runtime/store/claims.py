"""Claims: becoming a session's owner, and letting go.

A claim bumps the fencing token (every later record of the previous owner
matches nothing), notices a dead previous owner (a recovery), starts or
resumes the turn to run, and loads what the steps need into memory, so the
hot path never reads before it writes.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents import events
from agents.budgets import Limits
from agents.events import EventSpec
from agents.models import (
    Event,
    MemorySnapshot,
    Message,
    Session,
    SessionRuntime,
    ToolCall,
    Turn,
)
from agents.runtime.state import CallState, Claimed
from agents.runtime.store.lock import lock_session
from agents.runtime.store.transitions import (
    cancel_open_calls,
    finish_turn,
    move_turn,
    set_session_status,
)

C = ToolCall.Status
T = Turn.Status


def claim(session_id: int, owner: str) -> Claimed | None:
    """Become the session's owner and load what the next step needs.

    Starts the next queued turn when none is running, resumes a turn whose
    approvals were decided, notices a dead previous owner (a recovery) and
    fails a step that keeps killing its workers. Returns None, released, when
    there is nothing to run.
    """
    with transaction.atomic():
        runtime = lock_session(session_id)
        if runtime.wake_at is not None and runtime.wake_at > timezone.now() and not runtime.owner:
            return None  # backing off after a failed step; a delayed trigger will come
        specs: list[EventSpec] = []
        recovered = bool(runtime.owner)
        if recovered:
            runtime.step_attempts += 1
            stalled = (timezone.now() - _last_progress(runtime)).total_seconds()
            specs.append(
                EventSpec(
                    "recovery",
                    {"previous_owner": runtime.owner, "stalled_s": round(stalled, 3)},
                    runtime.current_turn_id,
                    owner,
                )
            )
        runtime.fence += 1
        runtime.owner = owner
        runtime.wake_at = None
        turn = _runnable_turn(runtime, specs, owner)
        if turn is not None and runtime.step_attempts > settings.AGENTDESK_MAX_STEP_ATTEMPTS:
            reason = f"step failed {runtime.step_attempts} times in a row (poison step)"
            cancel_open_calls(runtime, turn, specs, owner)
            finish_turn(runtime, turn, T.FAILED, specs, owner, error=reason)
            turn = None
        if turn is None:
            runtime.owner = ""
        if specs:  # seqs from runtime.last_seq, saved with the claim below
            events.append(runtime, specs, save_seq=False)
        runtime.save()
        if turn is None:
            return None
        return _load(runtime, turn, recovered)


def _runnable_turn(runtime: SessionRuntime, specs: list[EventSpec], owner: str) -> Turn | None:
    turn = None
    if runtime.current_turn_id is not None:
        turn = Turn.objects.filter(pk=runtime.current_turn_id).first()
    if turn is None or turn.is_terminal:
        turn = (
            Turn.objects.filter(session_id=runtime.session_id, status=T.ACCEPTED)
            .order_by("number")
            .first()
        )
        if turn is not None:
            _start_turn(runtime, turn, specs, owner)
        elif runtime.session.status == Session.Status.RUNNING:
            set_session_status(runtime.session, Session.Status.IDLE)
        return turn
    if turn.status == T.RUNNING:
        return turn
    waiting = turn.status == T.WAITING
    if turn.status == T.RESUMING or (waiting and not _waits_on_human(runtime, turn)):
        move_turn(turn, T.RUNNING)
        set_session_status(runtime.session, Session.Status.RUNNING)
        specs.append(EventSpec("turn.resumed", {"number": turn.number}, turn.id, owner))
        return turn
    return None  # waiting on a human


def _waits_on_human(runtime: SessionRuntime, turn: Turn) -> bool:
    if runtime.session.status == Session.Status.PAUSED:
        return True  # over a session budget: an admin raises it (store/budget.py)
    calls = ToolCall.objects.filter(session_id=turn.session_id, turn=turn)  # the session's index
    return calls.filter(status__in=[C.WAITING, C.IN_DOUBT]).exists()


def _start_turn(runtime: SessionRuntime, turn: Turn, specs: list[EventSpec], owner: str) -> None:
    now = timezone.now()
    move_turn(turn, T.RUNNING, started_at=now)
    position = runtime.transcript_len
    runtime.transcript_len += 1
    runtime.current_turn_id = turn.id
    runtime.cancel_requested = False
    runtime.step_attempts = 0
    runtime.turn_steps = runtime.turn_input_tokens = runtime.turn_output_tokens = 0
    runtime.turn_cost_micros = 0
    set_session_status(runtime.session, Session.Status.RUNNING)
    # The profile the turn's calls run under (not repeated on every step).
    data = {"number": turn.number, "trigger": turn.trigger, "profile": runtime.session.profile}
    specs.append(  # the turn's input is its first transcript row
        EventSpec(
            "turn.started",
            data,
            turn.id,
            owner,
            position=position,
            role="user",
            content=[{"type": "text", "text": turn.input}],
        )
    )


def _last_progress(runtime: SessionRuntime):
    """When the dead owner last committed: its last event (the hot path
    leaves the runtime row's updated_at alone), or the claim."""
    last = (
        Event.objects.filter(session_id=runtime.session_id)
        .order_by("-seq")
        .values_list("created_at", flat=True)
        .first()
    )
    return max(last, runtime.updated_at) if last is not None else runtime.updated_at


def _load(runtime: SessionRuntime, turn: Turn, recovered: bool) -> Claimed:
    # Only what a model call reads: the latest memory snapshot and the rows
    # after it (agents/runtime/memory.py), so a claim is O(recent), not
    # O(transcript). The desk and the history read every row themselves.
    memory = (
        MemorySnapshot.objects.filter(session_id=runtime.session_id)
        .order_by("-upto_position")
        .only("upto_position", "summary")
        .first()
    )
    base = memory.upto_position if memory is not None else 0
    rows = Message.objects.filter(session_id=runtime.session_id, position__gte=base).order_by(
        "position"
    )
    transcript = [{"role": r.role, "content": r.content} for r in rows]
    last_assistant = max(
        (base + i for i, row in enumerate(transcript) if row["role"] == "assistant"), default=None
    )
    calls: list[CallState] = []
    if last_assistant is not None:
        # The calls the last reply asked for, by (session, tool_use_id); a
        # reply of an earlier turn has every result already: nothing to run.
        reply = transcript[last_assistant - base]["content"]
        uses = [b["id"] for b in reply if b.get("type") == "tool_use"]
        call_rows = ToolCall.objects.filter(
            session_id=runtime.session_id, tool_use_id__in=uses, turn_id=turn.id
        )
        calls = [CallState.from_row(c) for c in call_rows.order_by("id")]
    session = runtime.session
    return Claimed(
        session_id=runtime.session_id,
        key=session.key,
        profile=session.profile,
        context=session.context,
        fence=runtime.fence,
        owner=runtime.owner,
        turn_id=turn.id,
        turn_number=turn.number,
        started_by_id=turn.started_by_id,
        turn_steps=runtime.turn_steps,
        transcript=transcript,
        calls=calls,
        recovered=recovered,
        in_flight_at_claim={c.id for c in calls if c.status == C.RUNNING},
        cancel_requested=runtime.cancel_requested,
        limits=Limits.of(session),
        turn_started_at=turn.started_at,
        turn_tokens=runtime.turn_input_tokens + runtime.turn_output_tokens,
        turn_cost_micros=runtime.turn_cost_micros,
        total_tokens=runtime.input_tokens + runtime.output_tokens,
        total_cost_micros=runtime.cost_micros,
        transcript_base=base,
        memory_summary=memory.summary if memory is not None else "",
    )


def release(claimed: Claimed) -> None:
    SessionRuntime.objects.filter(pk=claimed.session_id, fence=claimed.fence).update(
        owner="", updated_at=timezone.now()
    )


IS_RUNNABLE_SQL = """
    SELECT EXISTS (SELECT 1 FROM agents_session s
        JOIN agents_sessionruntime r ON r.session_id = s.id
        WHERE s.id = %s AND s.status = 'running' AND r.owner = ''
          AND (r.wake_at IS NULL OR r.wake_at <= now()))
"""


def is_runnable(session_id: int) -> bool:
    """Has work, no owner, and is not backing off. (Asked after every task;
    one plain statement: the ORM's query building was most of its cost.)"""
    with connection.cursor() as cursor:
        cursor.execute(IS_RUNNABLE_SQL, [session_id])
        return cursor.fetchone()[0]
