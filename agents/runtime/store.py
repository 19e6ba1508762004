"""Every commit the step engine makes.

Two statements carry the hot path, one agent step = two commits:

- `record_reply`: the model's reply becomes durable (transcript row, its tool
  calls, their approvals, events) BEFORE any tool it asks for runs, so
  tool_use ids, and the idempotency keys derived from them, never change on
  replay. The same statement marks the first tool call `running`: the
  durable record that it may have left the process.
- `record_tool_result`: the result row, the call's final status, events,
  and the next call marked `running` (record step k, claim step k+1).

Each is ONE SQL statement of data-modifying CTEs, sent on an autocommit
connection: one round trip, one commit. Each starts by updating the session's
runtime row `WHERE fence = <our token>`; when another claim has happened
since ours, that matches nothing, every later CTE selects from it and so
writes nothing, and the caller gets LostClaim. No read-before-write.

Everything else (claims, parking for a human, cancel, failure) is rarer and
uses the ORM inside `transaction.atomic()` with the runtime row locked.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from agents import events
from agents.events import EventSpec
from agents.models import Message, Session, SessionRuntime, ToolCall, Turn
from agents.runtime.state import CallState, Claimed
from agents.transitions import check_tool_move, check_turn_move

C = ToolCall.Status
T = Turn.Status


class LostClaim(Exception):
    """Another claim superseded ours: stop, write nothing more."""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def lock_session(session_id: int, fence: int | None = None) -> SessionRuntime:
    # FOR NO KEY UPDATE: the session lock. It serializes with the engine's
    # record statements and with every human action on this session, while
    # still letting inserts that reference the row (FK checks) through.
    runtime = (
        SessionRuntime.objects.select_for_update(no_key=True)
        .select_related("session")
        .get(pk=session_id)
    )
    if fence is not None and runtime.fence != fence:
        raise LostClaim(f"session {session_id}: fence {fence} superseded by {runtime.fence}")
    return runtime


# --- Claim -------------------------------------------------------------------


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
            stalled = (timezone.now() - runtime.updated_at).total_seconds()
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
        runtime.save()
        if specs:
            events.append(runtime, specs)
        if turn is None:
            return None
        return _load(runtime, turn, recovered)


def _runnable_turn(runtime: SessionRuntime, specs: list[EventSpec], owner: str) -> Turn | None:
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
    if turn.status == T.RESUMING or (turn.status == T.WAITING and not _waits_on_human(turn)):
        move_turn(turn, T.RUNNING)
        set_session_status(runtime.session, Session.Status.RUNNING)
        specs.append(EventSpec("turn.resumed", {"number": turn.number}, turn.id, owner))
        return turn
    return None  # waiting on a human


def _waits_on_human(turn: Turn) -> bool:
    return ToolCall.objects.filter(turn=turn, status__in=[C.WAITING, C.IN_DOUBT]).exists()


def _start_turn(runtime: SessionRuntime, turn: Turn, specs: list[EventSpec], owner: str) -> None:
    now = timezone.now()
    move_turn(turn, T.RUNNING, started_at=now)
    position = runtime.transcript_len
    Message.objects.create(
        session_id=runtime.session_id,
        position=position,
        turn_id=turn.id,
        role="user",
        content=[{"type": "text", "text": turn.input}],
        created_at=now,
    )
    runtime.transcript_len += 1
    runtime.current_turn_id = turn.id
    runtime.cancel_requested = False
    runtime.step_attempts = 0
    runtime.turn_steps = runtime.turn_input_tokens = runtime.turn_output_tokens = 0
    set_session_status(runtime.session, Session.Status.RUNNING)
    specs.append(
        EventSpec(
            "turn.started",
            {"number": turn.number, "trigger": turn.trigger, "position": position},
            turn.id,
            owner,
        )
    )


def _load(runtime: SessionRuntime, turn: Turn, recovered: bool) -> Claimed:
    rows = Message.objects.filter(session_id=runtime.session_id).order_by("position")
    transcript = [{"role": r.role, "content": r.content} for r in rows]
    last_assistant = max(
        (i for i, row in enumerate(transcript) if row["role"] == "assistant"), default=None
    )
    calls: list[CallState] = []
    if last_assistant is not None:
        calls = [
            _call_state(c)
            for c in ToolCall.objects.filter(
                session_id=runtime.session_id, message_position=last_assistant
            ).order_by("id")
        ]
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
        max_turn_steps=session.max_turn_steps,
        turn_steps=runtime.turn_steps,
        transcript=transcript,
        calls=calls,
        recovered=recovered,
        in_flight_at_claim={c.id for c in calls if c.status == C.RUNNING},
        cancel_requested=runtime.cancel_requested,
    )


def _call_state(call: ToolCall) -> CallState:
    return CallState(
        id=call.id,
        tool_use_id=call.tool_use_id,
        idempotency_key=call.idempotency_key,
        name=call.name,
        kind=call.kind,
        status=call.status,
        input=call.input,
        output=call.output,
        is_error=call.is_error,
        attempts=call.attempts,
        result_position=call.result_position,
    )


# --- The hot path -------------------------------------------------------------

RECORD_REPLY_SQL = """
WITH s AS (
    UPDATE agents_sessionruntime SET
        last_seq = last_seq + %(n_events)s,
        transcript_len = transcript_len + 1,
        step_attempts = 0,
        turn_steps = turn_steps + 1,
        turn_input_tokens = turn_input_tokens + %(in_tokens)s,
        turn_output_tokens = turn_output_tokens + %(out_tokens)s,
        input_tokens = input_tokens + %(in_tokens)s,
        output_tokens = output_tokens + %(out_tokens)s,
        current_turn_id = CASE WHEN %(finish)s THEN NULL ELSE current_turn_id END,
        owner = CASE WHEN %(finish)s THEN '' ELSE owner END,
        updated_at = now()
    WHERE session_id = %(sid)s AND fence = %(fence)s
    RETURNING last_seq - %(n_events)s AS base, transcript_len - 1 AS pos, cancel_requested,
              turn_steps, turn_input_tokens, turn_output_tokens
), m AS (
    INSERT INTO agents_message (session_id, position, turn_id, role, content, created_at)
    SELECT %(sid)s, s.pos, %(turn)s, 'assistant', %(content)s::jsonb, now() FROM s
), tc AS (
    INSERT INTO agents_toolcall (session_id, turn_id, tool_use_id, idempotency_key, name, kind,
        status, input, output, is_error, external_id, attempts, message_position, created_at,
        started_at)
    SELECT %(sid)s, %(turn)s, x.tool_use_id, x.idempotency_key, x.name, x.kind, x.status,
        x.input, x.output, x.output <> '', '', x.attempts, s.pos, now(),
        CASE WHEN x.status = 'running' THEN now() END
    FROM s, jsonb_to_recordset(%(calls)s::jsonb) AS x(tool_use_id text, idempotency_key text,
        name text, kind text, status text, input jsonb, output text, attempts int)
    RETURNING id, tool_use_id
), ap AS (
    INSERT INTO approvals_approval (tool_call_id, session_id, turn_id, status, policy,
        policy_detail, tool_name, arguments, arguments_hash, reasoning, requested_by_id, reason,
        created_at, expires_at)
    SELECT tc.id, %(sid)s, %(turn)s, 'pending', a.policy, a.detail, a.tool_name, a.arguments,
        a.arguments_hash, a.reasoning, %(started_by)s, '', now(),
        now() + make_interval(secs => %(approval_ttl)s)
    FROM tc JOIN jsonb_to_recordset(%(approvals)s::jsonb) AS a(tool_use_id text, policy text,
        detail text, tool_name text, arguments jsonb, arguments_hash text, reasoning text)
        ON a.tool_use_id = tc.tool_use_id
), e AS (
    INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at)
    SELECT %(sid)s, s.base + ev.ord, %(turn)s, ev.d->>'kind',
        (ev.d->'data') || jsonb_build_object('position', s.pos), %(actor)s, now()
    FROM s, jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY AS ev(d, ord)
), t AS (
    UPDATE agents_turn SET status = 'succeeded', finished_at = now(), steps = s.turn_steps,
        input_tokens = s.turn_input_tokens, output_tokens = s.turn_output_tokens
    FROM s WHERE agents_turn.id = %(turn)s AND %(finish)s AND agents_turn.status = 'running'
), ss AS (
    -- 'running' when a queued turn waits, so the sweeper still sees work.
    UPDATE agents_session SET updated_at = now(), status = CASE WHEN EXISTS (
            SELECT 1 FROM agents_turn q WHERE q.session_id = %(sid)s AND q.status = 'accepted')
        THEN 'running' ELSE 'idle' END
    FROM s WHERE agents_session.id = %(sid)s AND %(finish)s
)
SELECT s.base, s.pos, s.cancel_requested,
    (SELECT coalesce(jsonb_object_agg(tool_use_id, id), '{}'::jsonb) FROM tc)
