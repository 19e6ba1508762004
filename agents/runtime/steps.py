"""The handle a running call gets for its inner steps (ToolContext.steps;
the protocol is agents/gate.py::Steps).

A tool that gates inside (Code Mode, the browser) asks the gate for each of
its own actions, and records each one durably before it leaves the process
and after it returns, as the engine does for a tool call (DESIGN.md, the
step protocol, point 9). The commits are store/steps.py's; this only fills
in what the call already knows (its session, profile, claim and row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.gate import Action, ActionKind, InnerStep, Verdict
from agents.runtime import hooks
from agents.runtime.state import CallState, Claimed
from agents.runtime.store import steps as store
from agents.tools.base import Kind, StepBegun, StepEnded
from agents.tools.profile import Profile


@dataclass(frozen=True)
class CallSteps:
    claimed: Claimed
    call: CallState
    profile: Profile

    def gate(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        kind: ActionKind = "host_call",
        tool_kind: Kind | None = None,
        side_effect: bool = False,
    ) -> Verdict:
        action = Action(
            kind=kind,
            session_key=self.claimed.key,
            session_context=self.claimed.context,
            profile=self.profile,
            name=name,
            arguments=arguments,
            tool_kind=tool_kind,
            side_effect=side_effect,
        )
        return hooks.gate(action)

    def log(self) -> list[InnerStep]:
        return store.inner_log(self.claimed.session_id, self.call.id)

    def begin(self, n: int, name: str, arguments: dict[str, Any], *, tool_kind: Kind | None) -> str:
        kind = tool_kind.value if tool_kind is not None else ""
        return store.begin(self.claimed, self.call, n, name, arguments, kind)

    def end(
        self,
        n: int,
        *,
        status: str,
        output: str,
        is_error: bool = False,
        snapshot: bytes | None = None,
    ) -> None:
        store.end(
            self.claimed,
            self.call,
            n,
            status=status,
            output=output,
            is_error=is_error,
            snapshot=snapshot,
        )

    def advance(self, ended: StepEnded | None, begun: StepBegun | None) -> str:
        return store.advance(self.claimed, self.call, ended, begun)
