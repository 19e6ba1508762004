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
- `approval_request`: writes the approval row for a call the gate said must
  wait, inside the runtime's transaction (under the session lock), and says
  its id: approvals builds its own rows (approvals/services.py).
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
- `approval_lapsed`: before an approved call's first attempt, outside any
  transaction: the note the model reads when the approval's time ran out
  before the call could start (the call is then denied), else None
  (approvals/services.py, approval_lapse).
- `customer_reply`: inside the transaction that posts a customer's message,
  under the session lock, with the event list it writes (follow-ups waiting
  for that reply are canceled, agents/features/followups.py).

A hook with one provider is set with `provide`; the others are lists, run in
the order registered (registering the same function twice is a no-op, so a
repeated ready() is harmless).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from agents.gate import Action, Verdict
from agents.tools.profile import Profile

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


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
approval_request: Provider[Callable[..., int]] = Provider("approval_request")
profiles: Provider[Callable[[str], Profile]] = Provider("profiles")
call_waiting: Provider[Callable[..., bool]] = Provider("call_waiting")
approval_lapsed: Provider[Callable[..., str | None]] = Provider("approval_lapsed")
turn_ended: Hook[Callable[..., None]] = Hook("turn_ended", quiet=True)
turn_canceled: Hook[Callable[..., None]] = Hook("turn_canceled")
customer_reply: Hook[Callable[..., None]] = Hook("customer_reply")