FROM s
"""


def record_reply(
    claimed: Claimed,
    *,
    content: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    approvals: list[dict[str, Any]],
    event_list: list[dict[str, Any]],
    in_tokens: int,
    out_tokens: int,
    finish: bool,
) -> tuple[int, dict[str, int]]:
    """Commit a model reply; returns its transcript position and call ids."""
    params = {
        "sid": claimed.session_id,
        "fence": claimed.fence,
        "turn": claimed.turn_id,
        "content": _dumps(content),
        "calls": _dumps(calls),
        "approvals": _dumps(approvals),
        "events": _dumps(event_list),
        "n_events": len(event_list),
        "in_tokens": in_tokens,
        "out_tokens": out_tokens,
        "finish": finish,
        "actor": claimed.owner,
        "started_by": claimed.started_by_id,
        "approval_ttl": settings.AGENTDESK_APPROVAL_TTL_S,
    }
    base, position, cancel_requested, ids = _execute_one(RECORD_REPLY_SQL, params, claimed)
    ids = json.loads(ids) if isinstance(ids, str) else ids  # Django leaves jsonb as text
    claimed.cancel_requested = cancel_requested
    claimed.turn_steps += 1
    claimed.transcript.append({"role": "assistant", "content": content})
    _publish(claimed, base, event_list, position, {"content": content})
    return position, ids


RECORD_RESULT_SQL = """
WITH s AS (
    UPDATE agents_sessionruntime SET
        last_seq = last_seq + 1,
        transcript_len = transcript_len + 1,
        step_attempts = 0,
        updated_at = now()
    WHERE session_id = %(sid)s AND fence = %(fence)s
    RETURNING last_seq AS seq, transcript_len - 1 AS pos, cancel_requested
), tc AS (
    UPDATE agents_toolcall SET status = %(status)s, is_error = %(is_error)s,
        external_id = %(external_id)s, result_position = s.pos, finished_at = now()
    FROM s WHERE agents_toolcall.id = %(call)s
), nxt AS (
    UPDATE agents_toolcall SET status = 'running', attempts = attempts + 1, started_at = now()
    FROM s WHERE agents_toolcall.id = %(next)s AND agents_toolcall.status IN ('pending', 'approved')
), m AS (
    INSERT INTO agents_message (session_id, position, turn_id, role, content, created_at)
    SELECT %(sid)s, s.pos, %(turn)s, 'user', %(content)s::jsonb, now() FROM s
), e AS (
    INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at)
    SELECT %(sid)s, s.seq, %(turn)s, 'tool.finished',
        %(data)s::jsonb || jsonb_build_object('position', s.pos), %(actor)s, now()
    FROM s
)
SELECT s.seq, s.pos, s.cancel_requested FROM s
"""


def record_tool_result(
    claimed: Claimed,
    call: CallState,
    *,
    content: str,
    is_error: bool,
    status: str,
    external_id: str = "",
    data: dict[str, Any],
    next_call: CallState | None,
) -> None:
    """Commit one tool result (and mark the next call running)."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.tool_use_id}
    block["content"] = content
    if is_error:
        block["is_error"] = True
    params = {
        "sid": claimed.session_id,
        "fence": claimed.fence,
        "turn": claimed.turn_id,
        "call": call.id,
        "status": status,
        "is_error": is_error,
        "external_id": external_id,
        "next": next_call.id if next_call else None,
        "content": _dumps([block]),
        "data": _dumps(data),
        "actor": claimed.owner,
    }
    seq, position, cancel_requested = _execute_one(RECORD_RESULT_SQL, params, claimed)
    claimed.cancel_requested = cancel_requested
    call.status, call.is_error, call.result_position = status, is_error, position
    claimed.transcript.append({"role": "user", "content": [block]})
    if next_call is not None:
        next_call.status = C.RUNNING
        next_call.attempts += 1
    _publish(
        claimed, seq - 1, [{"kind": "tool.finished", "data": data}], position, {"block": block}
    )


