"""What the step engine and the services call: one place that feeds the
metrics, the trace and the log context.

Per step this costs a few microseconds and no I/O: two clock reads, a
context variable set and reset, two counter increments and a histogram
observation (an mmap write in multiprocess mode), and, only when tracing is
on, one span handed to the batch processor's queue.

    with observe.turn(claimed):             # engine._drive, around _run_turn
        step = observe.model_step(claimed)  # before the model call
        step.replied(reply)                 # the reply is in (model latency)
        step.end("ok")                      # recorded (or end("unavailable"), ...)

Turn ends are reported where they are committed: `turn_finished` from
store.finish_turn (cancel, failure, poison step, a person's cancel) on
commit, and the model step that records the final reply (success).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from agents.models import Turn
from agents.observability import logs, metrics, tracing
from agents.runtime.state import CallState, Claimed


@contextmanager
def turn(claimed: Claimed) -> Iterator[None]:
    """The engine runs steps of this turn: log context, recovery count."""
    token = logs.bind(claimed.key, claimed.turn_number)
    if claimed.recovered:
        metrics.RECOVERIES.inc()
    try:
        yield
    finally:
        logs.unbind(token)


class Step:
    """One step being run: started by the engine, ended exactly once."""

    __slots__ = (
        "claimed",
        "kind",
        "tool",
        "attempt",
        "step",
        "started",
        "start_ns",
        "token",
        "model_s",
        "tokens",
    )

    def __init__(self, claimed: Claimed, kind: str, tool: str = "", attempt: int = 0) -> None:
        self.claimed, self.kind, self.tool, self.attempt = claimed, kind, tool, attempt
        # The transcript position this step records (its events carry it too);
        # with memory, `transcript` holds only the rows from transcript_base on.
        self.step = getattr(claimed, "transcript_base", 0) + len(claimed.transcript)
        self.token = logs.bind(claimed.key, claimed.turn_number, self.step)
        self.model_s: float | None = None
        self.tokens: tuple[int, int] | None = None
        self.start_ns = time.time_ns()
        self.started = time.perf_counter()

    def replied(self, reply: Any) -> None:
        """The model's reply is in (not yet recorded)."""
        self.model_s = time.perf_counter() - self.started
        metrics.MODEL_SECONDS.observe(self.model_s)
        self.tokens = (reply.input_tokens, reply.output_tokens)

    def end(self, outcome: str, error: str | None = None) -> None:
        seconds = time.perf_counter() - self.started
        metrics.step(self.kind, outcome, seconds)
        if self.kind == "model":
            metrics.child(metrics.MODEL_CALLS, outcome).inc()
            if self.tokens:
                metrics.child(metrics.TOKENS, "input").inc(self.tokens[0])
                metrics.child(metrics.TOKENS, "output").inc(self.tokens[1])
        else:
            metrics.child(metrics.TOOL_CALLS, self.tool, outcome).inc()
        logs.unbind(self.token)
        claimed = self.claimed
        succeeded = self.kind == "model" and outcome == "ok" and claimed.turn_done
        if succeeded:
            metrics.child(metrics.TURNS, "succeeded").inc()
        if not tracing.enabled():
            return
        tracing.emit_child(
            "model.call" if self.kind == "model" else "tool.call",
            turn_id=claimed.turn_id,
            session_key=claimed.key,
            start_ns=self.start_ns,
            end_ns=self.start_ns + int(seconds * 1e9),
            attributes=self._attributes(outcome),
            error=error if error is not None else (None if _fine(outcome) else outcome),
        )
        if succeeded:
            started = getattr(claimed, "turn_started_at", None)
            _emit_turn(
                claimed.turn_id,
                claimed.key,
                claimed.turn_number,
                "succeeded",
                claimed.turn_steps,
                started_ns=_ns(started) if started else None,
            )

    def _attributes(self, outcome: str) -> dict[str, Any]:
        claimed = self.claimed
        attributes: dict[str, Any] = {
            "agentdesk.session_key": claimed.key,
            "agentdesk.turn": claimed.turn_number,
            "agentdesk.turn_id": claimed.turn_id,
            "agentdesk.step": self.step,
            "agentdesk.outcome": outcome,
            "agentdesk.profile": claimed.profile,
            "agentdesk.worker": claimed.owner,
        }
        if claimed.recovered:
            attributes["agentdesk.recovered"] = True
        if self.kind == "tool":
            attributes["agentdesk.tool"] = self.tool
            attributes["agentdesk.attempt"] = self.attempt
        if self.model_s is not None:
            attributes["agentdesk.model_seconds"] = round(self.model_s, 6)
        if self.tokens:
            attributes["gen_ai.usage.input_tokens"] = self.tokens[0]
            attributes["gen_ai.usage.output_tokens"] = self.tokens[1]
        return attributes


def model_step(claimed: Claimed) -> Step:
    return Step(claimed, "model")


def tool_step(claimed: Claimed, call: CallState) -> Step:
    return Step(claimed, "tool", call.name, call.attempts)


def _fine(outcome: str) -> bool:
    return outcome in (
        *("ok", "succeeded", "waiting_for_approval", "waiting_for_subagent"),
        *("denied", "canceled"),
    )


def turn_finished(session_key: str, turn: Turn) -> None:
    """store.finish_turn, inside its transaction: count and trace on commit."""
    from django.db import transaction

    status, error = turn.status, turn.error or None
    tracing_on = tracing.enabled()
    started = _ns(turn.started_at or turn.created_at) if tracing_on else 0
    turn_id, number, steps = turn.id, turn.number, turn.steps

    def committed() -> None:
        metrics.TURNS.labels(status).inc()
        if tracing_on:
            _emit_turn(turn_id, session_key, number, status, steps, error, started)

    transaction.on_commit(committed)


def _emit_turn(
    turn_id: int,
    session_key: str,
    number: int,
    status: str,
    steps: int,
    error: str | None = None,
    started_ns: int | None = None,
) -> None:
    end_ns = time.time_ns()
    start = started_ns or end_ns
    tracing.emit_turn(
        turn_id=turn_id,
        session_key=session_key,
        start_ns=start,
        end_ns=end_ns,
        attributes={
            "agentdesk.session_key": session_key,
            "agentdesk.turn": number,
            "agentdesk.turn_id": turn_id,
            "agentdesk.outcome": status,
            "agentdesk.model_steps": steps,
        },
        error=error if status == "failed" else None,
    )


def approval_decided(approval: Any, session_key: str) -> None:
    """approvals.services, inside the deciding transaction: the wait is over.
    Counted and traced on commit (a refused decision never happened)."""
    from django.db import transaction

    created, decided = approval.created_at, approval.decided_at
    if created is None or decided is None:
        return
    wait_s = max(0.0, (decided - created).total_seconds())
    decision = approval.status
    attributes = {
        "agentdesk.session_key": session_key,
        "agentdesk.turn_id": approval.turn_id,
        "agentdesk.tool": approval.tool_name,
        "agentdesk.policy": approval.policy,
        "agentdesk.approval_id": approval.id,
        "agentdesk.outcome": decision,
    }

    def committed() -> None:
        metrics.APPROVAL_SECONDS.labels(decision).observe(wait_s)
        if tracing.enabled():
            tracing.emit_child(
                "approval.wait",
                turn_id=approval.turn_id,
                session_key=session_key,
                start_ns=_ns(created),
                end_ns=_ns(decided),
                attributes=attributes,
            )

    transaction.on_commit(committed)


def in_doubt() -> None:
    metrics.IN_DOUBT.inc()


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1e9)
