"""The control transitions (DESIGN: a step that is neither a model call nor a
tool call) and the rarer writes: marking a call before it leaves, parking for a
human, in doubt, cancel, failure, backoff. (What a slot that lost its claim
learned: evidence.py; a parked turn handed back: resume.py.)

Each runs in `transaction.atomic()` with the session's runtime row locked
and the fence checked (store.lock), through the ORM: they are not per-step
costs, and readable beats fast here.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial

from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from agents import events
from agents.backoff import backoff_s
from agents.events import EventSpec
from agents.fields import json_column
from agents.models import PARKED_CALLS, Event, Session, SessionRuntime, ToolCall, Turn
from agents.observability import observe
from agents.runtime import hooks
from agents.runtime.state import CallState, Claimed
from agents.runtime.store.evidence import LATE_OUTCOME, never_sent_later
from agents.runtime.store.lock import lock_session
from agents.runtime.store.retry import retrying
from agents.tools.base import UNAVAILABLE, Kind
from agents.transitions import session_move, toolcall_move, turn_move

C = ToolCall.Status
T = Turn.Status


def mark_running(claimed: Claimed, call: CallState) -> None:
    """The durable record that `call` may leave the process from now on."""
    with transaction.atomic():
        lock_session(claimed.session_id, claimed.fence)
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        toolcall_move(
            row, C.RUNNING, attempts=row.attempts + 1, started_at=timezone.now(), input=call.input
        )
    call.status, call.attempts = C.RUNNING, row.attempts


def mark_reissued(claimed: Claimed, call: CallState) -> None:
    """A dead owner left `call` running: count the new attempt, durably, before
    it is sent again with the same idempotency key."""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        # Put back by the slot before us, which knew it never left
        # (note_never_sent): marked running again, as any new attempt is.
        toolcall_move(row, C.RUNNING, attempts=row.attempts + 1, started_at=timezone.now())
        data = {"tool_use_id": call.tool_use_id, "name": call.name, "attempt": row.attempts}
        events.append(runtime, [EventSpec("tool.reissued", data, claimed.turn_id, claimed.owner)])
    call.status, call.attempts = C.RUNNING, row.attempts


def mark_in_doubt(claimed: Claimed, call: CallState, note: str) -> bool:
    """The outcome cannot be known: stop and ask a human (never resend).

    False, with nothing written, when the call is not running any more: the
    slot that lost its claim while it ran put it back, having learned that
    it never left (note_never_sent), so it is to be run, not doubted; `call`
    then shows the status it was put back to."""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        if row.status != C.RUNNING:
            call.status, call.output = row.status, row.output
            return False
        if row.output.startswith(LATE_OUTCOME):  # the previous slot already told us
            note = f"{note}\n\n{row.output}"
        toolcall_move(row, C.IN_DOUBT, output=note, finished_at=timezone.now())
        observe.in_doubt()
        turn = Turn.objects.get(pk=claimed.turn_id)
        turn_move(turn, T.WAITING)
        session_move(runtime.session, Session.Status.IN_DOUBT)
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
    return True


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
        waiting = [c for c in claimed.calls if c.status in PARKED_CALLS]
        if not waiting:
            return False
        turn = Turn.objects.get(pk=claimed.turn_id)
        turn_status, session_status = _parked_statuses({c.status for c in waiting})
        if turn.status != turn_status:
            turn_move(turn, turn_status)
        session_move(runtime.session, session_status)
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


def _parked_statuses(waiting: set[str]) -> tuple[str, str]:
    """(the turn's, the session's) status for a turn parked on these calls: a
    person first (an unknown outcome, then an approval), else the sub-agent."""
    if waiting <= {C.WAITING_SUBAGENT}:
        return T.WAITING_SUBAGENT, Session.Status.WAITING_SUBAGENT
    if C.IN_DOUBT in waiting:
        return T.WAITING, Session.Status.IN_DOUBT
    return T.WAITING, Session.Status.WAITING


def cancel_turn(claimed: Claimed) -> None:
    """Honour a cancel at a step boundary (the engine owns the session)."""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        turn = Turn.objects.get(pk=claimed.turn_id)
        specs: list[EventSpec] = []
        cancel_open_calls(runtime, turn, specs, claimed.owner)
        finish_turn(runtime, turn, T.CANCELED, specs, claimed.owner)
        runtime.owner = ""  # a clean stop: the next claim is not a recovery
        runtime.save()
        events.append(runtime, specs)
    claimed.turn_done = True


def cancel_open_calls(
    runtime: SessionRuntime, turn: Turn, specs: list[EventSpec], actor: str
) -> None:
    """Give every call of the turn without a result a tool_result (canceled,
    or unknown for one that may have left), so the transcript stays valid and
    the session can take new turns."""
    now = timezone.now()
    open_calls = ToolCall.objects.filter(  # through the session's index
        session_id=turn.session_id, turn=turn, result_position__isnull=True
    ).order_by("id")
    for call in open_calls:
        if call.parent_id is not None:  # an inner step: no transcript row of its own
            _close_inner_step(call, now)
        else:
            _close_call(runtime, turn, call, specs, actor, now)
    canceled = hooks.approval_rows.get().cancel_pending(turn_id=turn.id, now=now)
    if canceled:
        specs.append(EventSpec("approval.canceled", {"count": canceled}, turn.id, actor))


def _close_call(
    runtime: SessionRuntime,
    turn: Turn,
    call: ToolCall,
    specs: list[EventSpec],
    actor: str,
    now: datetime,
) -> None:
    """One open call of an ending turn gets its tool_result row."""
    to = call.status
    text = "Canceled by an operator before this tool ran."
    if call.status == C.RUNNING and call.kind == Kind.READ_ONLY:
        # A lookup changed nothing whether or not it got through: there is
        # nothing for a person to check.
        to, text = C.CANCELED, STOPPED_READ_ONLY
    elif call.status == C.RUNNING:
        # It may have left the process (a poison step): unknown, not undone.
        to = C.IN_DOUBT
        data = {"tool_use_id": call.tool_use_id, "name": call.name}
        specs.append(EventSpec("tool.in_doubt", data, turn.id, actor))
    elif call.status not in (C.FAILED, C.DENIED, C.CANCELED, C.SUCCEEDED, C.IN_DOUBT):
        to = C.CANCELED
    if to == C.IN_DOUBT:
        text = "The turn ended; the outcome of this call is unknown."
    elif to != C.CANCELED:
        text = call.output or f"Ended with the turn ({to})."
    block = {"type": "tool_result", "tool_use_id": call.tool_use_id, "content": text}
    block["is_error"] = True
    specs.append(  # the result row rides on the event that says why
        EventSpec(
            "tool.closed",
            {"tool_use_id": call.tool_use_id, "name": call.name, "status": to},
            turn.id,
            actor,
            position=runtime.transcript_len,
            role="user",
            content=[block],
        )
    )
    finished_at = call.finished_at or now
    output = call.output
    if call.status == C.RUNNING:  # the desk shows why (with any late outcome noted)
        output = f"{text}\n\n{output}" if output else text
    toolcall_move(
        call,
        to,
        result_position=runtime.transcript_len,
        is_error=True,
        finished_at=finished_at,
        output=output,
    )
    runtime.transcript_len += 1


# A read-only call still running when its turn ended (_close_call, _close_inner_step).
STOPPED_READ_ONLY = (
    "Stopped when the turn ended, before its result was recorded. It only reads, so "
    "nothing was changed either way."
)


def _close_inner_step(call: ToolCall, now: datetime) -> None:
    """An inner step of a call that ends with its turn: one that may have
    left is unknown, unless its kind says it only reads; one that never
    started is canceled."""
    if call.status == C.RUNNING and call.kind == Kind.READ_ONLY:
        toolcall_move(call, C.CANCELED, finished_at=now, output=STOPPED_READ_ONLY)
    elif call.status == C.RUNNING:
        toolcall_move(call, C.IN_DOUBT, finished_at=now)
    elif call.status in (C.PENDING, C.WAITING, C.APPROVED):
        toolcall_move(call, C.CANCELED, finished_at=now)


def fail_turn(claimed: Claimed, reason: str) -> None:
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        turn = Turn.objects.get(pk=claimed.turn_id)
        specs: list[EventSpec] = []
        cancel_open_calls(runtime, turn, specs, claimed.owner)
        finish_turn(runtime, turn, T.FAILED, specs, claimed.owner, error=reason)
        runtime.owner = ""  # a clean stop: the next claim is not a recovery
        runtime.save()
        events.append(runtime, specs)
    claimed.turn_done = True


def note_step_failure(claimed: Claimed, kind: str, reason: str) -> float:
    """A step could not be done now (e.g. the model is overloaded): count the
    attempt, release, and say when to try again. The caller enqueues. A lost
    connection does not give the step up (the next claim would be taken for
    a recovery): tried again while the fence holds (store/retry.py)."""
    return retrying(
        claimed, "note of a failed step", lambda: _note_step_failure(claimed, kind, reason)
    )


def _note_step_failure(claimed: Claimed, kind: str, reason: str) -> float:
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        if runtime.owner != claimed.owner:  # released by this very note: its answer was lost
            return _wait_left(runtime)
        runtime.step_attempts += 1
        delay = backoff_s(runtime.step_attempts, base=2.0, cap=60.0)
        runtime.wake_at = timezone.now() + timedelta(seconds=delay)
        runtime.owner = ""
        runtime.save()
        data = {"reason": reason[:2000], "attempt": runtime.step_attempts, "retry_in_s": delay}
        events.append(runtime, [EventSpec(kind, data, claimed.turn_id, claimed.owner)])
    return delay


def _wait_left(runtime: SessionRuntime) -> float:
    """The backoff a committed note set, as much of it as is left. (Only the
    owner clears `owner`, under its fence: with the fence still ours and no
    owner, the note that released the session was ours.)"""
    if runtime.wake_at is None:
        return 0.0
    return max(0.0, (runtime.wake_at - timezone.now()).total_seconds())


def retry_call_later(claimed: Claimed, call: CallState, status: str, reason: str) -> float:
    """`call` certainly never left (every try was refused: the provider is
    down). It goes back to `status` (pending, or approved) so the next claim
    does not take it for a call a dead owner may have sent, and the step is
    tried again after the step backoff, counted like a model that is down
    (so bounded by AGENTDESK_MAX_STEP_ATTEMPTS). The caller enqueues. Tried
    again on a lost connection while the fence holds (store/retry.py); a
    claim lost meanwhile is the caller's to note (store.note_never_sent),
    and a database away for longer, the watchdog's (evidence.py)."""
    try:
        return retrying(
            claimed,
            "retry of a call never sent",
            lambda: _retry_call_later(claimed, call, status, reason),
        )
    except (OperationalError, InterfaceError):
        never_sent_later(claimed, call, status=status, reason=reason)
        raise


