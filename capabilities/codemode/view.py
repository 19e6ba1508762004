"""A program as the API shows it (issue 24 point 6): one run_code call with
its source, its host calls nested (each with its duration, arguments and
result), what it printed, and its value or its error. The desk shows the
same from the same rows (templates/dashboard/partials/_program.html).

Read from the call's rows and its result in the transcript
(agents/selectors.py::tool_calls_with_steps), never from a snapshot.
"""

from __future__ import annotations

import json
from typing import Any

from capabilities.codemode import CAPABILITY

PRINTED = "\n--- printed ---\n"  # how program.py appends the printed output to an error


def program_view(call: Any) -> dict[str, Any] | None:
    """The program of a run_code call (None for any other call)."""
    if call.name != CAPABILITY or call.parent_id is not None:
        return None
    view: dict[str, Any] = {
        "source": (call.input or {}).get("code", ""),
        "host_calls": [_host_call(step) for step in getattr(call, "inner_steps", [])],
        "finished": call.result_text is not None,
        "stdout": None,
        "value": None,
        "error": None,
        "interpreter_ms": None,
    }
    text = call.result_text
    if text is None:
        return view
    result = _result(text) if not call.is_error else None
    if result is not None:
        view.update(
            stdout=result.get("stdout", ""),
            value=result.get("value"),
            interpreter_ms=result.get("interpreter_ms"),
        )
    else:
        error, _, printed = text.partition(PRINTED)
        view.update(error=error, stdout=printed)
    return view


def _result(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) and "interpreter_ms" in data else None


def _host_call(step: Any) -> dict[str, Any]:
    ms = None
    if step.started_at and step.finished_at:
        ms = round((step.finished_at - step.started_at).total_seconds() * 1000)
    return {
        "id": step.id,
        "n": step.step,
        "name": step.name,
        "status": step.status,
        "arguments": step.input,
        "result": step.output,
        "is_error": step.is_error,
        "attempts": step.attempts,
        "duration_ms": ms,
        "started_at": step.started_at,
        "finished_at": step.finished_at,
    }
