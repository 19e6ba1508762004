"""Who decides an approval and how many must (issue 19): the tool's approval
policy as the capability profile declares it (capabilities ToolPolicy) or,
for a profile declared in code, settings; and the desk role of a person.

Apart from approvals/policies.py (whether a call needs a person at all),
because the step engine imports that and must not reach the capabilities
app (tests/test_import_contracts.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from approvals.policies import _dollars, _whole_cents
from capabilities.models import ToolPolicy

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