def _retry_call_later(claimed: Claimed, call: CallState, status: str, reason: str) -> float:
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        if runtime.owner != claimed.owner:  # put back by this very write: its answer was lost
            call.status = status
            return _wait_left(runtime)
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        toolcall_move(row, status)
        runtime.step_attempts += 1
        delay = backoff_s(runtime.step_attempts, base=2.0, cap=60.0)
        runtime.wake_at = timezone.now() + timedelta(seconds=delay)
        runtime.owner = ""
        runtime.save()
        data = {"tool_use_id": call.tool_use_id, "name": call.name, "reason": reason[:2000]}
        data.update(attempt=row.attempts, retry_in_s=delay)
        events.append(
            runtime, [EventSpec("tool.unavailable", data, claimed.turn_id, claimed.owner)]
        )
    call.status = status
    return delay


def undone_actions(claimed: Claimed) -> list[str]:
    """Calls of the running turn that change something and failed because
    their provider could not be reached: what the customer did not get.
    (A call's result lives in its tool.finished event, which says why.)
    Read between a paid model call and its record, so a lost connection is
    tried again as the record is: given up, the reply was lost and the
    model paid again (issue 26; seen 11 times in one chaos campaign)."""
    return retrying(claimed, "read undone actions", partial(_undone_actions, claimed))


