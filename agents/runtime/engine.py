"""The step loop: claim, act, record.

`advance(session_id)` is what the Celery task calls, on one slot (thread) of
a worker process that drives many sessions at once. It claims the session
(or returns: a live slot is on it), then runs the turn's consecutive steps in
this one task, each step one of:

- a model call: build the request from the transcript, stream the reply
  (no transaction open), record it with its tool calls (store.record_reply);
- a tool call: it is already durably `running` (marked in the commit before),
  run it (no transaction open), record its result (store.record_tool_result);
- a control transition: honour a cancel, park for a human, fail a turn.

It stops when the turn ends and no other is queued, when the turn waits on
a human, when a step must be retried later, or after a time slice while
other work waits for a slot (then it re-enqueues itself, so one long turn
cannot hog a slot: Slice).

Claims and records borrow a pooled connection; every network wait (the model
stream, the tool call) starts by giving it back (store.pool), so the slots
waiting on the network hold no connection. Each wait has its deadline,
enforced here, not by Celery (whose time limits do not apply to a thread
pool): the cancel watcher cuts a model call at AGENTDESK_MODEL_TIMEOUT_S,
tooling cuts a tool call at the tool's timeout.
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents import budgets
from agents.llm import get_model_client
from agents.llm.base import ModelAborted, ModelReply, ModelRequest, ModelUnavailable
from agents.models import ToolCall
from agents.observability import observe
from agents.per_process import PerProcess
from agents.runtime import cancel, dispatch, hooks, live, memory, ownership, store, tooling, triage
from agents.runtime.memory import build_messages  # (a name bench/profile.py times here)
from agents.runtime.state import CallState, Claimed
from agents.runtime.steps import CallSteps
from agents.runtime.store import budget as budget_store
from agents.runtime.store import pool
from agents.runtime.store import steps as steps_store
from agents.tools.base import Kind, Tool, ToolContext
from agents.tools.profile import Profile
from agents.transitions import IllegalTransition

log = logging.getLogger(__name__)
S = ToolCall.Status


class Stop(enum.Enum):
    TURN_ENDED = "turn_ended"  # claim again: a queued turn may be next
    PARKED = "parked"  # waiting on a human; released
    RETRY_LATER = "retry_later"  # released, re-enqueued with a delay
    SLICE_OVER = "slice_over"  # time to let other sessions run


def advance(session_id: int) -> None:
    try:
        _drive(session_id)
        # Work that arrived while we drove found our name on the session and
        # left it to us, or our slice was over with the turn unfinished; we
        # have let go, so look once more. (The one trigger a sliced session
        # gets: _drive sending one too put it in the queue twice, and every
        # other slot past its slice counted both as work waiting for it.)
        if store.is_runnable(session_id):
            dispatch.enqueue(session_id)
    finally:
        pool.give_back()


class Slice:
    """How long this task goes on driving its session before it lets go of
    the slot and re-enqueues itself: one AGENTDESK_TASK_SLICE_S while other
    work waits in the broker's queue for a slot; slice after slice while
    none does, up to AGENTDESK_TASK_MAX_S (a task must end well inside the
    broker's visibility timeout). Letting go costs a claim, which reloads
    the transcript, and a trip through the queue: at 10 s a model call,
    every turn of a 2,000-ticket burst ran past one slice and was claimed
    twice (bench.intake) for slots nobody waited for.

    As many slots let go as triggers wait (`_yields`), not every slot past
    its slice: they all see the same queue, and each that lets go puts its
    own session in it, which the next one saw as more work waiting. A
    2,000-ticket burst at 10 s a call on two fresh workers, whose first
    turns ran past one slice, took 133-195 s that way (every session
    claimed twice, three triggers a ticket, twice the workers' CPU) and 98 s
    without it (bench.intake --intake "" --bursts 2000@10000)."""

    def __init__(self) -> None:
        now = time.monotonic()
        self.until = now + settings.AGENTDESK_TASK_SLICE_S
        self.at_most = now + settings.AGENTDESK_TASK_MAX_S

    def over(self) -> bool:
        now = time.monotonic()
        if now <= self.until:
            return False
        if now > self.at_most:
            return True
        waiting = dispatch.work_waiting()
        if not waiting:
            self.until = now + settings.AGENTDESK_TASK_SLICE_S  # look again a slice later
            return False
        return _yields.get().take(waiting, now)  # else again at the next step


class _Yields:
    """The slots of this process that let go of their session for waiting
    work lately: at most one for each trigger waiting. A let-go is counted
    for YIELD_S, about the time a freed slot takes to start on what waited."""

    YIELD_S = 5.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.recent: collections.deque[float] = collections.deque()  # when each let go

    def take(self, waiting: int, now: float) -> bool:
        """Whether this slot lets go, with `waiting` triggers in the queue."""
        with self.lock:
            while self.recent and now - self.recent[0] > self.YIELD_S:
                self.recent.popleft()
            if len(self.recent) >= waiting:
                return False
            self.recent.append(now)
            return True


_yields: PerProcess[_Yields] = PerProcess(_Yields)


def _drive(session_id: int) -> None:
    deadline = Slice()
    try:
        owner = ownership.me()
        claimed = _claim(session_id, owner)
    finally:
        # The trigger that brought us here stays marked until its claim is
        # settled (dispatch.py): from now on the session shows its owner,
        # or had nothing to run. Cleared before the claim, a slot waiting
        # for a pooled connection looked ownerless and unmarked to the
        # sweeper, which sent it a second trigger (1,875 of 2,000 sessions
        # of a burst, bench.intake). Cleared when the claim, or taking the
        # liveness lock again before it, failed too (the database away):
        # the trigger is spent, and the sweeper's next look sends another
        # (left marked, it waited for the mark to go stale: 10 s, up to
        # 2 minutes behind a backlog).
        dispatch.clear_mark(session_id)
    while claimed is not None:  # None: nothing to run, or a live slot is on it
        try:
            with observe.turn(claimed):  # log context, recovery count
                stop = _run_turn(claimed, deadline)
        except store.LostClaim:
            log.warning("session %s: claim lost, stopping", session_id)
            return
        except store.Recorded:  # its answer was lost, not its commit: carry on from it
            store.abandon(claimed)
            return
        except BaseException:
            # A bug, or the database gone mid-step. This process lives on, so
            # its liveness lock would keep the session ours forever: let go
            # the way a dead owner does, and the next claim is a recovery
            # (counted toward the poison-step cap).
            store.abandon(claimed)
            raise
        if stop is Stop.TURN_ENDED:  # answer a parent, cancel unwanted children
            hooks.turn_ended(claimed)
            if claimed.turn_queued is False:
                # The commit that ended the turn released the session and saw
                # no queued turn; one posted since is found by advance()'s
                # look after the lock is released.
                return
        if stop is Stop.SLICE_OVER:  # advance() sends its next trigger
            _release(claimed)
            return
        if stop is not Stop.TURN_ENDED:
            return
        claimed = _claim(session_id, owner)


def _claim(session_id: int, owner: ownership.Owner) -> Claimed | None:
    try:
        return store.claim(session_id, owner)
    except BaseException:
        # It may have committed, its answer lost: then the session shows our
        # name and our live process's key, and no sweeper would look at it.
        store.disown(session_id, owner)
        raise


def _release(claimed: Claimed) -> None:
    try:
        store.release(claimed)
    except BaseException:  # the database away: our name would keep it ours, undriven
        store.abandon(claimed)
        raise


def _run_turn(claimed: Claimed, deadline: Slice) -> Stop:
    profile = hooks.profiles(claimed.profile)
    while not claimed.turn_done:
        if claimed.cancel_requested:
            store.cancel_turn(claimed)
            return Stop.TURN_ENDED
        call = claimed.next_unresolved()
        if call is not None:
            if (stop := _tool_step(claimed, profile, call)) is not None:
                return stop  # parked, or retried later (its provider is down)
            continue
        if deadline.over():
            return Stop.SLICE_OVER
        # Budgets before any call that spends; then memory, as its own step.
        estimate = memory.next_input_tokens(claimed, profile)
        if (stop := _over_budget(claimed, estimate)) is not None:
            return stop
        if (upto := memory.due(claimed)) is not None:
            if (stop := _memory_step(claimed, upto)) is not None:
                return stop
            continue  # spend changed: check the budgets again
        stop = _model_step(claimed, profile, estimate)
        if stop is not None:
            return stop
    return Stop.TURN_ENDED


# --- Tool steps ------------------------------------------------------------------


def _tool_step(claimed: Claimed, profile: Profile, call: CallState) -> Stop | None:
    """One tool call: record an outcome already known, park for a human, or
    run it (marked `running` durably first) and record what it did."""
    if call.status in (S.FAILED, S.DENIED, S.CANCELED):
        # Refused before it ran (bad input, denied, expired): the model reads why.
        step = observe.tool_step(claimed, call)
        _record(claimed, call, tooling.Outcome(call.status, call.output, is_error=True))
        step.end(call.status)
        return None
    if call.status == S.SUCCEEDED:  # a human said what an in-doubt call did
        _record(claimed, call, tooling.Outcome(call.status, call.output))
        return None
    if call.status in (S.WAITING, S.WAITING_SUBAGENT, S.IN_DOUBT):
        return Stop.PARKED if store.park(claimed) else None
    if call.status == S.APPROVED and not call.attempts:
        # Expiry is checked at execution too: an approval whose time ran out
        # before its call could start (a worker down) never runs it.
        rows = hooks.approval_rows.get()
        if (note := rows.lapsed(session_id=claimed.session_id, tool_call_id=call.id)) is not None:
            call.status, call.output = S.DENIED, note
            return _tool_step(claimed, profile, call)
    before = call.status if call.status in (S.PENDING, S.APPROVED) else S.PENDING
    if call.status in (S.PENDING, S.APPROVED):
        store.mark_running(claimed, call)
    tool = profile.tool(call.name)
    if tool is None:  # the profile lost the tool since the reply was recorded
        _record(claimed, call, tooling.Outcome(S.FAILED, f"Error: unknown tool {call.name}", True))
        return None
    return _run_tool(claimed, profile, call, tool, before)


def _run_tool(
    claimed: Claimed, profile: Profile, call: CallState, tool: Tool, before: str
) -> Stop | None:
    """Run the call (`before`: its status before it was marked running).
    (Long for a reason: each kind of outcome's handling, in order.)"""
    reissued = call.id in claimed.in_flight_at_claim
    claimed.in_flight_at_claim.discard(call.id)
    # A tool that gates inside judges its own inner steps (agents/gate.py):
    # it is run again and resumes from its log.
    if reissued and tool.kind == Kind.NOT_IDEMPOTENT and not tool.gated_inside:
        note = (
            "The slot running this call lost its claim mid-call (its worker died, or lost "
            "its database connection); the call may or may not have happened."
        )
        if store.mark_in_doubt(claimed, call, note):
            return Stop.PARKED
        return _tool_step(claimed, profile, call)  # that slot said it never left: run it
    if reissued:  # read-only or idempotent by key: safe to send again, same key
        store.mark_reissued(claimed, call)
    started = time.monotonic()
    step = observe.tool_step(claimed, call)  # metrics, span, log context
    pool.give_back()  # the call may take seconds: hold no connection meanwhile
    outcome = tooling.execute(tool, _context(claimed, profile, call), call.input)
    if outcome.status == tooling.NOT_SENT:  # it never left: wait for the provider
        return _not_sent(claimed, call, outcome, before, step, _ms(started), reissued)
    if outcome.status == S.WAITING_SUBAGENT or outcome.asked is not None:
        step.end(outcome.status)
        if outcome.asked is not None:  # an inner step waits for a person
            return _park_on_inner_step(claimed, call, outcome)
        # handed to a sub-agent: park until it answers
        return Stop.PARKED if hooks.call_waiting(claimed, call) else None
    if outcome.status == S.IN_DOUBT:
        store.mark_in_doubt(claimed, call, outcome.content)
        step.end(outcome.status)
        return Stop.PARKED
    _record_or_note_late(claimed, call, outcome, _ms(started), reissued)
    step.end(outcome.status)
    return None


def _not_sent(
    claimed: Claimed,
    call: CallState,
    outcome: tooling.Outcome,
    before: str,
    step: observe.Step,
    ms: int,
    reissued: bool,
) -> Stop | None:
    """Every try was refused before it left: back to `before`, tried again
    later, or past AGENTDESK_TOOL_UNAVAILABLE_RETRIES the model is told. A
    claim lost meanwhile (the link cut under both) leaves that certainty to
    the new owner, which would otherwise take a not-idempotent call found
    running for one that may have happened (store.note_never_sent)."""
    try:
        if call.attempts <= settings.AGENTDESK_TOOL_UNAVAILABLE_RETRIES:
            step.end("retry_later")
            delay = store.retry_call_later(claimed, call, before, outcome.content)
            dispatch.enqueue(claimed.session_id, countdown=delay)
            return Stop.RETRY_LATER
        failed = tooling.Outcome(S.FAILED, outcome.content, is_error=True)  # tell the model
        _record(claimed, call, failed, ms=ms, reissued=reissued)
    except store.LostClaim:
        try:
            then = store.note_never_sent(claimed, call, status=before, reason=outcome.content)
            log.info("session %s: %s never sent, noted (%s)", claimed.session_id, call.name, then)
        except Exception:  # the database away again: the watchdog notes it once it is back
            log.warning(
                "session %s: %s never sent, not noted yet",
                claimed.session_id,
                call.name,
                exc_info=True,
            )
        raise
    step.end(S.FAILED)
    return None


def _record_or_note_late(
    claimed: Claimed, call: CallState, outcome: tooling.Outcome, ms: int, reissued: bool
) -> None:
    try:
        _record(claimed, call, outcome, ms=ms, reissued=reissued)
    except store.LostClaim:  # what we learned is evidence for whoever decides the call now
        try:
            store.note_late_outcome(
                claimed,
                call,
                status=outcome.status,
                content=outcome.content,
                external_id=outcome.external_id,
            )
        except Exception:  # the database away too: the log keeps it
            log.warning(
                "session %s: %s ended %s after the claim was lost; could not note it: %s",
                claimed.session_id,
                call.name,
                outcome.status,
                outcome.content[:500],
                exc_info=True,
            )
        raise


def _context(claimed: Claimed, profile: Profile, call: CallState) -> ToolContext:
    return ToolContext(
        claimed.key,
        call.idempotency_key,
        call.attempts,
        claimed.context,
        tool_use_id=call.tool_use_id,
        call_id=call.id,
        steps=CallSteps(claimed, call, profile),  # its inner steps, if it has any
    )


def _park_on_inner_step(claimed: Claimed, call: CallState, outcome: tooling.Outcome) -> Stop | None:
    assert outcome.asked is not None
    try:
        steps_store.park_on_inner_step(claimed, call, outcome.asked)
    except IllegalTransition as exc:  # the tool asked again about a step already on record
        _record(claimed, call, tooling.Outcome(S.FAILED, f"Error: {exc}", is_error=True))
        return None
    return Stop.PARKED


def _record(
    claimed: Claimed, call: CallState, outcome: tooling.Outcome, ms: int = 0, reissued=False
) -> None:
    content = outcome.content
    edited = _edited_note(claimed, call)
    if edited:
        content = f"{edited}\n{content}"
    # Written on every step: what the desk's timeline shows and the audit
    # needs, nothing the turn already says (its profile is on turn.started).
    data: dict[str, Any] = {"tool_use_id": call.tool_use_id, "name": call.name}
    data.update(status=outcome.status, ms=ms)
    if call.attempts > 1:  # the first attempt goes without saying
        data["attempt"] = call.attempts
    if outcome.external_id:
        data["external_id"] = outcome.external_id
    if outcome.is_error:  # the audit says why without opening the transcript
        data["error"] = outcome.content[:300]
    if reissued:
        data["reissued"] = True
    store.record_retrying(  # the call happened: a lost connection must not undo that
        claimed,
        lambda: store.record_tool_result(
            claimed,
            call,
            content=content,
            is_error=outcome.is_error,
            status=outcome.status,
            external_id=outcome.external_id,
            data=data,
            next_call=claimed.next_to_run_after(call),
        ),
    )


def _edited_note(claimed: Claimed, call: CallState) -> str:
    """Tell the model when an approver changed the arguments it asked for."""
    if call.status != S.RUNNING or not claimed.transcript:
        return ""
    for row in reversed(claimed.transcript):
        if row["role"] != "assistant":
            continue
        for block in row["content"]:
            if block.get("id") == call.tool_use_id and block.get("input") != call.input:
                return f"Note: an approver changed the arguments before this ran: {call.input}"
        return ""
    return ""


# --- Model steps -----------------------------------------------------------------


def _model_step(claimed: Claimed, profile: Profile, estimate: int = 0) -> Stop | None:
    request = ModelRequest(
        system=memory.system_with_memory(profile.system, claimed.memory_summary),
        tools=[tool.schema_for_model() for tool in profile.tools],
        messages=build_messages(claimed.transcript),
        max_tokens=_max_tokens(claimed, estimate),
    )
    stream = live.TextStream(claimed.session_id, claimed.turn_id)
    started = time.monotonic()
    step = observe.model_step(claimed)  # metrics, span, log context
    try:
        reply = _complete(claimed, request, step, stream.push, "model.failed")
    finally:
        stream.close()
    if isinstance(reply, Stop):
        stream.discard()
        return reply
    step.replied(reply)
    _record_reply(claimed, profile, reply, _ms(started))
    step.end("ok")
    stream.discard()
    return None


def _complete(
    claimed: Claimed,
    request: ModelRequest,
    step: observe.Step,
    on_text: Callable[[str], None],
    failure_kind: str,
) -> ModelReply | Stop:
    """One model call, abortable by a cancel and cut at its deadline. A
    cancel ends the turn; an unavailable model (429, 5xx, timeout) is a step
    failure retried later."""
    pool.give_back()  # the call takes seconds: hold no connection meanwhile
    timeout_s = settings.AGENTDESK_MODEL_TIMEOUT_S
    with cancel.watch(claimed.session_id, timeout_s) as abort:
        try:
            return get_model_client().complete(request, on_text=on_text, abort=abort)
        except ModelAborted as exc:
            if not abort.timed_out:
                step.end("aborted")
                store.cancel_turn(claimed)
                return Stop.TURN_ENDED
            failure: Exception = ModelUnavailable(f"no reply within {timeout_s:g}s: {exc}")
        except ModelUnavailable as exc:
            failure = exc
    step.end("unavailable", str(failure))
    delay = store.note_step_failure(claimed, failure_kind, str(failure))
    dispatch.enqueue(claimed.session_id, countdown=delay)
    return Stop.RETRY_LATER


# Stop reasons that are not an answer: the turn goes on from the reply (the
# next call sends it back, and asks the model to go on: memory.GO_ON_PROMPT),
# at most this many times in a row; then it fails with the reason.
GO_ON = {"max_tokens": 1, "pause_turn": 3}


def _stop_outcome(claimed: Claimed, reply: ModelReply) -> tuple[bool, str]:
    """(whether the reply ends the turn, why the turn fails instead)."""
    stop = reply.stop_reason
    if stop == "refusal":
        return False, f"The model refused: {reply.text.strip()[:500] or '(no text)'}"
    if reply.tool_uses or stop not in GO_ON:
        return not reply.tool_uses, ""
    in_a_row = 0  # replies already recorded since the last user row
    for row in reversed(claimed.transcript):
        if row["role"] != "assistant":
            break
        in_a_row += 1
    if in_a_row >= GO_ON[stop]:
        return False, f"The reply stopped at {stop} {in_a_row + 1} times in a row"
    return False, ""


def _undone(claimed: Claimed) -> str:
    """Why a turn that would end is a failure: the customer did not get what
    it was for (a reply, a refund); a failed turn is on the desk's list."""
    undone = store.undone_actions(claimed)
    if not undone:
        return ""
    return (
        f"{', '.join(undone)} could not be done: the provider stayed unreachable "
        "through every retry. A person must follow up with the customer."
    )


def _record_reply(claimed: Claimed, profile: Profile, reply: ModelReply, ms: int) -> None:
    calls, approvals, refusals = triage.triage_calls(claimed, profile, reply)
    finish, failure = _stop_outcome(claimed, reply)
    if finish and (undone := _undone(claimed)):
        finish, failure = False, undone
    # Names only: ids, inputs and statuses are on the tool call rows; every
    # byte here is written on every step.
    summary = [c["name"] for c in calls]
    usage = {"input": reply.input_tokens, "output": reply.output_tokens}
    data = {"stop_reason": reply.stop_reason, "usage": usage, "ms": ms, "tool_calls": summary}
    cost = budgets.cost_micros(reply.model, reply.input_tokens, reply.output_tokens)
    data["model"] = reply.model
    if cost:  # no price configured for the model: nothing to add up
        data["cost_micros"] = cost
    event_list: list[dict[str, Any]] = [{"kind": "model.replied", "data": data}]
    for approval in approvals:
        event_list.append(
            {
                "kind": "approval.requested",
                "data": {"tool_use_id": approval["tool_use_id"], "policy": approval["policy"]},
            }
        )
    event_list.extend({"kind": "tool.refused", "data": r} for r in refusals)
    if finish:
        event_list.append({"kind": "turn.succeeded", "data": {"number": claimed.turn_number}})
    _, ids = store.record_retrying(  # the model was paid: a lost connection must not undo that
        claimed,
        lambda: store.record_reply(
            claimed,
            content=reply.content,
            calls=calls,
            approvals=approvals,
            event_list=event_list,
            in_tokens=reply.input_tokens,
            out_tokens=reply.output_tokens,
            finish=finish,
            cost_micros=cost,
        ),
    )
    _spent(claimed, reply.input_tokens + reply.output_tokens, cost)
    claimed.calls = [CallState.from_recorded(c, ids[c["tool_use_id"]]) for c in calls]
    claimed.in_flight_at_claim = set()
    claimed.turn_done = finish
    if failure:  # the reply is on record (its text shown); the turn ends failed
        store.fail_turn(claimed, failure)


# --- Budgets and memory (agents/budgets.py, agents/runtime/memory.py) --------------


def _spend(claimed: Claimed) -> budgets.Spend:
    return budgets.Spend(
        turn_steps=claimed.turn_steps,
        turn_tokens=claimed.turn_tokens,
        turn_cost_micros=claimed.turn_cost_micros,
        total_tokens=claimed.total_tokens,
        total_cost_micros=claimed.total_cost_micros,
        turn_started_at=claimed.turn_started_at,
    )


def _spent(claimed: Claimed, tokens: int, cost: int) -> None:
    claimed.turn_tokens += tokens
    claimed.total_tokens += tokens
    claimed.turn_cost_micros += cost
    claimed.total_cost_micros += cost


def _over_budget(claimed: Claimed, estimate: int) -> Stop | None:
    """Refuse the next model call when it would cross a budget: a turn limit
    fails the turn, a session limit pauses the session (agents/budgets.py)."""
    exceeded = budgets.check(claimed.limits, _spend(claimed), timezone.now(), estimate)
    if exceeded is None:
        return None
    log.info("session %s: %s", claimed.session_id, exceeded.reason)
    if exceeded.scope == budgets.SESSION:
        budget_store.pause_over_budget(claimed, exceeded)
        return Stop.PARKED
    budget_store.end_turn_over_budget(claimed, exceeded)
    return Stop.TURN_ENDED


def _max_tokens(claimed: Claimed, estimate: int) -> int:
    default = settings.AGENTDESK_MODEL_MAX_TOKENS
    return budgets.output_allowance(claimed.limits, _spend(claimed), estimate, default)


def _memory_step(claimed: Claimed, upto: int) -> Stop | None:
    """Summarize the rows before `upto` (one model call), record the snapshot."""
    request = memory.summary_request(claimed, upto)
    started = time.monotonic()
    step = observe.model_step(claimed)  # a model call like any other: metrics, span, logs
    reply = _complete(claimed, request, step, lambda _: None, "memory.failed")
    if isinstance(reply, Stop):
        return reply
    step.replied(reply)
    summary = reply.text.strip()
    cost = budgets.cost_micros(reply.model, reply.input_tokens, reply.output_tokens)
    usage = {"input": reply.input_tokens, "output": reply.output_tokens}
    data = {"from_position": claimed.transcript_base, "chars": len(summary), "usage": usage}
    data.update(model=reply.model, cost_micros=cost, ms=_ms(started))
    budget_store.record_memory(
        claimed,
        upto=upto,
        summary=summary,
        model=reply.model,
        in_tokens=reply.input_tokens,
        out_tokens=reply.output_tokens,
        cost_micros=cost,
        data=data,
    )
    _spent(claimed, reply.input_tokens + reply.output_tokens, cost)
    memory.remember(claimed, upto, summary)
    step.end("ok")
    return None


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
