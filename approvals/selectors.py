"""Reads for the approvals inbox and cards: views (mine / unassigned / all)
with their counts, sorts (time left, newest, amount, session), and what a
card shows beside the exact arguments: who may decide and how many must
(policy terms), the votes so far, who has it, the SLA clock, and the
context an approver needs (the order, what was refunded, the customer's plan
and earlier refunds) from what the session's own tool calls already
recorded: rendering a card makes no network call.

Each read is a fixed number of queries however many cards it shows.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from agents import selectors as agent_selectors
from agents.models import Message, ToolCall
from approvals import terms as who_decides
from approvals.models import Approval, SessionAssignment, Vote
from approvals.terms import Terms

VIEWS = ("all", "mine", "unassigned")
SORTS = {
    "time_left": "time left",
    "newest": "newest",
    "amount": "amount",
    "session": "session",
}
CONTEXT_TOOLS = ("lookup_order", "lookup_customer", "issue_refund")


@dataclass
class Sla:
    clock_start: datetime
    expires_at: datetime
    warn_at: datetime

    @property
    def state(self) -> str:
        now = timezone.now()
        if now >= self.expires_at:
            return "expired"
        return "warning" if now >= self.warn_at else "ok"


@dataclass
class CardView:
    terms: Terms
    sla: Sla
    votes: list[Vote] = field(default_factory=list)
    approving: int = 0
    owner: Any = None  # the user who has it (the card's assignee, else the session's taker)
    owner_via_session: bool = False
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def bulk_ok(self) -> bool:
        """Low risk: one approver decides alone, not escalated."""
        return not self.terms.quorum and self.terms.role == who_decides.APPROVER

    @property
    def policy_key(self) -> str:
        t = self.terms
        return f"{t.role}:{t.votes}:{t.on_expiry}"


@dataclass
class Inbox:
    cards: list[Approval]
    counts: dict[str, int]
    view: str
    sort: str
    page: int = 1
    per_page: int = 200

    # A page shows at most per_page cards; the page says how many it does not
    # show and links to the others, so a new card past the first page is
    # never silently out of view.
    @property
    def total(self) -> int:
        return self.counts.get(self.view, len(self.cards))

    @property
    def first(self) -> int:
        return (self.page - 1) * self.per_page + 1 if self.cards else 0

    @property
    def last(self) -> int:
        return (self.page - 1) * self.per_page + len(self.cards)

    @property
    def not_shown(self) -> int:
        return max(0, self.total - len(self.cards))

    @property
    def next_page(self) -> int | None:
        return self.page + 1 if self.last < self.total else None

    @property
    def previous_page(self) -> int | None:
        return self.page - 1 if self.page > 1 else None


def sla_of(approval: Approval) -> Sla:
    start, end = approval.clock_start, approval.expires_at
    warn = end - (end - start) * settings.AGENTDESK_APPROVAL_WARN_FRACTION
    return Sla(start, end, warn)


def _pending(user: AbstractBaseUser) -> QuerySet[Approval]:
    return agent_selectors.approvals_for_user(user=user).filter(status=Approval.Status.PENDING)


def _view_filter(view: str, user: AbstractBaseUser) -> Q:
    taken_by_session = Q(session__approval_assignment__isnull=False)
    if view == "mine":
        return Q(assignee=user) | Q(assignee__isnull=True, session__approval_assignment__user=user)
    if view == "unassigned":
        return Q(assignee__isnull=True) & ~taken_by_session
    return Q()


def inbox(
    *,
    user: AbstractBaseUser,
    view: str = "all",
    sort: str = "time_left",
    limit: int | None = None,
    page: int = 1,
) -> Inbox:
    limit = limit or settings.AGENTDESK_INBOX_PAGE
    view = view if view in VIEWS else "all"
    sort = sort if sort in SORTS else "time_left"
    pending = _pending(user)
    counts = pending.aggregate(
        all=Count("id"),
        mine=Count("id", filter=_view_filter("mine", user)),
        unassigned=Count("id", filter=_view_filter("unassigned", user)),
    )
    order = {
        "time_left": ("expires_at", "id"),
        "newest": ("-created_at", "-id"),
        "session": ("session__key", "created_at", "id"),
        "amount": ("created_at", "id"),  # sorted by amount below (it lives in JSON)
    }[sort]
    rows = list(
        pending.filter(_view_filter(view, user))
        .select_related("session", "turn", "tool_call", "requested_by", "assignee")
        .order_by(*order)[(page - 1) * limit : page * limit]
    )
    decorate(rows)
    if sort == "amount":
        rows.sort(key=lambda a: -(a.view.terms.amount or 0))
    return Inbox(rows, counts, view, sort, page, limit)


def card(*, user: AbstractBaseUser, approval_id: int) -> Approval | None:
    approval = (
        agent_selectors.approvals_for_user(user=user)
        .select_related("session", "turn", "tool_call", "requested_by", "decided_by", "assignee")
        .filter(pk=approval_id)
        .first()
    )
    if approval is not None:
        decorate([approval])
    return approval


def decorate(approvals: list[Approval]) -> list[Approval]:
    """Attach `approval.view` (CardView) to each: five queries for any number."""
    if not approvals:
        return approvals
    ids = [a.id for a in approvals]
    session_ids = {a.session_id for a in approvals}
    votes: dict[int, list[Vote]] = defaultdict(list)
    for vote in Vote.objects.filter(approval_id__in=ids).order_by("created_at", "id"):
        votes[vote.approval_id].append(vote)
    takers = {
        s.session_id: s.user
        for s in SessionAssignment.objects.filter(session_id__in=session_ids).select_related("user")
    }
    declared = _declared({(a.session.profile, a.tool_name) for a in approvals})
    contexts = _contexts(approvals)
    for a in approvals:
        terms = who_decides.terms_for(
            declared[(a.session.profile, a.tool_name)],
            arguments=a.arguments,
            edited=a.edited_arguments,
            escalations=a.escalations,
        )
        current = [v for v in votes[a.id] if v.round == a.escalations]
        approving = sum(
            1 for v in current if v.decision == "approve" and v.arguments_hash == a.effective_hash
        )
        owner = a.assignee if a.assignee_id else takers.get(a.session_id)
        a.view = CardView(
            terms=terms,
            sla=sla_of(a),
            votes=current,
            approving=approving,
            owner=owner,
            owner_via_session=not a.assignee_id and owner is not None,
            context=contexts.get(a.id, {}),
        )
    return approvals


def ensure_view(approval: Approval) -> Approval:
    """A card rendered from elsewhere (the session page, a push) gets its view."""
    if not hasattr(approval, "view"):
        decorate([approval])
    return approval


def _declared(keys: set[tuple[str, str]]) -> dict[tuple[str, str], who_decides.ToolTerms]:
    # One query per distinct (profile, tool): an inbox holds a handful.
    return {key: who_decides.declared_terms(*key) for key in keys}


def _parsed(output: str) -> Any:
    try:
        return json.loads(output)
    except (TypeError, ValueError):
        return None


def _result_text(content: Any) -> str:
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            text = block.get("content", "")
            if isinstance(text, list):
                return "".join(str(b.get("text", "")) for b in text if isinstance(b, dict))
            return str(text)
    return ""


def _contexts(approvals: list[Approval]) -> dict[int, dict[str, Any]]:
    """Per approval: the order and customer its session looked up, and the
    refunds it already made (one query over the sessions' calls)."""
    session_ids = {a.session_id for a in approvals}
    calls = ToolCall.objects.filter(
        session_id__in=session_ids, name__in=CONTEXT_TOOLS, status=ToolCall.Status.SUCCEEDED
    ).order_by("id")
    calls = list(calls.only("id", "session_id", "name", "result_position"))
    # A call's result is in the transcript (the tool_result row), not on the call.
    results = {
        (m.session_id, m.position): m.content
        for m in Message.objects.filter(
            session_id__in={c.session_id for c in calls},
            position__in={c.result_position for c in calls if c.result_position is not None},
            role="user",
        ).only("session_id", "position", "content")
    }
    seen: dict[int, dict[str, Any]] = defaultdict(lambda: {"orders": {}, "refunds": []})
    for call in calls:
        body = _parsed(_result_text(results.get((call.session_id, call.result_position))))
        if not isinstance(body, dict):
            continue
        box = seen[call.session_id]
        if call.name == "lookup_order" and body.get("id"):
            box["orders"][body["id"]] = body
        elif call.name == "lookup_customer":
            box["customer"] = body
            for order in body.get("orders") or []:
                if isinstance(order, dict) and order.get("id"):
                    box["orders"].setdefault(order["id"], order)
        elif call.name == "issue_refund":
            box["refunds"].append({"call_id": call.id, **body})
    out = {}
    for a in approvals:
        box = seen.get(a.session_id)
        if box is None:
            continue
        order_id = (a.effective_arguments or {}).get("order_id")
        order = box["orders"].get(order_id) if isinstance(order_id, str) else None
        customer = box.get("customer")
        out[a.id] = {
            "order": _order_view(order) if isinstance(order, dict) else None,
            "customer": _customer_view(customer, order_id) if isinstance(customer, dict) else None,
            "session_refunds": [r for r in box["refunds"] if r["call_id"] != a.tool_call_id],
        }
    return out


def _order_view(order: dict[str, Any]) -> dict[str, Any]:
    items = [i for i in order.get("items") or [] if isinstance(i, dict)]
    total = order.get("total_cents")
    refunded = order.get("refunded_cents") or 0
    left = total - refunded if isinstance(total, int) and isinstance(refunded, int) else None
    return {
        "id": order.get("id"),
        "status": order.get("status"),
        "items": items,
        "total_cents": total,
        "refunded_cents": refunded,
        "refundable_cents": left,
    }


def _customer_view(customer: dict[str, Any], order_id: Any) -> dict[str, Any]:
    earlier = []
    for order in customer.get("orders") or []:
        if isinstance(order, dict) and order.get("refunded_cents") and order.get("id") != order_id:
            earlier.append({"order_id": order.get("id"), "cents": order.get("refunded_cents")})
    return {
        "name": customer.get("name"),
        "email": customer.get("email"),
        "plan": customer.get("plan"),
        "orders": len(customer.get("orders") or []),
        "earlier_refunds": earlier,
    }


def deciders_for_reassign() -> list[AbstractBaseUser]:
    """People an admin can give a card to (they may decide approvals)."""
    from django.contrib.auth import get_user_model

    perm = Q(groups__permissions__codename="decide_approval") | Q(is_superuser=True)
    return list(
        get_user_model().objects.filter(perm, is_active=True).distinct().order_by("username")[:100]
    )
