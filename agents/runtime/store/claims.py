"""Claims: becoming a session's owner, and letting go.

A claim bumps the fencing token (every later record of the previous owner
matches nothing), notices a dead previous owner (a recovery), starts or
resumes the turn to run, and loads what the steps need into memory, so the
hot path never reads before it writes.

Two ways to the same rows: the claim that starts the next queued turn (almost
every claim) is two plain statements, the lock and one CTE; every other claim
(a recovery, a resume, a poison step, backing off) goes through the ORM.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents import events
from agents.budgets import Limits
from agents.events import EventSpec
from agents.fields import json_column
from agents.models import (
    PARKED_CALLS,
    Event,
    MemorySnapshot,
    Message,
    Session,
    SessionRuntime,
    ToolCall,
    Turn,
)
from agents.runtime import ownership
from agents.runtime.ownership import Owner
from agents.runtime.state import CallState, Claimed
from agents.runtime.store.control import (
    cancel_open_calls,
    finish_turn,
    session_move,
    turn_move,
)
from agents.runtime.store.lock import lock_session
from agents.transitions import sql_moves

log = logging.getLogger(__name__)
C = ToolCall.Status
T = Turn.Status
S = Session.Status

# What START_TURN_SQL moves: the first queued turn starts; the session shows
# running, from whatever it showed (its WHERE: <> 'running'). Read from the
# SQL and checked against both by tests/agents/test_status_sql.py.
MOVES = sql_moves(
    turn=[(T.ACCEPTED, T.RUNNING)],
    session=[(shown, S.RUNNING) for shown in S.values if shown != S.RUNNING],
)


def claim(session_id: int, owner: Owner) -> Claimed | None:
    """Become the session's owner and load what the next step needs.

    Starts the next queued turn when none is running, resumes a turn whose
    approvals were decided, notices a dead previous owner (a recovery) and
    fails a step that keeps killing its workers. Returns None when there is
    nothing to run, or when a live slot (of this process or another) owns
    the session: that slot does the work.
    """
    try:
        return _claim(session_id, owner, looked=False)
    except _LookFirst:
        # Outside the transaction: the look may wait (on the liveness
        # connection, on taking the lock again) and must not hold the row lock.
        ownership.check_liveness()
        return _claim(session_id, owner, looked=True)


class _LookFirst(Exception):
    """The claim would take a session over from a process whose lock is
    free, and this process has not looked at its own lock in this claim."""


def _claim(session_id: int, owner: Owner, looked: bool) -> Claimed | None:
    with transaction.atomic():
        head = _lock_head(session_id)
        if head is not None and head.starts_next_turn:
            claimed = _start_next_turn(head, owner)
            if claimed is not None:
                return claimed
        return _claim_general(session_id, owner, looked)


def _claim_general(session_id: int, owner: Owner, looked: bool) -> Claimed | None:
    """Every other claim: a recovery, a resume after approvals, a poison
    step, backing off, nothing to run, a session another slot drives. ORM,
    in the caller's transaction, which already holds the session lock
    (taking it again costs a query). Long for a reason: the order of these
    checks is the claim's protocol, read best in one place."""
    runtime = lock_session(session_id)
    if runtime.wake_at is not None and runtime.wake_at > timezone.now() and not runtime.owner:
        return None  # backing off after a failed step; a delayed trigger will come
    # Another slot's name with its process alive: that slot is on it (this is a
    # duplicate trigger). Our own name left behind is a step of ours that never
    # reached its record: a recovery like a dead owner's.
    if runtime.owner and runtime.owner != owner.name:
        if ownership.is_alive(runtime.owner_process):
            return None
        # Its lock is free. Ours may have gone with it (a restart, every
        # backend terminated) without this process noticing yet: it learns
        # that only when it looks, and until then rejoining() says no, and a
        # live process's free lock looks like a dead owner's (124 sessions
        # taken over from live slots within a second of one restart, their
        # model calls paid again: chaos campaign). So look first, outside
        # this transaction (raising rolls back the lock: nothing is written
        # yet). The look inside it held the session's row lock, idle in
        # transaction, while it waited on the liveness connection (6-10 s
        # seen in chaos campaigns, invariant 5).
        if not looked:
            raise _LookFirst
        if ownership.rejoining():
            return None  # its process may be about to take its lock again
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
                owner.name,
            )
        )
    runtime.fence += 1
    runtime.owner, runtime.owner_process = owner.name, owner.process
    runtime.wake_at = None
    turn = _runnable_turn(runtime, specs, owner.name)
    if turn is not None and runtime.step_attempts > settings.AGENTDESK_MAX_STEP_ATTEMPTS:
        reason = f"step failed {runtime.step_attempts} times in a row (poison step)"
        cancel_open_calls(runtime, turn, specs, owner.name)
        finish_turn(runtime, turn, T.FAILED, specs, owner.name, error=reason)
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
            session_move(runtime.session, Session.Status.IDLE)
        return turn
    if turn.status == T.RUNNING:
        return turn
    waiting = turn.status in (T.WAITING, T.WAITING_SUBAGENT)
    if turn.status == T.RESUMING or (waiting and not _waits(runtime, turn)):
        turn_move(turn, T.RUNNING)
        session_move(runtime.session, Session.Status.RUNNING)
        specs.append(EventSpec("turn.resumed", {"number": turn.number}, turn.id, owner))
        return turn
    return None  # waiting on a human, or on a sub-agent


