"""Running one program: the durable execution log around the interpreter.

`run(spec, ctx, arguments)` is the run_code tool's body. Each host call of
the program is an inner step of the run_code call (ctx.steps, the gate
contract): asked of the one gate, recorded `running` before it leaves the
process (its idempotency key `<session key>:<tool_use_id>:<n>`), its result
recorded with the program's snapshot at that call.

The same call is run again after a crash, an approval or a denial (same
tool_use_id, same keys). It never repeats a host call: it loads the snapshot
of the last recorded call, answers that call from the log, and goes on;
calls the log already settled (a denial recorded after that snapshot) are
answered from the log as well. Between two host calls the program only
computes, so running it forward from a snapshot reaches the same next call.
A call found `running` (the worker died while it was out) is sent again with
the same key when its tool is read-only or idempotent by key; otherwise its
outcome is unknown and the run_code call goes `in_doubt`.

One commit per host call: host call n's result is recorded in the commit
that begins host call n+1 (`steps.advance`), not in one of its own. The
program meanwhile runs on with the result, computing only (nothing leaves
the process between two host calls); a worker that dies before that commit
left call n `running`, which is what it would have left dying during the
call, and call n is sent again with its key. Not so a call that is not
idempotent (it would be in doubt): its result is recorded at once. Whatever
ends the run otherwise (the program's value or error, a wait for a person,
a refusal of the limits) records the last result first.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import capabilities.codemode.stubs as stubs  # the module, not the package (no cycle with __init__)
from agents.gate import InnerStep, NeedsApproval, Verdict
from agents.models import ToolCall
from agents.runtime import tooling
from agents.runtime.store.lock import LostClaim
from agents.tools.base import (
    Kind,
    OutcomeUnknown,
    StepBegun,
    StepEnded,
    ToolContext,
    ToolError,
    ToolOutput,
)
from agents.tools.profile import Profile
from capabilities.codemode.pool import Done, Limits, Pause, Program, ProgramError, TypeCheckFailed

SETTLED = ("succeeded", "failed", "denied", "canceled")  # denied/canceled: a person said no
PREVIEW_PROGRAM_CHARS = 60_000
PREVIEW_RESULT_CHARS = 2_000
STDOUT_TO_MODEL = 8_000
DENIED = "PermissionError"  # what a denied or refused host call raises inside the program
FAILED = "RuntimeError"  # what a failed host call raises inside the program


@dataclass(frozen=True)
class CodeMode:
    """What a profile's run_code exposes: its functions, their stubs, its limits."""

    profile: Profile  # the classic profile: its connectors and their rules
    functions: dict[str, stubs.Function]
    stubs: str
    limits: Limits


