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
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
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
# control. So the attempt runs on a thread of this pool while the slot waits
# for it at most `timeout_s` (+ a little for the connector's own timeout to
# speak first). A call cut there is an unknown outcome: it may still complete
# on its thread, which is exactly what `in_doubt` and the idempotency key
# are for. Its eventual result is logged and dropped.

# The connector's own timeout should speak first: its error says more.
GRACE_S = 1.0
# Threads are made on demand, one per concurrent tool call; the cap only
# stops a pathological pile-up of hung calls from growing without end.
MAX_CALL_THREADS = 1024

_calls: PerProcess[ThreadPoolExecutor] = PerProcess(
    lambda: ThreadPoolExecutor(MAX_CALL_THREADS, thread_name_prefix="tool-call")
)


def _run_with_deadline(tool: Tool, ctx: ToolContext, arguments: dict[str, Any]):
    # The slot's context (log fields, the trace span) goes with the call.
    context = contextvars.copy_context()
    future = _calls.get().submit(context.run, _run_and_give_back, tool, ctx, arguments)
    try:
        return future.result(timeout=tool.timeout_s + GRACE_S)
    except FutureTimeout:
        future.add_done_callback(lambda f: _late(tool, f))
        raise OutcomeUnknown(
            f"{tool.name}: no result within {tool.timeout_s:g}s (cut by the engine)"
        ) from None


def _run_and_give_back(tool: Tool, ctx: ToolContext, arguments: dict[str, Any]):
    try:
        return tool.run(ctx, arguments)
    finally:
        pool.give_back()  # a tool that read the database (a sub-agent) holds no connection


def _late(tool: Tool, future: Future) -> None:
    error = future.exception()
    log.warning(
        "tool %s finished after the engine cut it (%s); its result was dropped",
        tool.name,
        "raised " + repr(error) if error else "succeeded",
    )