def _execute_one(sql: str, params: dict[str, Any], claimed: Claimed) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        raise LostClaim(f"session {claimed.session_id}: fence {claimed.fence} superseded")
    return row


def _publish(
    claimed: Claimed,
    base: int,
    event_list: list[dict[str, Any]],
    position: int,
    extra: dict[str, Any],
) -> None:
    now = timezone.now().isoformat()
    payload = []
    for offset, spec in enumerate(event_list, start=1):
        body = {
            "seq": base + offset,
            "kind": spec["kind"],
            "turn_id": claimed.turn_id,
            "data": {**spec["data"], "position": position},
            "actor": claimed.owner,
            "at": now,
        }
        if offset == 1:
            body.update(extra)  # the content rides along with the first event
        payload.append(body)
    events.publish(claimed.session_id, payload)


# --- Rarer transitions (ORM, runtime row locked) -----------------------------


def mark_running(claimed: Claimed, call: CallState) -> None:
    """The durable record that `call` may leave the process from now on."""
    with transaction.atomic():
        lock_session(claimed.session_id, claimed.fence)
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        check_tool_move(row, C.RUNNING)
        row.status, row.attempts, row.started_at = C.RUNNING, row.attempts + 1, timezone.now()
        row.input = call.input
        row.save(update_fields=["status", "attempts", "started_at", "input"])
    call.status, call.attempts = C.RUNNING, row.attempts