def run(spec: CodeMode, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
    source = arguments["code"]
    steps = ctx.steps or _NoSteps()
    log = {step.n: step for step in steps.log()}
    runner = _Runner(spec, ctx, steps, source, log)
    try:
        with Program(spec.limits, spec.stubs) as program:
            runner.program = program
            value = runner.drive()
    except TypeCheckFailed as exc:
        raise ToolError(f"the program does not type-check; nothing ran.\n{exc}") from None
    except ProgramError as exc:
        raise ToolError(runner.failure(str(exc))) from None
    return ToolOutput(json.dumps(runner.result(value), default=repr, ensure_ascii=False))


class _Runner:
    def __init__(self, spec, ctx, steps, source: str, log: dict[int, InnerStep]) -> None:
        self.spec, self.ctx, self.steps, self.source, self.log = spec, ctx, steps, source, log
        self.program: Program | None = None
        self.n = 0  # host calls made (or answered from the log) so far
        self.deadline = time.monotonic() + spec.limits.wall_s
        self.names: Counter[str] = Counter()
        self.unrecorded: StepEnded | None = None  # the last result, until the next commit

    def drive(self) -> Any:
        self.names.update(_earlier_in_turn(self.ctx))
        try:
            paused = self._begin()
            while isinstance(paused, Pause):
                paused = self._host_call(paused)
        except LostClaim:  # another owner now: write nothing more
            raise
        except BaseException:  # the run ends here: its last result is recorded first
            self._record_last()
            raise
        self._record_last()
        return paused.value

    def _record_last(self) -> None:
        if self.unrecorded is not None:
            ended, self.unrecorded = self.unrecorded, None
            self.steps.advance(ended, None)

    def _begin(self) -> Pause | Done:
        """From the last snapshot in the log, or from the start."""
        assert self.program is not None
        resumable = [s for s in self.log.values() if s.snapshot and s.status in SETTLED]
        if not resumable:
            return self.program.start(self.source)
        last = max(resumable, key=lambda s: s.n)
        for step in self.log.values():
            if step.n <= last.n:
                self.names[step.name] += 1
        self.n = last.n
        return _answer_from_log(self.program.load(bytes(last.snapshot)), last)

    def _host_call(self, paused: Pause) -> Pause | Done:
        if paused.name == "describe":
            name = paused.args[0] if paused.args else paused.kwargs.get("name", "")
            return paused.answer(stubs.describe(self.spec.functions, str(name)))
        function = self.spec.functions.get(paused.name)
        if function is None:
            return paused.fail("NameError", f"name {paused.name!r} is not defined")
        try:
            arguments = function.tool.normalize(function.arguments(paused.args, paused.kwargs))
        except TypeError as exc:
            return paused.fail("TypeError", str(exc))
        if problem := function.tool.validate(arguments):
            return paused.fail("ValueError", f"{paused.name}(): {problem}")
        n, name = self.n + 1, function.tool.name
        recorded = self.log.get(n)
        if recorded is not None and recorded.name != name:
            raise ProgramError(
                f"the program took another path on resume: host call {n} was {recorded.name}, "
                f"now {name}"
            )
        if recorded is not None and recorded.status in SETTLED:
            self._counted(n, name)
            return _answer_from_log(paused, recorded)
        if n > self.spec.limits.host_calls:
            raise ProgramError(f"more than {self.spec.limits.host_calls} host calls")
        if time.monotonic() > self.deadline:
            raise ProgramError(f"the program ran past its {self.spec.limits.wall_s:g} s")
        if recorded is None:
            if over := self.spec.profile.over_budget(name, list(self.names.elements())):
                return paused.fail(DENIED, f"refused by policy ({over})")
            verdict = self.steps.gate(name, arguments, tool_kind=function.tool.kind)
            if verdict.decision == "refuse":
                return paused.fail(DENIED, f"refused by policy: {verdict.detail}")
            if verdict.decision == "wait":
                raise NeedsApproval(
                    step=n,
                    name=name,
                    arguments=arguments,
                    verdict=verdict,
                    preview=self.preview(n, name, arguments),
                    tool_kind=function.tool.kind,
                )
        elif recorded.status == "waiting_for_approval":  # not decided yet: nothing to do
            raise ProgramError(f"host call {n} ({name}) is still waiting for a person")
        elif recorded.status == "running" and function.tool.kind == Kind.NOT_IDEMPOTENT:
            raise OutcomeUnknown(
                f"host call {n} ({name}) was in flight when its worker died; "
                "it is not idempotent, so it is not sent again"
            )
        else:  # approved (an approver's edit is its input), or in flight and safe to resend
            arguments = recorded.input
            if problem := function.tool.validate(arguments):  # an edit held to the tool's rules
                return paused.fail("ValueError", f"{name}() as edited: {problem}")
        self._counted(n, name)
        return self._send(paused, function, n, arguments, new=recorded is None)

    def _counted(self, n: int, name: str) -> None:
        self.n = n
        self.names[name] += 1

    def _send(
        self, paused: Pause, function, n: int, arguments: dict[str, Any], new: bool
    ) -> Pause | Done:
        """Host call n: durably `running` (with the last call's result, in one
        commit), sent; its result and the snapshot recorded with the next."""
        tool = function.tool
        snapshot = paused.dump()
        if new:
            ended, self.unrecorded = self.unrecorded, None
            key = self.steps.advance(ended, StepBegun(n, tool.name, arguments, tool.kind))
        else:  # approved, or left running by a dead worker: its row is there
            self._record_last()
            key = self.steps.begin(n, tool.name, arguments, tool_kind=tool.kind)
        inner = dataclasses.replace(self.ctx, idempotency_key=key)
        started = time.monotonic()
        outcome = tooling.execute(tool, inner, arguments)
        if outcome.status == "in_doubt":  # the step stays `running`: a person settles the call
            raise OutcomeUnknown(f"host call {n} ({tool.name}): {outcome.content}")
        failed = outcome.status != "succeeded" or outcome.is_error
        ms = round((time.monotonic() - started) * 1000)
        self.unrecorded = StepEnded(n, tool.name, outcome.content, failed, snapshot, ms)
        if tool.kind == Kind.NOT_IDEMPOTENT:
            # Its result is recorded now, not with the next call: a worker
            # dying while the program computes on would leave in doubt a
            # call that is known to have happened (it cannot be sent again).
            self._record_last()
        status = "failed" if failed else "succeeded"  # as it will be recorded: the preview
        self.log[n] = InnerStep(n, tool.name, status, arguments, outcome.content, failed)
        if failed:
            return paused.fail(FAILED, outcome.content)
        return paused.answer(_decoded(outcome.content))

    def preview(self, n: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """What the approval card shows: the program, the calls so far, the pending one."""
        calls = [
            {
                "n": s.n,
                "name": s.name,
                "status": s.status,
                "input": s.input,
                "output": (s.reason or s.output or "")[:PREVIEW_RESULT_CHARS],
                "is_error": s.is_error,
            }
            for s in sorted(self.log.values(), key=lambda s: s.n)
            if s.n < n
        ]
        return {
            "kind": "code_mode",
            "program": self.source[:PREVIEW_PROGRAM_CHARS],
            "calls": calls,
            "pending": {"n": n, "name": name, "arguments": arguments},
            "stdout": (self.program.stdout() if self.program else "")[-PREVIEW_RESULT_CHARS:],
        }

    def result(self, value: Any) -> dict[str, Any]:
        assert self.program is not None
        return {
            "value": value,
            "stdout": self.program.stdout()[-STDOUT_TO_MODEL:],
            "host_calls": self.n,
            "interpreter_ms": self.program.interpreter_ms,
        }

    def failure(self, error: str) -> str:
        printed = self.program.stdout()[-STDOUT_TO_MODEL:] if self.program else ""
        text = f"the program failed after {self.n} host call(s):\n{error}"
        return f"{text}\n--- printed ---\n{printed}" if printed else text


def _answer_from_log(paused: Pause, step: InnerStep) -> Pause | Done:
    if step.status == "denied":
        return paused.fail(DENIED, step.reason or "denied by an approver")
    if step.is_error or step.status == "failed":
        return paused.fail(FAILED, step.output)
    return paused.answer(_decoded(step.output))


def _decoded(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content


class _NoSteps:
    """A program run outside the engine (no execution log): it may compute
    and call describe(), and every host call is refused."""

    def log(self) -> list[InnerStep]:
        return []

    def gate(self, name, arguments, **kwargs) -> Verdict:
        return Verdict("refuse", "no_log", "host calls need a session's execution log")


def _earlier_in_turn(ctx: ToolContext) -> list[str]:
    """The names of the calls this turn made before this program: the model's
    own calls and other programs' host calls. With the program's own, they
    are what a profile's per-tool call limits and cost budget count."""
    if ctx.call_id is None:
        return []
    turn_id = ToolCall.objects.filter(pk=ctx.call_id).values_list("turn_id", flat=True).first()
    rows = ToolCall.objects.filter(
        turn_id=turn_id, session__key=ctx.session_key, id__lt=ctx.call_id
    )
    return [n for n in rows.values_list("name", flat=True) if n != "run_code"]