def _undone_actions(claimed: Claimed) -> list[str]:
    failed = dict(
        ToolCall.objects.filter(
            session_id=claimed.session_id, turn_id=claimed.turn_id, status=C.FAILED
        )
        .exclude(kind=Kind.READ_ONLY)
        .values_list("tool_use_id", "name")
    )
    if not failed:
        return []
    finished = Event.objects.filter(
        session_id=claimed.session_id, turn_id=claimed.turn_id, kind="tool.finished"
    ).values_list("data", flat=True)
    undone = set()
    for data in finished:
        data = json_column(data)
        if data.get("tool_use_id") in failed and UNAVAILABLE in data.get("error", ""):
            undone.add(failed[data["tool_use_id"]])
    return sorted(undone)


def finish_turn(
    runtime: SessionRuntime,
    turn: Turn,
    status: str,
    specs: list[EventSpec],
    actor: str,
    error: str = "",
) -> None:
    # The runtime's turn counters belong to the running turn; a queued turn
    # canceled while another runs spent nothing.
    current = runtime.current_turn_id == turn.id
    turn_move(
        turn,
        status,
        finished_at=timezone.now(),
        error=error,
        steps=runtime.turn_steps if current else 0,
        input_tokens=runtime.turn_input_tokens if current else 0,
        output_tokens=runtime.turn_output_tokens if current else 0,
        cost_micros=runtime.turn_cost_micros if current else 0,
    )
    observe.turn_finished(runtime.session.key, turn)  # counted and traced on commit
    if current:
        runtime.current_turn_id = None
        runtime.cancel_requested = False
    if not current and _in_progress(runtime, turn):
        # A queued turn canceled while another is in progress (a person's
        # cancel, a message that interrupts): the session follows the turn in
        # progress, whose owner (or the claim after a dead one) settles both.
        # Marking the session canceled here left a running turn that the
        # sweeper, which looks at running sessions, never took over when its
        # owner died (issue 26: ticket:850).
        pass
    elif Turn.objects.filter(session_id=runtime.session_id, status=T.ACCEPTED).exists():
        session_move(runtime.session, Session.Status.RUNNING)  # a queued turn is next
    else:
        ended = {T.FAILED: Session.Status.FAILED, T.CANCELED: Session.Status.CANCELED}
        session_move(runtime.session, ended.get(status, Session.Status.IDLE))
    data = {"number": turn.number, "error": error} if error else {"number": turn.number}
    specs.append(EventSpec(f"turn.{status}", data, turn.id, actor))


def _in_progress(runtime: SessionRuntime, turn: Turn) -> bool:
    """Whether another turn of the session is running or parked (not queued,
    not over): the session's status is that turn's to set."""
    others = Turn.objects.filter(session_id=runtime.session_id).exclude(pk=turn.pk)
    return others.exclude(status__in=[T.ACCEPTED, *Turn.TERMINAL]).exists()