def mark_reissued(claimed: Claimed, call: CallState) -> None:
    """A dead owner left `call` running: count the new attempt, durably, before
    it is sent again with the same idempotency key."""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        check_tool_move(row, C.RUNNING)
        row.attempts, row.started_at = row.attempts + 1, timezone.now()
        row.save(update_fields=["attempts", "started_at"])
        data = {"tool_use_id": call.tool_use_id, "name": call.name, "attempt": row.attempts}
        events.append(runtime, [EventSpec("tool.reissued", data, claimed.turn_id, claimed.owner)])
    call.attempts = row.attempts


def mark_in_doubt(claimed: Claimed, call: CallState, note: str) -> None:
    """The outcome cannot be known: stop and ask a human (never resend)."""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        check_tool_move(row, C.IN_DOUBT)
        row.status, row.output, row.finished_at = C.IN_DOUBT, note, timezone.now()
        row.save(update_fields=["status", "output", "finished_at"])
        turn = Turn.objects.get(pk=claimed.turn_id)
        move_turn(turn, T.WAITING)
        set_session_status(runtime.session, Session.Status.IN_DOUBT)
        runtime.owner = ""
        runtime.save(update_fields=["owner", "updated_at"])
        events.append(
            runtime,
            [
                EventSpec(
                    "tool.in_doubt",
                    {"tool_use_id": call.tool_use_id, "name": call.name, "note": note},
                    claimed.turn_id,
                    claimed.owner,
                )
            ],
        )
    call.status = C.IN_DOUBT


def park(claimed: Claimed) -> bool:
    """Wait for a human if a call still needs one; True when parked (released).

    Re-reads the calls under the lock: an approver may have decided while
    this worker was busy with earlier calls, and the decision service only
    resumes turns that are parked, so deciding "still waiting" must happen
    under the same lock as the decision.
    """
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        fresh = {c.id: c for c in ToolCall.objects.filter(pk__in=[c.id for c in claimed.calls])}
        for call in claimed.calls:
            row = fresh[call.id]
            call.status, call.input, call.output = row.status, row.input, row.output
        waiting = [c for c in claimed.calls if c.status in (C.WAITING, C.IN_DOUBT)]
        if not waiting:
            return False
        turn = Turn.objects.get(pk=claimed.turn_id)
        if turn.status != T.WAITING:
            move_turn(turn, T.WAITING)
        in_doubt = any(c.status == C.IN_DOUBT for c in waiting)
        set_session_status(
            runtime.session, Session.Status.IN_DOUBT if in_doubt else Session.Status.WAITING
        )
        runtime.owner = ""
        runtime.save(update_fields=["owner", "updated_at"])
        events.append(
            runtime,
            [
                EventSpec(
                    "turn.waiting",
                    {"tool_use_ids": [c.tool_use_id for c in waiting]},
                    claimed.turn_id,
                    claimed.owner,
                )
            ],
        )
        return True


def cancel_turn(claimed: Claimed) -> None:
    """Honour a cancel at a step boundary (the engine owns the session)."""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        turn = Turn.objects.get(pk=claimed.turn_id)
        specs: list[EventSpec] = []
        cancel_open_calls(runtime, turn, specs, claimed.owner)
        finish_turn(runtime, turn, T.CANCELED, specs, claimed.owner)
        runtime.save()
        events.append(runtime, specs)
    claimed.turn_done = True


