"""Assignment: an approver takes a card (or a whole session) and gives it back;
an admin reassigns. "Mine" is who works on it, not a lock on deciding (a
quorum needs several people); every change bumps the card's version, so a
decision made on a card loaded before it is refused (services._check_decidable).

Taking is a short transaction under the session lock (the same lock order as
a decision: session runtime row, then the approval), so two people taking
the same card at once are serialized: the first wins, the second gets
Conflict (409) naming who has it.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agents import events
from agents.errors import Conflict, Forbidden, Invalid
from agents.events import EventSpec
from agents.runtime import store
from approvals import terms as who_decides
from approvals.models import Approval, SessionAssignment
from approvals.terms import ADMIN, ROLE_LEVEL
from approvals.transitions import approval_touch

A = Approval.Status


def _may_decide(user: AbstractBaseUser) -> None:
    if not user.has_perm("approvals.decide_approval"):
        raise Forbidden("you may not decide approvals, so you cannot take them")


def _is_admin(user: AbstractBaseUser) -> bool:
    return who_decides.role_level(user) >= ROLE_LEVEL[ADMIN]


def _held(who: AbstractBaseUser, since) -> str:
    return f"{who.get_username()} took it at {timezone.localtime(since):%H:%M:%S}"


def _assign(approval: Approval, to: AbstractBaseUser | None, actor: str, specs) -> None:
    approval.assignee = to
    approval.assigned_at = timezone.now() if to is not None else None
    data = {"to": to.get_username() if to is not None else ""}
    approval_touch(
        approval,
        specs=specs,
        kind="approval.assigned",
        actor=actor,
        data=data,
        fields=("assignee", "assigned_at"),
    )


def _locked_pending(approval_id: int) -> tuple:
    session_id = Approval.objects.values_list("session_id", flat=True).get(pk=approval_id)
    runtime = store.lock_session(session_id)
    approval = (
        Approval.objects.select_for_update(of=("self",))
        .select_related("assignee", "tool_call")
        .get(pk=approval_id)
    )
    if approval.status != A.PENDING:
        raise Conflict(f"this approval was already {approval.status}", current=approval.status)
    return runtime, approval


def approval_take(
    *, approval_id: int, user: AbstractBaseUser, expected_version: int | None = None
) -> Approval:
    """Make the card mine. Taking one already mine changes nothing."""
    _may_decide(user)
    with transaction.atomic():
        runtime, approval = _locked_pending(approval_id)
        if approval.assignee_id == user.pk:
            return approval
        if approval.assignee_id is not None:
            raise Conflict(
                f"{_held(approval.assignee, approval.assigned_at)}; ask them, or an admin"
                " can reassign it",
                current=f"assigned to {approval.assignee.get_username()}",
            )
        specs: list[EventSpec] = []
        _assign(approval, user, user.get_username(), specs)
        events.append(runtime, specs)
    return approval


def approval_give_back(*, approval_id: int, user: AbstractBaseUser) -> Approval:
    """Unassign: the assignee gives it back (an admin may for anyone)."""
    _may_decide(user)
    with transaction.atomic():
        runtime, approval = _locked_pending(approval_id)
        if approval.assignee_id is None:
            return approval
        if approval.assignee_id != user.pk and not _is_admin(user):
            raise Forbidden(
                f"{approval.assignee.get_username()} has this approval; only they or an admin"
                " can give it back"
            )
        specs: list[EventSpec] = []
        _assign(approval, None, user.get_username(), specs)
        events.append(runtime, specs)
    return approval


def approval_reassign(*, approval_id: int, user: AbstractBaseUser, to_username: str) -> Approval:
    """An admin gives the card to someone who may decide approvals."""
    if not _is_admin(user):
        raise Forbidden("only an admin can reassign an approval")
    to = get_user_model().objects.filter(username=to_username, is_active=True).first()
    if to is None or not to.has_perm("approvals.decide_approval"):
        raise Invalid(f"{to_username!r} is not someone who decides approvals")
    with transaction.atomic():
        runtime, approval = _locked_pending(approval_id)
        if approval.assignee_id == to.pk:
            return approval
        specs: list[EventSpec] = []
        _assign(approval, to, user.get_username(), specs)
        events.append(runtime, specs)
    return approval


def session_take(*, session_id: int, user: AbstractBaseUser) -> SessionAssignment:
    """Take a whole session: its unassigned pending cards become mine, and
    so do the ones it asks for later (selectors read the session's taker)."""
    _may_decide(user)
    with transaction.atomic():
        runtime = store.lock_session(session_id)
        held = SessionAssignment.objects.select_related("user").filter(session_id=session_id)
        current = held.first()
        if current is not None and current.user_id != user.pk:
            raise Conflict(
                f"{_held(current.user, current.assigned_at)} (the whole session)",
                current=f"assigned to {current.user.get_username()}",
            )
        taken = current or SessionAssignment.objects.create(session_id=session_id, user=user)
        specs: list[EventSpec] = []
        cards = Approval.objects.select_for_update(of=("self",)).filter(
            session_id=session_id, status=A.PENDING, assignee__isnull=True
        )
        for approval in cards:
            _assign(approval, user, user.get_username(), specs)
        events.append(runtime, specs)
    return taken


def session_give_back(*, session_id: int, user: AbstractBaseUser) -> None:
    _may_decide(user)
    with transaction.atomic():
        runtime = store.lock_session(session_id)
        current = SessionAssignment.objects.filter(session_id=session_id).first()
        if current is None:
            return
        if current.user_id != user.pk and not _is_admin(user):
            raise Forbidden("only whoever took the session, or an admin, can give it back")
        current.delete()
        specs: list[EventSpec] = []
        cards = Approval.objects.select_for_update(of=("self",)).filter(
            session_id=session_id, status=A.PENDING, assignee_id=current.user_id
        )
        for approval in cards:
            _assign(approval, None, user.get_username(), specs)
        events.append(runtime, specs)
