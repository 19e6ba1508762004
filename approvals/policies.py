"""Approval policies: which tool calls need a human before they run.

A policy looks at one tool call (name and exact arguments) and answers with
the rule that requires approval, or None. Policies are pure functions of
settings and arguments, so the same call always gets the same answer.

Policies fail closed: a limit is only "not exceeded" when the value is read
as a plain number within it. An amount that is a float, a string, a boolean,
NaN, missing, negative or huge needs a person, whatever the schema or the
normaliser (agents/tools/arguments.py) would have made of it, so a gap there
cannot turn into money leaving without approval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings


@dataclass(frozen=True)
class Requirement:
    policy: str  # a stable name, shown to approvers and stored on the approval
    detail: str  # why, in words


def _dollars(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def _whole_cents(value: Any) -> int | None:
    """`value` as a count of cents, or None when it is not plainly one
    (bool is an int subclass in Python: True would read as 1 cent)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _refund(arguments: Any) -> Requirement | None:
    limit = settings.AGENTDESK_REFUND_APPROVAL_LIMIT_CENTS
    raw = arguments.get("amount_cents") if isinstance(arguments, dict) else None
    amount = _whole_cents(raw)
    if amount is None:
        shown = repr(raw)[:40]
        return Requirement(
            "refund_amount_unreadable",
            f"Refund amount {shown} is not a whole number of cents; a person must check it",
        )
    if amount > limit:
        return Requirement(
            "refund_over_limit",
            f"Refund of {_dollars(amount)} is above the {_dollars(limit)} limit",
        )
    return None


def requirement_for(tool_name: str, arguments: dict[str, Any]) -> Requirement | None:
    if tool_name == "issue_refund" and (requirement := _refund(arguments)):
        return requirement
    if tool_name == "send_reply" and settings.AGENTDESK_APPROVE_REPLIES:
        return Requirement("customer_reply_review", "Replies to customers are reviewed")
    return None
