"""A stand-in for the gate contract (issue 23) until it lands on main.

Same names as /work/coord/CONTRACT.md: Verdict, NeedsApproval, InnerStep and
a `steps` handle with gate / log / begin / end. The stand-in keeps inner
steps in this process's memory, so it survives a re-run of the same call in
the same process but not a dead worker; it is deleted when the real one
(ToolCall rows with parent + step, the approvals gate) is merged.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from agents.tools.profile import Profile

try:  # the real thing, once issue 23 is merged
    from agents.gate import NeedsApproval, Verdict  # type: ignore[import-not-found]
except ImportError:

    @dataclass(frozen=True)
    class Verdict:  # type: ignore[no-redef]
        decision: str  # run | wait | refuse
        policy: str = ""
        detail: str = ""

    class NeedsApproval(Exception):  # type: ignore[no-redef]
        def __init__(self, *, step, name, arguments, verdict, preview=None, tool_kind=None):
            super().__init__(f"host call {step} ({name}) waits for approval")
            self.step, self.name, self.arguments = step, name, arguments
            self.verdict, self.preview, self.tool_kind = verdict, preview or {}, tool_kind


@dataclass
class InnerStep:
    n: int
    name: str
    status: str
    input: dict[str, Any]
    output: str = ""
    is_error: bool = False
    reason: str = ""
    snapshot: bytes | None = None
    tool_kind: str = ""


@dataclass
class LocalSteps:
    """Inner steps in memory, keyed by the outer call's idempotency key."""

    session_key: str
    call_key: str
    profile: Profile

    def gate(self, name, arguments, *, kind="host_call", tool_kind=None, side_effect=False):
        from approvals.policies import requirement_for

        rule = self.profile.rules.get(name)
        if rule is not None and rule.approval in ("always", "never"):
            return Verdict("wait" if rule.approval == "always" else "run", "profile_policy", "")
        requirement = requirement_for(name, arguments)
        if requirement is None:
            return Verdict("run", "", "")
        return Verdict("wait", requirement.policy, requirement.detail)

    def log(self) -> list[InnerStep]:
        with _lock:
            return sorted(_LOG.get(self.call_key, {}).values(), key=lambda s: s.n)

    def begin(self, n: int, name: str, arguments: dict, *, tool_kind) -> str:
        with _lock:
            _LOG.setdefault(self.call_key, {})[n] = InnerStep(
                n, name, "running", arguments, tool_kind=str(tool_kind)
            )
        return f"{self.call_key}:{n}"

    def end(self, n, *, status, output, is_error=False, snapshot=None) -> None:
        with _lock:
            step = _LOG[self.call_key][n]
            step.status, step.output, step.is_error = status, output, is_error
            step.snapshot = snapshot


_LOG: dict[str, dict[int, InnerStep]] = {}
_lock = threading.Lock()
