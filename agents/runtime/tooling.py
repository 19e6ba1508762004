"""Running one tool call and sorting its outcome into a status.

The rules (see agents/tools/base.py for the kinds):
- a request that certainly never left is retried, whatever the kind: a few
  quick tries here, then (NOT_SENT) the engine puts the step back and tries
  it again later with the step backoff, as for a model that is down; only
  when those run out is the model told (a `failed` call, UNAVAILABLE in its
  output, which a turn that ends afterwards answers for: engine.py);
- an unknown outcome is retried with the same idempotency key when the tool
  is read-only or idempotent by key, and becomes `in_doubt` at once when it
  is not: nothing here ever resends a non-idempotent request;
- a definite failure, or a tool that raises, becomes an error tool_result
  the model reads (and a `failed` call), never a crashed worker;
- every attempt is cut at the tool's timeout by the engine itself, whatever
  the connector does (below): a hung call is an unknown outcome, sorted by
  the rules above, and never holds up the process's other sessions.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.conf import settings

from agents.backoff import backoff_s
from agents.gate import NeedsApproval
from agents.models import ToolCall
from agents.per_process import PerProcess
from agents.runtime.store import pool
from agents.runtime.store.lock import LostClaim
from agents.tools.base import (
    UNAVAILABLE,
    Kind,
    NotSent,
    OutcomeUnknown,
    Tool,
    ToolContext,
    ToolError,
    Waiting,
)
from agents.tools.sanitize import clean  # error text reaches the model and the event log

log = logging.getLogger(__name__)
S = ToolCall.Status


# Not a ToolCall status: every quick try was refused before it left (the
# provider is down); the engine retries the step later (engine._tool_step).
NOT_SENT = "not_sent"


@dataclass(frozen=True)
class Outcome:
    status: str
    content: str
    is_error: bool = False
    external_id: str = ""
    asked: NeedsApproval | None = None  # an inner step waits for a person (agents/gate.py)


def execute(tool: Tool, ctx: ToolContext, arguments: dict[str, Any]) -> Outcome:
    retries = settings.AGENTDESK_TOOL_RETRIES
    last: Exception | None = None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff_s(attempt, base=0.4, cap=2.0))  # between our own retries
        try:
            output = _run_with_deadline(tool, ctx, arguments)
        except NotSent as exc:
            last = exc
            continue
        except OutcomeUnknown as exc:
            if tool.kind == Kind.NOT_IDEMPOTENT:
                return Outcome(
                    S.IN_DOUBT, clean(f"Outcome unknown, not retried (not idempotent): {exc}")
                )
            last = exc
            continue
        except ToolError as exc:
            return Outcome(S.FAILED, clean(f"Error: {exc}"), is_error=True)
        except Waiting as exc:  # handed to a sub-agent: the engine parks the turn
            return Outcome(S.WAITING_SUBAGENT, str(exc))
        except NeedsApproval as exc:  # an inner step waits: the engine parks the call on it
            return Outcome(S.WAITING, str(exc), asked=exc)
        except LostClaim:  # an inner step's commit found another owner: stop, as the engine does
            raise
        except Exception as exc:  # a bug in a connector must not kill the turn
            log.exception("tool %s raised", tool.name)
            return Outcome(S.FAILED, clean(f"Error: {tool.name} failed: {exc!r}"), is_error=True)
        status = S.FAILED if output.is_error else S.SUCCEEDED
        return Outcome(status, output.content, output.is_error, output.external_id)
    if isinstance(last, OutcomeUnknown) and tool.kind == Kind.IDEMPOTENT_BY_KEY:
        # Still unknown after retries; a human may retry later with the same key.
        return Outcome(S.IN_DOUBT, clean(f"Outcome unknown after {retries + 1} attempts: {last}"))
    status = NOT_SENT if isinstance(last, NotSent) else S.FAILED
    return Outcome(status, clean(f"Error: {tool.name}{UNAVAILABLE}{last}"), is_error=True)


# --- The deadline ------------------------------------------------------------------
#
# A connector's own timeouts (requests' connect and read timeouts, the MCP
# loop's deadline) bound most calls, but not all: a server that drips one
# byte a second never trips a read timeout, and a tool is code we do not
# control. So the attempt runs on a thread of its own while the slot waits
# for it at most `timeout_s` (+ a little for the connector's own timeout to
# speak first). A call cut there is an unknown outcome: it may still complete
# on its thread, which is exactly what `in_doubt` and the idempotency key
# are for. Its eventual result is logged and dropped.
#
# The hand-off is two C-level primitives, not a ThreadPoolExecutor: a lock
# the caller waits on with its deadline, released by the thread when the
# call is done, and a queue of idle threads, each with its own inbox. The
# executor's Future, Condition and idle semaphore were about 5% of a
# zero-latency step's instructions (bench.instructions).

# The connector's own timeout should speak first: its error says more.
GRACE_S = 1.0
# Threads are made on demand, one per concurrent tool call; the cap only
# stops a pathological pile-up of hung calls from growing without end (at
# the cap a call waits for a thread to come free, within its deadline).
MAX_CALL_THREADS = 1024


class _Call:
    """One attempt handed to a call thread; `done` is released when it ends."""

    __slots__ = ("name", "run", "done", "state", "result", "error", "cut")

    def __init__(self, name: str, run: Callable[[], Any]) -> None:
        self.name, self.run = name, run
        self.done = threading.Lock()
        self.done.acquire()
        self.state = threading.Lock()  # orders `cut` against the end of the call
        self.result: Any = None
        self.error: BaseException | None = None
        self.cut = False


class _CallThreads:
    def __init__(self) -> None:
        self.idle: queue.SimpleQueue[queue.SimpleQueue[_Call]] = queue.SimpleQueue()
        self.count = 0
        self.count_lock = threading.Lock()

    def run(self, call: _Call, timeout_s: float) -> bool:
        """Hand `call` to a thread; whether it ended within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        try:
            inbox = self.idle.get_nowait()
        except queue.Empty:
            inbox = self._new_thread()
            if inbox is None:  # at the cap: wait for one to come free
                try:
                    inbox = self.idle.get(timeout=timeout_s)
                except queue.Empty:
                    return False
        inbox.put(call)
        return call.done.acquire(timeout=max(0.0, deadline - time.monotonic()))

    def _new_thread(self) -> queue.SimpleQueue[_Call] | None:
        with self.count_lock:
            if self.count >= MAX_CALL_THREADS:
                return None
            self.count += 1
            name = f"tool-call_{self.count}"
        inbox: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        threading.Thread(target=self._serve, args=(inbox,), name=name, daemon=True).start()
        return inbox

    def _serve(self, inbox: queue.SimpleQueue[_Call]) -> None:
        while True:
            call = inbox.get()
            try:
                call.result = call.run()
            except BaseException as exc:  # handed to the caller, as a Future would
                call.error = exc
            with call.state:
                late = call.cut
                call.done.release()
            if late:
                _late(call)
            call = None  # drop the finished call before waiting for the next one
            self.idle.put(inbox)


_calls: PerProcess[_CallThreads] = PerProcess(_CallThreads)


def _run_with_deadline(tool: Tool, ctx: ToolContext, arguments: dict[str, Any]):
    # The slot's context (log fields, the trace span) goes with the call.
    context = contextvars.copy_context()
    call = _Call(tool.name, partial(context.run, _run_and_give_back, tool, ctx, arguments))
    if not _calls.get().run(call, tool.timeout_s + GRACE_S):
        with call.state:
            call.cut = not call.done.acquire(blocking=False)  # it may have just ended
        if call.cut:
            raise OutcomeUnknown(
                f"{tool.name}: no result within {tool.timeout_s:g}s (cut by the engine)"
            )
    if call.error is not None:
        raise call.error
    return call.result


def _run_and_give_back(tool: Tool, ctx: ToolContext, arguments: dict[str, Any]):
    try:
        return tool.run(ctx, arguments)
    finally:
        pool.give_back()  # a tool that read the database (a sub-agent) holds no connection


def _late(call: _Call) -> None:
    log.warning(
        "tool %s finished after the engine cut it (%s); its result was dropped",
        call.name,
        "raised " + repr(call.error) if call.error else "succeeded",
    )
