"""What a tool is, to the runtime: a schema, a kind, a timeout and a call.

The kind decides what recovery may do with a call whose outcome is unknown
(the worker died, or the connection dropped, after the request left):

- READ_ONLY: changes nothing; simply run it again.
- IDEMPOTENT_BY_KEY: the remote side deduplicates on our idempotency key
  (Stripe-style), so sending it again with the same key is safe.
- NOT_IDEMPOTENT: sending again might do it twice; the call becomes
  `in_doubt` and a human decides.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import jsonschema
from django.db import models

from agents.tools import arguments as _arguments


class Kind(models.TextChoices):
    """Also the choices of capabilities.ToolPolicy.kind (an admin's override)."""

    READ_ONLY = "read_only"
    IDEMPOTENT_BY_KEY = "idempotent_by_key"
    NOT_IDEMPOTENT = "not_idempotent"


# What a gated action is (agents/gate.py::Action.kind).
ActionKind = Literal["tool_call", "host_call", "browser", "external"]
Decision = Literal["run", "wait", "refuse"]


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    policy: str = ""  # a stable name, shown to approvers and stored on the approval
    detail: str = ""  # why, in words

    @property
    def runs(self) -> bool:
        return self.decision == "run"

    @property
    def waits(self) -> bool:
        return self.decision == "wait"

    @property
    def refused(self) -> bool:
        return self.decision == "refuse"


@dataclass(frozen=True)
class InnerStep:
    """One inner step of a running call, as recorded."""

    n: int
    name: str
    status: str  # a ToolCall status: running, waiting_for_approval, approved, denied, ...
    input: dict[str, Any]  # effective: an approver's edit applied
    output: str = ""
    is_error: bool = False
    reason: str = ""  # a denial's (or an expiry's) words, for the tool to raise with
    snapshot: bytes | None = None
    key: str = ""  # its idempotency key: <session key>:<tool_use_id>:<n>


@dataclass(frozen=True)
class StepEnded:
    """Inner step n's result, for `Steps.advance` to record (with the
    program's snapshot at that step, if the tool keeps one)."""

    n: int
    name: str
    output: str
    is_error: bool = False
    snapshot: bytes | None = None
    ms: int = 0  # how long the step was out


@dataclass(frozen=True)
class StepBegun:
    """A new inner step n, for `Steps.advance` to record `running`."""

    n: int
    name: str
    arguments: dict[str, Any]
    tool_kind: Kind | None = None


class Steps(Protocol):
    """What the runtime hands a running call for its inner steps."""

    def gate(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        kind: ActionKind = "host_call",
        tool_kind: Kind | None = None,
        side_effect: bool = False,
    ) -> Verdict: ...

    def log(self) -> list[InnerStep]: ...

    def begin(
        self, n: int, name: str, arguments: dict[str, Any], *, tool_kind: Kind | None
    ) -> str: ...

    def end(
        self,
        n: int,
        *,
        status: str,
        output: str,
        is_error: bool = False,
        snapshot: bytes | None = None,
    ) -> None: ...

    def advance(self, ended: StepEnded | None, begun: StepBegun | None) -> str:
        """In one commit: step `ended.n`'s result, and step `begun.n` (new,
        never recorded) `running`; returns the begun step's idempotency key."""
        ...


@dataclass(frozen=True)
class ToolContext:
    session_key: str
    idempotency_key: str
    attempt: int
    context: dict[str, Any] = field(default_factory=dict)
    # Set by the engine for a call it runs: the call's tool_use_id and row,
    # and its inner steps' durable log (agents/gate.py::Steps; None for a
    # tool called outside the engine, which then has no inner steps).
    tool_use_id: str = ""
    call_id: int | None = None
    steps: Steps | None = None

    @property
    def ticket_id(self) -> str | None:
        return ticket_id_of(self.session_key)


def ticket_id_of(session_key: str) -> str | None:
    """The helpdesk ticket a session acts on: `ticket:4812` -> "4812", and a
    sub-agent of it (`ticket:4812/research-ab12`) acts on the same ticket."""
    kind, _, ident = session_key.partition(":")
    ticket = ident.split("/")[0]
    return ticket if kind == "ticket" and ticket else None


@dataclass(frozen=True)
class ToolOutput:
    content: str  # what the model reads as the tool_result
    is_error: bool = False
    external_id: str = ""  # e.g. the refund id at the payment provider


class ToolError(Exception):
    """A definite failure: nothing happened (or it is known what did).

    The message goes to the model as an error tool_result.
    """


class OutcomeUnknown(Exception):
    """The request may have reached the other side; we cannot know its effect."""


class NotSent(Exception):
    """The request certainly never left (connection refused); safe to retry."""


# In a failed call's output when every try was NotSent: the provider could
# not be reached and nothing was done (agents/runtime/tooling.py).
UNAVAILABLE = " unavailable: "


class Waiting(Exception):
    """The call goes on elsewhere (a sub-agent's session): the runtime parks
    the turn until it answers (capabilities/subagents.py)."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    kind: Kind
    run: Callable[[ToolContext, dict[str, Any]], ToolOutput]
    timeout_s: float = 15.0
    # The tool asks the gate for each of its own inner actions while it runs
    # (ToolContext.steps.gate; Code Mode, the browser), so the engine does
    # not gate the call itself at triage, and a call its dead worker left
    # running is run again: the tool judges its inner steps from steps.log().
    gated_inside: bool = False

    def schema_for_model(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    def normalize(self, arguments: Any) -> Any:
        """`arguments` brought to the schema's types (10100.0 -> 10100 for an
        integer); what the policy, the approver and the tool see. A new
        object; anything not convertible is left for validate() to refuse."""
        if not isinstance(arguments, dict):
            return arguments
        return _arguments.normalized(self.input_schema, arguments)

    def validate(self, arguments: Any) -> str | None:
        """The reason `arguments` don't fit the schema, or None when they do.
        Give it normalize()'d arguments: a float left at an integer place,
        NaN, infinities, integers past ±2**53 and nesting deeper than
        agents/tools/arguments.MAX_DEPTH are refused here, before the schema
        validator (which counts 10100.0 as an integer, and recurses)."""
        if not isinstance(arguments, dict):
            return "tool input must be a JSON object"
        if problem := _arguments.problems(self.input_schema, arguments):
            return problem
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "input"
        return f"{where}: {error.message}"

    @functools.cached_property
    def _validator(self) -> jsonschema.protocols.Validator:
        # Compiled once per tool: jsonschema.validate() checks the schema
        # against its metaschema on every call (about 1.5 ms, most of a step).
        cls = jsonschema.validators.validator_for(self.input_schema)
        cls.check_schema(self.input_schema)
        return cls(self.input_schema, format_checker=cls.FORMAT_CHECKER)