def _waits(runtime: SessionRuntime, turn: Turn) -> bool:
    """Whether the parked turn still waits: on a person, or on a sub-agent."""
    if runtime.session.status == Session.Status.PAUSED:
        return True  # over a session budget: an admin raises it (store/budget.py)
    calls = ToolCall.objects.filter(session_id=turn.session_id, turn=turn)  # the session's index
    return calls.filter(status__in=PARKED_CALLS).exists()


def _start_turn(runtime: SessionRuntime, turn: Turn, specs: list[EventSpec], owner: str) -> None:
    now = timezone.now()
    turn_move(turn, T.RUNNING, started_at=now)
    position = runtime.transcript_len
    runtime.transcript_len += 1
    runtime.current_turn_id = turn.id
    runtime.cancel_requested = False
    runtime.step_attempts = 0
    runtime.turn_steps = runtime.turn_input_tokens = runtime.turn_output_tokens = 0
    runtime.turn_cost_micros = 0
    session_move(runtime.session, Session.Status.RUNNING)
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
    # (Long for a reason: the claim's fields, named one per line.)
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
    calls = _last_reply_calls(runtime.session_id, turn.id, transcript)
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


def _last_reply_calls(
    session_id: int, turn_id: int, transcript: list[dict[str, Any]]
) -> list[CallState]:
    """The calls the last reply asked for, by (session, tool_use_id); a reply
    of an earlier turn has every result already: nothing to run."""
    reply = next((r["content"] for r in reversed(transcript) if r["role"] == "assistant"), None)
    if reply is None:
        return []
    uses = [b["id"] for b in reply if b.get("type") == "tool_use"]
    rows = ToolCall.objects.filter(session_id=session_id, tool_use_id__in=uses, turn_id=turn_id)
    return [CallState.from_row(c) for c in rows.order_by("id")]


def release(claimed: Claimed) -> None:
    SessionRuntime.objects.filter(pk=claimed.session_id, fence=claimed.fence).update(
        owner="", updated_at=timezone.now()
    )


def abandon(claimed: Claimed) -> None:
    """Let go of a claim the way a dead owner does: the name stays and the
    process key no live process holds (0) replaces ours, so the sweeper
    re-enqueues it at once and the next claim is a recovery. When the
    database is what failed, the watchdog tries again until it is back
    (abandon_pending): this process keeps its liveness key through a lost
    connection (ownership.py), so its key alone would keep the session
    ours, with no slot on it, for the life of the process."""
    _let_go_or_later(_Hold(claimed.session_id, fence=claimed.fence))


