"""Running one tool call and sorting its outcome into a status.

The rules (see agents/tools/base.py for the kinds):
- a request that certainly never left is retried, whatever the kind;
- an unknown outcome is retried with the same idempotency key when the tool
  is read-only or idempotent by key, and becomes `in_doubt` at once when it
  is not: nothing here ever resends a non-idempotent request;
- a definite failure, or a tool that raises, becomes an error tool_result
  the model reads (and a `failed` call), never a crashed worker.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents.models import ToolCall
from agents.tools.base import (
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


@dataclass(frozen=True)
class Outcome:
    status: str
    content: str
    is_error: bool = False
    external_id: str = ""


def execute(tool: Tool, ctx: ToolContext, arguments: dict[str, Any]) -> Outcome:
    retries = settings.AGENTDESK_TOOL_RETRIES
    last: Exception | None = None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(min(0.2 * 2**attempt, 2.0))  # backoff between our own retries
        try:
            output = tool.run(ctx, arguments)
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
            return Outcome(S.WAITING, str(exc))
        except Exception as exc:  # a bug in a connector must not kill the turn
            log.exception("tool %s raised", tool.name)
            return Outcome(S.FAILED, clean(f"Error: {tool.name} failed: {exc!r}"), is_error=True)
        status = S.FAILED if output.is_error else S.SUCCEEDED
        return Outcome(status, output.content, output.is_error, output.external_id)
    if isinstance(last, OutcomeUnknown) and tool.kind == Kind.IDEMPOTENT_BY_KEY:
        # Still unknown after retries; a human may retry later with the same key.
        return Outcome(S.IN_DOUBT, clean(f"Outcome unknown after {retries + 1} attempts: {last}"))
    return Outcome(S.FAILED, clean(f"Error: {tool.name} unavailable: {last}"), is_error=True)
