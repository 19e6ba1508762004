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


# --- Who decides, and how many (issue 19) -------------------------------------------
#
# Requirement says *whether* a call needs a person; Terms say *who* and *how
# many*, from the tool's policy in the capability profile (capabilities
# ToolPolicy) or, for a profile declared in code, from settings. Terms are a
# pure function of that policy, the arguments (the larger of what the agent
# asked and what an approver edited them to) and whether the approval was
# escalated, so every reader (the inbox, the decision, the expiry) agrees.

APPROVER, ADMIN = "approver", "admin"
ROLE_LEVEL = {APPROVER: 1, ADMIN: 2}


@dataclass(frozen=True)
class Terms:
    role: str  # the lowest desk role that may decide
    votes: int  # distinct approvers needed (1: no quorum)
    deny_ends: bool  # one deny ends a quorum
    on_expiry: str  # "deny" | "escalate"
    escalation_ttl_s: int  # the escalated approval's fresh clock
    amount: int | None  # the amount the terms were read for (cents), if any
    why_role: str  # why that role, in words ("" for the policy's own role)

    @property
    def quorum(self) -> bool:
        return self.votes > 1

    @property
    def can_escalate(self) -> bool:
        return self.on_expiry == "escalate" and self.role != ADMIN


@dataclass(frozen=True)
class ToolTerms:
    """One tool's approval policy as declared (a ToolPolicy row or settings)."""

    decider_role: str = APPROVER
    admin_above_cents: int | None = None
    quorum_above_cents: int | None = None
    quorum_votes: int = 2
    quorum_deny_ends: bool = True
    on_expiry: str = "deny"
    escalation_ttl_s: int | None = None


def declared_terms(profile: str, tool_name: str) -> ToolTerms:
    """The tool's policy row, else the defaults in settings."""
    from capabilities.models import ToolPolicy

    row = (
        ToolPolicy.objects.filter(
            profile__name=profile, capability__in=[tool_name, tool_name.replace("__", ".")]
        )
        .order_by()
        .first()
    )
    if row is None:
        return _settings_terms()
    return ToolTerms(
        row.decider_role,
        row.admin_above_cents,
        row.quorum_above_cents,
        row.quorum_votes,
        row.quorum_deny_ends,
        row.on_expiry,
        row.escalation_ttl_s,
    )


def _settings_terms() -> ToolTerms:
    return ToolTerms(
        admin_above_cents=settings.AGENTDESK_APPROVAL_ADMIN_ABOVE_CENTS,
        quorum_above_cents=settings.AGENTDESK_APPROVAL_QUORUM_ABOVE_CENTS,
        quorum_votes=settings.AGENTDESK_APPROVAL_QUORUM_VOTES,
        on_expiry=settings.AGENTDESK_APPROVAL_ON_EXPIRY,
    )


def amount_of(arguments: Any) -> int | None:
    """The amount at stake in cents (refunds), or None."""
    if not isinstance(arguments, dict):
        return None
    return _whole_cents(arguments.get("amount_cents"))


def terms_for(
    declared: ToolTerms, *, arguments: dict, edited: dict | None = None, escalations: int = 0
) -> Terms:
    amounts = [a for a in (amount_of(arguments), amount_of(edited)) if a is not None]
    amount = max(amounts) if amounts else None
    unreadable = amount_of(arguments) is None and "amount_cents" in (arguments or {})
    role, why = declared.decider_role, ""
    if escalations:
        role, why = ADMIN, "escalated to admins: nobody decided in time"
    elif (
        declared.admin_above_cents is not None
        and amount is not None
        and amount > declared.admin_above_cents
    ):
        role = ADMIN
        why = f"amounts above {_dollars(declared.admin_above_cents)} need an admin"
    elif unreadable and declared.admin_above_cents is not None:
        role, why = ADMIN, "the amount is unreadable, so an admin decides"
    votes = 1
    if declared.quorum_above_cents is not None and (
        unreadable or (amount is not None and amount > declared.quorum_above_cents)
    ):
        votes = max(2, declared.quorum_votes)
    ttl = declared.escalation_ttl_s or settings.AGENTDESK_APPROVAL_TTL_S
    return Terms(role, votes, declared.quorum_deny_ends, declared.on_expiry, ttl, amount, why)


def role_level(user: Any) -> int:
    """0: may not decide; 1: approver; 2: admin (the desk groups)."""
    if user is None or not user.is_authenticated:
        return 0
    cached = getattr(user, "_desk_level", None)  # one query per request, not per card
    if cached is not None:
        return cached
    if user.is_superuser:
        level = ROLE_LEVEL[ADMIN]
    elif ADMIN in set(user.groups.values_list("name", flat=True)):
        level = ROLE_LEVEL[ADMIN]
    else:
        level = ROLE_LEVEL[APPROVER] if user.has_perm("approvals.decide_approval") else 0
    user._desk_level = level
    return level


def dollars(cents: int | None) -> str:
    return "—" if cents is None else _dollars(cents)