def disown(session_id: int, owner: Owner) -> None:
    """After a claim that raised: if it committed all the same (the server
    went away between its commit and its answer), the session shows this
    slot's name and this live process's key, and no slot drives it; the
    sweeper would never look at it again (seen: a session stuck after a
    PostgreSQL crash until the campaign gave up on it). Let go of it as
    abandon() does, by the slot's name: no other slot writes that name,
    and a claim of another slot since has written its own."""
    _let_go_or_later(_Hold(session_id, owner_name=owner.name))


@dataclass(frozen=True)
class _Hold:
    """A session to let go of: by the fence of our claim, or by our name."""

    session_id: int
    fence: int | None = None
    owner_name: str | None = None


def _let_go_or_later(hold: _Hold) -> None:
    for _ in (1, 2):
        if _let_go(hold):
            return
        # The failure may have been this very connection (terminated, or
        # broken mid-statement): the pool discards it, the retry borrows another.
        connection.close()
    log.warning("session %s: could not let go; the watchdog will", hold.session_id)
    with _pending_lock:
        _pending.append(hold)


def abandon_pending() -> None:
    """Let go of the claims abandon() and disown() could not (the watchdog,
    every sweep); after one that still cannot, the rest wait for the next
    sweep (each try may wait the pool's timeout for a connection)."""
    with _pending_lock:
        pending, _pending[:] = list(_pending), []
    for done, hold in enumerate(pending):
        if not _let_go(hold):
            connection.close()
            with _pending_lock:
                _pending.extend(pending[done:])
            return


_pending: list[_Hold] = []
_pending_lock = threading.Lock()


def _let_go(hold: _Hold) -> bool:
    rows = SessionRuntime.objects.filter(pk=hold.session_id)
    if hold.fence is not None:
        rows = rows.filter(fence=hold.fence)
    else:
        rows = rows.filter(owner=hold.owner_name)
    try:
        rows.update(owner_process=0, updated_at=timezone.now())
        return True
    except Exception:
        return False


# --- The common claim: start the next queued turn ------------------------------
#
# Almost every claim finds no owner and no turn in progress and starts the
# session's next queued turn (after a message was posted; after a turn ended
# with another queued). That claim is two plain statements in one transaction,
# the way the hot path is: the lock, then one statement of data-modifying CTEs.
# Two, not one: the read of the queued turns must come after the lock, in a new
# snapshot, to see every turn committed by whoever held the lock before us.
# Anything else, or no queued turn after all, goes the general way above, in
# the same transaction (tests/agents/runtime/test_claims.py holds the two ways
# to the same rows).

HEAD_SQL = """
SELECT r.owner = '' AND r.current_turn_id IS NULL AND (r.wake_at IS NULL OR r.wake_at <= now()),
    s.key, s.profile, s.context, s.max_turn_steps, s.max_turn_tokens, s.max_turn_cost_micros,
    s.max_turn_seconds, s.max_total_tokens, s.max_total_cost_micros
FROM agents_sessionruntime r JOIN agents_session s ON s.id = r.session_id
WHERE r.session_id = %s
FOR NO KEY UPDATE OF r
"""

