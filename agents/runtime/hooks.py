"""The runtime's plug points: how features hear of what the step engine does
without the engine knowing them.

The runtime (agents/runtime/) imports models, its store and this module,
never a provider or a feature. A feature registers its handlers when its app
starts (AppConfig.ready), so every process that can advance a session (a
worker, a test, a benchmark) has them:

- `gate`: the one answer to "may this action run now, must it wait for a
  person, or is it refused" (agents/gate.py: Action -> Verdict), provided by
  approvals/gate.py::gate_decide, which holds every rule. The engine asks it
  at triage for a plain tool call; a tool that gates inside (Code Mode, the
  browser) asks it for each inner action through ToolContext.steps.
- `approval_rows`: the approval rows the runtime's commits carry (a reply's
  approvals in its one statement, an inner step's, a canceled turn's, a
  lapsed one), written by the approvals app (agents/gate.py::ApprovalRows,
  approvals/rows.py): the runtime writes what the gate answered, approvals
  builds the row.
- `profiles`: the one provider of profiles by name (capabilities/profiles.py:
  code profiles, admin rows, MCP tools, sub-agents). The engine asks it at
  every claim; it raises LookupError for an unknown name.
- `call_waiting`: a tool handed its call elsewhere (raised Waiting): the
  handler parks the turn on it and says True, or says False when the answer
  is already on the call (capabilities/subagents.py, park_on_child).
- `turn_ended`: after a turn ended in its worker, outside any transaction
  (sub-agents answer their parent, cancel unwanted children). A handler's
  failure is logged; the feature's own sweep is its net.
- `turn_canceled`: after a person's cancel committed (children go with
  their parent).
- `customer_reply`: inside the transaction that posts a customer's message,
  under the session lock, with the event list it writes (follow-ups waiting
  for that reply are canceled, agents/features/followups.py).

A hook with one provider (or a slot, for an object) is set with `provide`; the others are lists, run in
the order registered (registering the same function twice is a no-op, so a
repeated ready() is harmless).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from agents.gate import Action, ApprovalRows, Verdict
from agents.tools.profile import Profile

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Hook(Generic[F]):
    """Handlers run in order; `quiet` ones log a failure instead of raising."""

    def __init__(self, name: str, *, quiet: bool = False) -> None:
        self.name, self.quiet = name, quiet
        self.handlers: list[F] = []

    def register(self, handler: F) -> F:
        if handler not in self.handlers:
            self.handlers.append(handler)
        return handler

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        for handler in self.handlers:
            if not self.quiet:
                handler(*args, **kwargs)
                continue
            try:
                handler(*args, **kwargs)
            except Exception:
                log.exception("hook %s: %r failed", self.name, handler)


class Slot(Generic[T]):
    """A plug point for one object (a set of functions that go together)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.value: T | None = None

    def provide(self, value: T) -> T:
        self.value = value
        return value

    def get(self) -> T:
        if self.value is None:
            raise RuntimeError(f"nothing provides {self.name} (is its app installed?)")
        return self.value


class Provider(Generic[F]):
    """A hook with exactly one handler, which answers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.handler: F | None = None

    def provide(self, handler: F) -> F:
        self.handler = handler
        return handler

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.handler is None:
            raise RuntimeError(f"nothing provides {self.name} (is its app installed?)")
        return self.handler(*args, **kwargs)


gate: Provider[Callable[[Action], Verdict]] = Provider("gate")
approval_rows: Slot[ApprovalRows] = Slot("approval_rows")
profiles: Provider[Callable[[str], Profile]] = Provider("profiles")
call_waiting: Provider[Callable[..., bool]] = Provider("call_waiting")
turn_ended: Hook[Callable[..., None]] = Hook("turn_ended", quiet=True)
turn_canceled: Hook[Callable[..., None]] = Hook("turn_canceled")
customer_reply: Hook[Callable[..., None]] = Hook("customer_reply")
