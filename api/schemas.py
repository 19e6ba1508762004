"""What the API takes and gives (Pydantic, through django-ninja): these
classes are the OpenAPI document's components."""

from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Field, Schema

# Text Postgres can store (no NUL) with something in it besides spaces.
TEXT = r"^[^\x00]*[^\s\x00][^\x00]*$"
NO_NUL = r"^[^\x00]*$"


class Problem(Schema):
    """RFC 9457 problem details."""

    type: str = Field(examples=["about:blank"])
    title: str
    status: int
    detail: str | None = None
    current: str | None = Field(None, description="the current state of what was refused")
    errors: list[dict[str, Any]] | None = Field(None, description="what failed validation")


class SessionOut(Schema):
    id: int
    key: str
    profile: str
    status: str
    message_policy: str
    title: str
    customer: str
    context: dict[str, Any]
    last_seq: int = Field(description="seq of the session's latest event")
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_last_seq(obj) -> int:
        return obj.runtime.last_seq


class SessionPage(Schema):
    items: list[SessionOut]
    next_cursor: int | None = Field(description="pass as `cursor` for the next page; null: last")


class TurnOut(Schema):
    id: int
    number: int
    status: str
    trigger: str
    input: str
    error: str
    steps: int
    input_tokens: int
    output_tokens: int
    started_by: str | None = None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @staticmethod
    def resolve_started_by(obj) -> str | None:
        return obj.started_by.get_username() if obj.started_by_id else None


class TurnPage(Schema):
    items: list[TurnOut]
    next_cursor: int | None


class HostCallOut(Schema):
    """One host call of a program: an inner step of its run_code call."""

    id: int
    n: int
    name: str
    status: str
    arguments: Any
    result: str
    is_error: bool
    attempts: int
    duration_ms: int | None
    started_at: datetime | None
    finished_at: datetime | None


class ProgramOut(Schema):
    """A Code Mode program (a run_code call): its source, its host calls in
    order, and once it has finished what it printed and its value or error."""

    source: str
    host_calls: list[HostCallOut]
    finished: bool
    stdout: str | None = Field(description="what the program printed; null until it finished")
    value: Any = Field(None, description="its last expression's value, when it succeeded")
    error: str | None = Field(None, description="why it failed, when it failed")
    interpreter_ms: int | None = None


class ToolCallOut(Schema):
    id: int
    turn_id: int
    tool_use_id: str
    name: str
    kind: str
    status: str
    input: Any
    output: str
    is_error: bool
    external_id: str
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    # An inner step (a Code Mode program's host call n): its outer call and n.
    parent_id: int | None = None
    step: int | None = None
    # A run_code call: its program, with the host calls nested (null otherwise).
    program: ProgramOut | None = None


class ToolCallPage(Schema):
    items: list[ToolCallOut]
    next_cursor: int | None


class ApprovalOut(Schema):
    id: int
    session_id: int
    turn_id: int
    tool_call_id: int
    status: str
    policy: str
    policy_detail: str
    tool_name: str
    arguments: dict[str, Any]
    arguments_hash: str = Field(description="send back as `expected_hash` when deciding")
    edited_arguments: dict[str, Any] | None
    reasoning: str
    reason: str
    requested_by: str | None = None
    decided_by: str | None = None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None

    @staticmethod
    def resolve_requested_by(obj) -> str | None:
        return obj.requested_by.get_username() if obj.requested_by_id else None

    @staticmethod
    def resolve_decided_by(obj) -> str | None:
        return obj.decided_by.get_username() if obj.decided_by_id else None


class ApprovalPage(Schema):
    items: list[ApprovalOut]
    next_cursor: int | None


HASH = Field(
    pattern=r"^[0-9a-f]{64}$",
    description="arguments_hash of the approval as you saw it: a decision on "
    "arguments that changed since is refused with 409",
)


class Approve(Schema):
    decision: Literal["approve"]
    expected_hash: str = HASH
    reason: str = Field("", max_length=4000, pattern=NO_NUL)
    edited_arguments: dict[str, Any] | None = Field(
        None,
        description="approve with these arguments instead (checked against the tool's "
        "input schema: 400 when they do not fit)",
    )


class Deny(Schema):
    decision: Literal["deny"]
    expected_hash: str = HASH
    reason: str = Field(
        min_length=1, max_length=4000, pattern=TEXT, description="the agent reads it"
    )


DecisionIn = Annotated[Approve | Deny, Field(discriminator="decision")]


class MessageIn(Schema):
    session_key: str = Field(min_length=1, max_length=200, pattern=TEXT, examples=["ticket:4812"])
    text: str = Field(min_length=1, max_length=100_000, pattern=TEXT)


class Accepted(Schema):
    session: str = Field(description="the session's domain key")
    session_id: int
    turn: int = Field(description="the turn's number in its session")
    turn_id: int
    status: str


class SessionStatusOut(Schema):
    id: int
    key: str
    status: str


class EventOut(Schema):
    seq: int
    kind: str
    turn_id: int | None
    data: Any
    actor: str
    at: datetime


class EventPage(Schema):
    events: list[EventOut]
    last_seq: int = Field(description="seq of the last event in this page, or `after` if none")
    more: bool = Field(description="true: ask again with after=last_seq at once")