# _start_turn's transition as one statement: the first accepted turn runs; the
# runtime row takes the claim (a new fence, the owner, fresh turn counters);
# the session shows running; `turn.started` carries the turn's input as its
# transcript row. It returns what the steps read: the latest memory snapshot
# and the transcript rows after it (events committed before the lock was ours;
# the caller adds the new row).
START_TURN_SQL = """
WITH t AS (
    UPDATE agents_turn SET status = 'running', started_at = now()
    WHERE id = (SELECT id FROM agents_turn WHERE session_id = %(sid)s AND status = 'accepted'
                ORDER BY number LIMIT 1)
    RETURNING id, number, trigger, input, started_by_id, started_at
), r AS (
    UPDATE agents_sessionruntime SET fence = fence + 1, owner = %(owner)s,
        owner_process = %(process)s, wake_at = NULL,
        current_turn_id = t.id, cancel_requested = false, step_attempts = 0, turn_steps = 0,
        turn_input_tokens = 0, turn_output_tokens = 0, turn_cost_micros = 0,
        transcript_len = transcript_len + 1, last_seq = last_seq + 1, updated_at = now()
    FROM t WHERE agents_sessionruntime.session_id = %(sid)s
    RETURNING fence, last_seq, transcript_len - 1 AS pos, input_tokens + output_tokens AS tokens,
        cost_micros
), s AS (
    UPDATE agents_session SET status = 'running', updated_at = now()
    FROM t WHERE agents_session.id = %(sid)s AND agents_session.status <> 'running'
), e AS (
    INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at,
        position, role, content)
    SELECT %(sid)s, r.last_seq, t.id, 'turn.started',
        json_build_object('number', t.number, 'trigger', t.trigger, 'profile', %(profile)s::text),
        %(owner)s, now(), r.pos, 'user',
        jsonb_build_array(jsonb_build_object('type', 'text', 'text', t.input))
    FROM t, r
), m AS (
    SELECT upto_position, summary FROM agents_memorysnapshot WHERE session_id = %(sid)s
    ORDER BY upto_position DESC LIMIT 1
)
SELECT t.id, t.number, t.trigger, t.input, t.started_by_id, t.started_at,
    r.fence, r.last_seq, r.pos, r.tokens, r.cost_micros,
    coalesce((SELECT upto_position FROM m), 0), coalesce((SELECT summary FROM m), ''),
    (SELECT json_agg(json_build_object('role', role, 'content', content) ORDER BY position)
        FROM agents_message
        WHERE session_id = %(sid)s AND position >= coalesce((SELECT upto_position FROM m), 0))
FROM t, r
"""


@dataclass(frozen=True)
class _Head:
    """The locked session, as much of it as the common claim reads."""

    session_id: int
    starts_next_turn: bool  # no owner, no turn in progress, not backing off
    key: str
    profile: str
    context: dict[str, Any]
    limits: Limits


def _lock_head(session_id: int) -> _Head | None:
    with connection.cursor() as cursor:
        cursor.execute(HEAD_SQL, [session_id])
        row = cursor.fetchone()
    if row is None:
        return None  # the general path raises SessionRuntime.DoesNotExist
    starts, key, profile, context, *limits = row
    return _Head(session_id, starts, key, profile, json_column(context), Limits(*limits))


def _start_next_turn(head: _Head, owner: Owner) -> Claimed | None:
    """Start the first queued turn; None, having written nothing, when there is none.
    (Long for a reason: one statement's row unpacked into the claim, field by field.)"""
    params = {
        "sid": head.session_id,
        "owner": owner.name,
        "process": owner.process,
        "profile": head.profile,
    }
    with connection.cursor() as cursor:
        cursor.execute(START_TURN_SQL, params)
        row = cursor.fetchone()
    if row is None:
        return None
    (turn_id, number, trigger, text, started_by_id, started_at) = row[:6]
    fence, seq, position, tokens, cost_micros, base, summary, rows = row[6:]
    content = [{"type": "text", "text": text}]
    started = Event(
        session_id=head.session_id,
        seq=seq,
        turn_id=turn_id,
        kind="turn.started",
        data={"number": number, "trigger": trigger, "profile": head.profile},
        actor=owner.name,
        created_at=started_at,
        position=position,
    )
    events.publish_on_commit(head.session_id, [started])
    transcript = json_column(rows) or []
    transcript.append({"role": "user", "content": content})
    return Claimed(
        session_id=head.session_id,
        key=head.key,
        profile=head.profile,
        context=head.context,
        fence=fence,
        owner=owner.name,
        turn_id=turn_id,
        turn_number=number,
        started_by_id=started_by_id,
        turn_steps=0,
        transcript=transcript,
        calls=[],  # a turn that has just started has asked for nothing yet
        limits=head.limits,
        turn_started_at=started_at,
        total_tokens=tokens,
        total_cost_micros=cost_micros,
        transcript_base=base,
        memory_summary=summary,
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
