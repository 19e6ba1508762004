"""The one writer of an approval's status (STYLE.md rule 1, issue 16).

`approval_move` checks the move against the table, writes the row and
appends the event that says so to the caller's list, which the caller
appends to the session's log in the same transaction (approvals/services.py
holds the session lock while it does). Changes that are not a move of
status (a vote, an assignment, an edit, an escalation) go through
`approval_touch`, which bumps the card's version so a decision made on an
older card is refused.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from agents.events import EventSpec
from agents.transitions import IllegalTransition
from approvals.models import Approval

A = Approval.Status

APPROVAL_MOVES: dict[str, frozenset[str]] = {
    A.PENDING: frozenset({A.APPROVED, A.DENIED, A.EXPIRED, A.CANCELED}),
    # Granted, but the call did not start before the approval's time ran out
    # (a worker down meanwhile): it lapses and never runs (services.approval_lapse).
    A.APPROVED: frozenset({A.EXPIRED}),
}


def check_approval_move(approval: Approval, to: str) -> None:
    if to not in APPROVAL_MOVES.get(approval.status, frozenset()):
        raise IllegalTransition(f"approval {approval.id}", approval.status, to)


def approval_move(
    approval: Approval,
    to: str,
    *,
    specs: list[EventSpec],
    kind: str,
    actor: str,
    data: dict[str, Any],
    fields: tuple[str, ...] = (),
) -> None:
    """Move `approval` (locked by the caller) to `to`, saving `fields` too."""
    check_approval_move(approval, to)
    approval.status = to
    approval.decided_at = approval.decided_at or timezone.now()
    approval.version += 1
    approval.save(update_fields=["status", "decided_at", "version", *fields])
    specs.append(EventSpec(kind, {"approval_id": approval.id, **data}, approval.turn_id, actor))


def approval_touch(
    approval: Approval,
    *,
    specs: list[EventSpec],
    kind: str,
    actor: str,
    data: dict[str, Any],
    fields: tuple[str, ...] = (),
) -> None:
    """A change of a pending card that is not a decision: saved, versioned, logged."""
    if approval.status != A.PENDING:
        raise IllegalTransition(f"approval {approval.id}", approval.status, "changed")
    approval.version += 1
    approval.save(update_fields=["version", *fields])
    specs.append(EventSpec(kind, {"approval_id": approval.id, **data}, approval.turn_id, actor))