def cancel_open_calls(
    runtime: SessionRuntime, turn: Turn, specs: list[EventSpec], actor: str
) -> None:
    """Give every call of the turn without a result a tool_result (canceled,
    or unknown for one that may have left), so the transcript stays valid and
    the session can take new turns."""
    from approvals.models import Approval

    now = timezone.now()
    open_calls = ToolCall.objects.filter(turn=turn, result_position__isnull=True).order_by("id")
    for call in open_calls:
        if call.status == C.RUNNING:
            # It may have left the process (a poison step): unknown, not undone.
            call.status = C.IN_DOUBT
            specs.append(
                EventSpec(
                    "tool.in_doubt",
                    {"tool_use_id": call.tool_use_id, "name": call.name},
                    turn.id,
                    actor,
                )
            )
        elif call.status not in (C.FAILED, C.DENIED, C.CANCELED, C.SUCCEEDED, C.IN_DOUBT):
            check_tool_move(call, C.CANCELED)
            call.status = C.CANCELED
        text = "Canceled by an operator before this tool ran."
        if call.status == C.IN_DOUBT:
            text = "The turn ended; the outcome of this call is unknown."
        elif call.status != C.CANCELED:
            text = call.output or f"Ended with the turn ({call.status})."
        block = {"type": "tool_result", "tool_use_id": call.tool_use_id, "content": text}
        block["is_error"] = True
        Message.objects.create(
            session_id=runtime.session_id,
            position=runtime.transcript_len,
            turn_id=turn.id,
            role="user",
            content=[block],
            created_at=now,
        )
        call.result_position = runtime.transcript_len
        call.is_error, call.finished_at = True, call.finished_at or now
        call.save(update_fields=["status", "result_position", "is_error", "finished_at"])
        runtime.transcript_len += 1
    canceled = Approval.objects.filter(turn=turn, status=Approval.Status.PENDING).update(
        status=Approval.Status.CANCELED, decided_at=now
    )
    if canceled:
        specs.append(EventSpec("approval.canceled", {"count": canceled}, turn.id, actor))


def fail_turn(claimed: Claimed, reason: str) -> None:
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        turn = Turn.objects.get(pk=claimed.turn_id)
        specs: list[EventSpec] = []
        cancel_open_calls(runtime, turn, specs, claimed.owner)
        finish_turn(runtime, turn, T.FAILED, specs, claimed.owner, error=reason)
        runtime.save()
        events.append(runtime, specs)
    claimed.turn_done = True


def note_step_failure(claimed: Claimed, kind: str, reason: str) -> float:
    """A step could not be done now (e.g. the model is overloaded): count the
    attempt, release, and say when to try again. The caller enqueues."""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        runtime.step_attempts += 1
        delay = min(60.0, 2.0**runtime.step_attempts)
        runtime.wake_at = timezone.now() + timedelta(seconds=delay)
        runtime.owner = ""
        runtime.save()
        data = {"reason": reason[:2000], "attempt": runtime.step_attempts, "retry_in_s": delay}
        events.append(runtime, [EventSpec(kind, data, claimed.turn_id, claimed.owner)])
    return delay


def release(claimed: Claimed) -> None:
    SessionRuntime.objects.filter(pk=claimed.session_id, fence=claimed.fence).update(
        owner="", updated_at=timezone.now()
    )


def finish_turn(
    runtime: SessionRuntime,
    turn: Turn,
    status: str,
    specs: list[EventSpec],
    actor: str,
    error: str = "",
) -> None:
    move_turn(
        turn,
        status,
        finished_at=timezone.now(),
        error=error,
        steps=runtime.turn_steps,
        input_tokens=runtime.turn_input_tokens,
        output_tokens=runtime.turn_output_tokens,
    )
    if runtime.current_turn_id == turn.id:
        runtime.current_turn_id = None
        runtime.cancel_requested = False
    if Turn.objects.filter(session_id=runtime.session_id, status=T.ACCEPTED).exists():
        set_session_status(runtime.session, Session.Status.RUNNING)  # a queued turn is next
    else:
        ended = {T.FAILED: Session.Status.FAILED, T.CANCELED: Session.Status.CANCELED}
        set_session_status(runtime.session, ended.get(status, Session.Status.IDLE))
    data = {"number": turn.number, "error": error} if error else {"number": turn.number}
    specs.append(EventSpec(f"turn.{status}", data, turn.id, actor))


def move_turn(turn: Turn, status: str, **fields: Any) -> None:
    check_turn_move(turn, status)
    turn.status = status
    for name, value in fields.items():
        setattr(turn, name, value)
    turn.save(update_fields=["status", *fields])


def set_session_status(session: Session, status: str) -> None:
    if session.status != status:
        session.status = status
        session.save(update_fields=["status", "updated_at"])


# --- Queries the engine and the sweeper share ---------------------------------


def is_runnable(session_id: int) -> bool:
    """Has work, no owner, and is not backing off."""
    return (
        Session.objects.filter(pk=session_id, status=Session.Status.RUNNING, runtime__owner="")
        .filter(Q(runtime__wake_at__isnull=True) | Q(runtime__wake_at__lte=timezone.now()))
        .exists()
    )
