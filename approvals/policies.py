"""Approval policies: which tool calls need a human before they run.

A policy looks at one tool call (name and exact arguments) and answers with
the rule that requires approval, or None. Policies are pure functions of
settings and arguments, so the same call always gets the same answer.
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


def requirement_for(tool_name: str, arguments: dict[str, Any]) -> Requirement | None:
    if tool_name == "issue_refund":
        limit = settings.AGENTDESK_REFUND_APPROVAL_LIMIT_CENTS
        amount = arguments.get("amount_cents")
        if isinstance(amount, int) and amount > limit:
            return Requirement(
                "refund_over_limit",
                f"Refund of {_dollars(amount)} is above the {_dollars(limit)} limit",
            )
    if tool_name == "send_reply" and settings.AGENTDESK_APPROVE_REPLIES:
        return Requirement("customer_reply_review", "Replies to customers are reviewed")
    return None
