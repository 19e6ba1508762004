"""The control transitions (DESIGN: a step that is neither a model call nor a
tool call) and the rarer writes: marking a call before it leaves, parking for a
human, in doubt, cancel, failure, backoff.

Each runs in `transaction.atomic()` with the session's runtime row locked
and the fence checked (store.lock), through the ORM: they are not per-step
costs, and readable beats fast here.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from agents import events
from agents.backoff import backoff_s
from agents.events import EventSpec
from agents.fields import json_column
from agents.models import PARKED_CALLS, Event, Session, SessionRuntime, ToolCall, Turn
from agents.observability import observe
from agents.runtime import dispatch, hooks
from agents.runtime.state import CallState, Claimed
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


# Starts what a slot that lost its claim mid-call learned (note_late_outcome).
LATE_OUTCOME = "Late outcome, from the slot that was running this call when it lost its claim"


def note_late_outcome(
    claimed: Claimed, call: CallState, *, status: str, content: str, external_id: str = ""
) -> None:
    """A slot lost its claim (its liveness lock went with a cut connection;
    it was alive) while `call` ran, and then learned how the call ended: not
    a record (the fence moved on, so this changes no state), but evidence,
    kept where the person deciding the call sees it. The new owner takes a
    not-idempotent call found running for in doubt; its note, on the call's
    output, gets this appended (mark_in_doubt reads it if it comes first)."""
    text = f"{LATE_OUTCOME} (fence {claimed.fence}): {status}"
    if external_id:
        text += f", external id {external_id}"
    text += f". What it returned: {content[:1500]}"
    with transaction.atomic():
        runtime = lock_session(claimed.session_id)  # no fence: evidence, not a record
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        if row.status == C.RUNNING and not row.output:
            row.output = text  # the new owner's in-doubt note will carry it
        elif row.status == C.IN_DOUBT:
            row.output = f"{row.output}\n\n{text}"
        else:
            text = ""  # already settled (re-sent with its key, or resolved): the log says it
        if text:
            row.save(update_fields=["output"])
        data = {"tool_use_id": call.tool_use_id, "name": call.name, "status": status}
        data.update(fence=claimed.fence, external_id=external_id, output=content[:1500])
        events.append(
            runtime, [EventSpec("tool.late_outcome", data, claimed.turn_id, claimed.owner)]
        )


# Starts what a slot that lost its claim left on a call it knew never left (note_never_sent).
NEVER_SENT = "Never sent, said the slot that was running this call when it lost its claim"


def note_never_sent(claimed: Claimed, call: CallState, *, status: str, reason: str) -> str:
    """A slot lost its claim while `call` ran (its liveness lock went with a
    cut connection; the slot was alive), and every try of the call had been
    refused before it left the process (NotSent: its provider, or the link,
    was down). That is certain, and it is evidence for the session's new
    owner, which takes a not-idempotent call it finds `running` for one that
    may have been sent, and asks a person. Under the session lock, unless a
    later attempt or a person settled the call first (then only the event):

    - still `running` (not judged yet): back to `status` (pending, or
      approved), as retry_call_later would have put it; the new owner runs
      it (mark_in_doubt finds it not running);
    - `in_doubt`, its turn parked on it: back to be run again (approved, as
      a person's "retry" does), and the turn resumes unless something else
      holds it;
    - `in_doubt` and closed with its ended turn: canceled (it never ran).

    A person resolving the same call is serialized by the same lock: who
    comes first wins, the other finds the new state (toolcall_resolve then
    answers 409). No fence: evidence, not a record. Tried again on a lost
    connection; a second run finds its own event and writes nothing.
    Returns what became of the call (the event's `then`)."""
    return retrying(
        claimed,
        "note of a call never sent",
        lambda: _note_never_sent(claimed, call, status, reason),
    )


def _note_never_sent(claimed: Claimed, call: CallState, status: str, reason: str) -> str:
    with transaction.atomic():
        runtime = lock_session(claimed.session_id)
        if _noted_never_sent(claimed, call):  # our first commit landed, its answer was lost
            return "noted"
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        then, to = _never_sent_then(row, call, status)
        text = (
            f"{NEVER_SENT} (fence {claimed.fence}, attempt {call.attempts}): every try was "
            f"refused before it left the process, so it did not happen. {reason[:1500]}"
        )
        if to:
            toolcall_move(row, to, output=text)
        data = {"tool_use_id": call.tool_use_id, "name": call.name, "attempt": call.attempts}
        data.update(fence=claimed.fence, then=then, status=row.status, reason=reason[:1500])
        specs = [EventSpec("tool.never_sent", data, row.turn_id, claimed.owner)]
        if then == "resumed":
            resume_if_unblocked(runtime, row.turn_id, specs, claimed.owner)
        events.append(runtime, specs)
    return then


def _never_sent_then(row: ToolCall, call: CallState, status: str) -> tuple[str, str]:
    """(what becomes of a call that certainly never left, its new status or "")."""
    if row.attempts != call.attempts:
        return "settled", ""  # run again since (this was an earlier attempt)
    if row.status == C.RUNNING:
        return "to_run", status
    if row.status == C.IN_DOUBT and row.result_position is None:
        return "resumed", C.APPROVED
    if row.status == C.IN_DOUBT:
        return "closed", C.CANCELED
    return "settled", ""  # a person resolved it first


def _noted_never_sent(claimed: Claimed, call: CallState) -> bool:
    noted = Event.objects.filter(
        session_id=claimed.session_id, turn_id=claimed.turn_id, kind="tool.never_sent"
    ).values_list("data", flat=True)
    return any(
        data.get("tool_use_id") == call.tool_use_id and data.get("fence") == claimed.fence
        for data in map(json_column, noted)
    )


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


def retry_call_later(claimed: Claimed, call: CallState, status: str, reason: str) -> float:
    """`call` certainly never left (every try was refused: the provider is
    down). It goes back to `status` (pending, or approved) so the next claim
    does not take it for a call a dead owner may have sent, and the step is
    tried again after the step backoff, counted like a model that is down
    (so bounded by AGENTDESK_MAX_STEP_ATTEMPTS). The caller enqueues. Tried
    again on a lost connection while the fence holds (store/retry.py); a
    claim lost meanwhile is the caller's to note (note_never_sent)."""
    return retrying(
        claimed,
        "retry of a call never sent",
        lambda: _retry_call_later(claimed, call, status, reason),
    )


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
    (A call's result lives in its tool.finished event, which says why.)"""
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
