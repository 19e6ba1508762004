"""The gate's vocabulary: what the runtime asks, what it is answered, and how
a running tool says that one of its own inner actions must wait.

Whether an action must wait for a person is decided by one function in the
approvals app (approvals/gate.py::gate_decide), which the runtime asks
through one plug point (agents/runtime/hooks.py::gate). This module is
agents' core: it imports no app, so the runtime, the tools and the apps
that build on agents can all name these types.

- `Action`: one thing an agent wants to do, with everything a rule may look
  at (the session, its profile, the exact arguments, what kind of call it
  is).
- `Verdict`: "run", "wait" (for a person: the approval's policy and why) or
  "refuse" (never: the model reads why).
- `NeedsApproval`: raised by a tool while it runs (Code Mode, a browser
  submit), for inner step `step` that the gate said must wait. The runtime
  parks the call on it (store.park_on_inner_step) and runs the tool again
  once a person has decided; the tool reads the decision in `steps.log()`.
- `InnerStep` and `Steps`: the durable execution log of a running call, as
  the tool sees it (ToolContext.steps; declared with the tool protocol in
  agents/tools/base.py; the runtime's is runtime/steps.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The tool protocol's side of it (what a running call sees), re-exported here.
from agents.tools.base import ActionKind, Decision, InnerStep, Kind, Steps, Verdict
from agents.tools.profile import Profile

__all__ = [
    "RUN",
    "Action",
    "ActionKind",
    "Decision",
    "InnerStep",
    "NeedsApproval",
    "Steps",
    "Verdict",
]


# A raiser keeps its preview at most this big (JSON text), so an approval row
# stays a row: a program's source and calls so far, a screenshot, the form.
MAX_PREVIEW_BYTES = 256 * 1024


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    session_key: str
    session_context: dict[str, Any]  # e.g. {"forked_from": "ticket:4812"}
    profile: Profile
    name: str  # the tool / connector / browser action
    arguments: dict[str, Any]  # exact: what runs if it runs
    tool_kind: Kind | None = None
    side_effect: bool = False  # the profile (or the tool) marks it so, e.g. a submit


RUN = Verdict("run")


class NeedsApproval(Exception):
    """Raised by a running tool: its inner step `step` must wait for a person."""

    def __init__(
        self,
        *,
        step: int,
        name: str,
        arguments: dict[str, Any],
        verdict: Verdict,
        preview: dict[str, Any] | None = None,
        tool_kind: Kind | None = None,
    ) -> None:
        super().__init__(f"step {step} ({name}) waits for approval: {verdict.detail}")
        self.step, self.name, self.arguments = step, name, arguments
        self.verdict, self.preview, self.tool_kind = verdict, preview or {}, tool_kind
