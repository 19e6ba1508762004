"""What the owner of a session keeps in memory between its commits.

Loaded once by a claim (store.claim) and kept in step with every record the
owner commits, so the hot path never reads before it writes. Anything a
human may change meanwhile (a cancel, an approval decision) is either
returned by the record statements (`cancel_requested`) or re-read under the
lock before the engine relies on it (store.park).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agents.budgets import Limits
from agents.models import ToolCall

S = ToolCall.Status


@dataclass
class CallState:
    id: int
    tool_use_id: str
    idempotency_key: str
    name: str
    kind: str
    status: str
    input: dict[str, Any]
    output: str = ""
    is_error: bool = False
    attempts: int = 0
    result_position: int | None = None

    @property
    def has_result(self) -> bool:
        return self.result_position is not None

    @classmethod
    def from_row(cls, call: ToolCall) -> CallState:
        """From a ToolCall row (a claim loading the turn)."""
        return cls(
            id=call.id,
            tool_use_id=call.tool_use_id,
            idempotency_key=call.idempotency_key,
            name=call.name,
            kind=call.kind,
            status=call.status,
            input=call.input,
            output=call.output,
            is_error=call.is_error,
            attempts=call.attempts,
            result_position=call.result_position,
        )

    @classmethod
    def from_recorded(cls, call: dict[str, Any], call_id: int) -> CallState:
        """From a call as store.record_reply wrote it, with the id it got."""
        return cls(
            id=call_id,
            tool_use_id=call["tool_use_id"],
            idempotency_key=call["idempotency_key"],
            name=call["name"],
            kind=call["kind"],
            status=call["status"],
            input=call["input"],
            output=call["output"],
            is_error=bool(call["output"]),
            attempts=call["attempts"],
        )


@dataclass
class Claimed:
    session_id: int
    key: str
    profile: str
    context: dict[str, Any]
    fence: int
    owner: str
    turn_id: int
    turn_number: int
    started_by_id: int | None
    limits: Limits  # the session's budgets (agents/budgets.py), read by the claim
    turn_steps: int
    transcript: list[dict[str, Any]]  # rows in position order: {"role", "content"}
    calls: list[CallState]  # tool calls of the last assistant message, in order
    recovered: bool = False
    # Calls found `running` by this claim: a dead owner may have sent them.
    in_flight_at_claim: set[int] = field(default_factory=set)
    cancel_requested: bool = False
    turn_done: bool = False
    # Set when the reply that ended the turn was recorded: whether another
    # turn was queued then (None: not known, claim again to find out).
    turn_queued: bool | None = None
    # Budgets: the spend so far, kept in step with what this owner records,
    # so the check before a call is free.
    turn_started_at: datetime | None = None
    turn_tokens: int = 0
    turn_cost_micros: int = 0
    total_tokens: int = 0
    total_cost_micros: int = 0
    # Memory (agents/runtime/memory.py): `transcript` holds the rows from
    # position `transcript_base` on; the rows before it are summarized.
    transcript_base: int = 0
    memory_summary: str = ""
    transcript_chars: int = 0  # JSON characters of transcript[:chars_counted]
    chars_counted: int = 0

    def next_unresolved(self) -> CallState | None:
        for call in self.calls:
            if not call.has_result:
                return call
        return None

    def next_to_run_after(self, call: CallState) -> CallState | None:
        """The call to mark running in the same commit that records `call`."""
        following = self.calls[self.calls.index(call) + 1 :]
        for nxt in following:
            if nxt.has_result:
                continue
            # An approved call's first start waits for its own step: the
            # engine checks first that its approval has not lapsed.
            runnable = nxt.status == S.PENDING or (nxt.status == S.APPROVED and nxt.attempts)
            return nxt if runnable else None
        return None
