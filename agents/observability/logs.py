"""Structured logs: the step context on every line, as JSON.

The engine sets the context (`bind`) when it takes a turn and again for
each step; `JsonFormatter` adds it to every record logged meanwhile, by any
logger in the process (the engine, the model client, a tool, httpx).
Enabled by AGENTDESK_LOG_FORMAT=json (config/settings.py picks the
formatter); the plain format is unchanged.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar, Token
from typing import Any

from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

# (session key, turn number, step) of the step this thread is running, or
# None between steps. One variable holding a tuple: one set and one reset
# per step. `step` is the transcript position the step records (the same
# `position` its events carry), so a log line joins the history exactly.
_context: ContextVar[tuple[str, int, int | None] | None] = ContextVar(
    "agentdesk_step", default=None
)


def bind(session_key: str, turn: int, step: int | None = None) -> Token:
    return _context.set((session_key, turn, step))


def unbind(token: Token) -> None:
    _context.reset(token)


def current() -> tuple[str, int, int | None] | None:
    return _context.get()


class JsonFormatter(_BaseJsonFormatter):
    """One JSON object per line: time, level, logger, message, the step
    context when there is one, any `extra=` fields, and the traceback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("fmt", "%(asctime)s %(levelname)s %(name)s %(message)s")
        kwargs.setdefault(
            "rename_fields", {"asctime": "time", "levelname": "level", "name": "logger"}
        )
        kwargs.setdefault("json_ensure_ascii", False)
        super().__init__(*args, **kwargs)

    def add_fields(
        self, log_record: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        super().add_fields(log_record, record, message_dict)
        bound = _context.get()
        if bound is not None:
            log_record["session_key"], log_record["turn"], log_record["step"] = bound
        log_record["process"] = record.process
        # Many sessions per process: the slot (thread) tells their lines apart.
        log_record["thread"] = record.threadName


# --- For a person (`make run`'s terminal) -----------------------------------------


def is_housekeeping(record: logging.LogRecord) -> bool:
    """Celery's line for every task received and finished (each step of each
    turn, and every sweep, settle and expiry beat sends every few seconds),
    and beat's for every task it sends: routine, so DEBUG, whatever level
    Celery gives them. A task that fails still logs at ERROR."""
    if record.name == "celery.beat":
        return str(record.msg).startswith("Scheduler: Sending due task")
    if record.name in ("celery.worker.strategy", "celery.app.trace"):
        return record.levelno <= logging.INFO
    return False


class Housekeeping(logging.Filter):
    """Marks housekeeping records DEBUG, then lets through what reaches this
    filter's level (the handler's own level was checked before the mark)."""

    def __init__(self, level: str | int = logging.DEBUG) -> None:
        super().__init__()
        if isinstance(level, str):
            level = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if is_housekeeping(record):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return record.levelno >= self.level


class ConsoleFormatter(logging.Formatter):
    """One readable line: the time, the level when it is not INFO, the logger
    when it is not ours, the message, the step context, the traceback."""

    def __init__(self) -> None:
        super().__init__(datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        parts = [self.formatTime(record, self.datefmt)]
        if record.levelno != logging.INFO:
            parts.append(record.levelname)
        message = record.getMessage()
        if not record.name.startswith(("agents", "approvals", "capabilities", "dashboard")):
            message = f"{record.name}: {message}"
        parts.append(message)
        bound = _context.get()
        if bound is not None:
            key, turn, step = bound
            parts.append(f"[{key} turn {turn}" + (f" step {step}]" if step is not None else "]"))
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:  # redacted already (agents/observability/redact.py)
            line += "\n" + record.exc_text
        return line
