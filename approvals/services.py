"""Deciding approvals: approve, approve with edited arguments, deny, expire.

A decision is one short transaction under the session lock (lock order:
session runtime row, then the approval and its tool call), so it can never
race the worker or another decider: the first decision wins, and every later
one, like one on an expired approval or on arguments that changed since the
decider looked, is refused with Conflict (HTTP 409) and runs nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agents import events
from agents.errors import Conflict, Forbidden, Invalid
from agents.events import EventSpec
from agents.models import ToolCall
from agents.observability import observe
from agents.runtime import store
from agents.services import resume_if_unblocked
from agents.transitions import check_tool_move
from approvals.models import Approval, Decision, arguments_hash
from capabilities.profiles import get_profile

C = ToolCall.Status
A = Approval.Status


def approval_decide(
    *,
    approval_id: int,
    user: AbstractBaseUser,
    decision: str,
    reason: str = "",
    edited_input: dict[str, Any] | None = None,
    expected_hash: str | None = None,
    client_address: str | None = None,
) -> Approval:
    if not user.has_perm("approvals.decide_approval"):
        raise Forbidden("you may not decide approvals")
    if decision not in Approval.Decision.values:
        raise Invalid(f"unknown decision {decision!r}")
    if decision == Approval.Decision.DENY and not reason.strip():
        raise Invalid("a denial needs a reason: the agent reads it")
    session_id = Approval.objects.values_list("session_id", flat=True).get(pk=approval_id)
    with transaction.atomic():
        runtime = store.lock_session(session_id)
        approval = (
            Approval.objects.select_for_update().select_related("tool_call").get(pk=approval_id)
        )
        _check_decidable(approval, user, expected_hash)
        call = approval.tool_call
        now = timezone.now()
        if decision == Approval.Decision.APPROVE:
            _approve(approval, call, edited_input)
        else:
            approval.status = A.DENIED
            _close_call(call, C.DENIED, f"Denied by {user.get_username()}: {reason.strip()}")
        approval.decided_by, approval.decided_at, approval.reason = user, now, reason.strip()
        approval.save()
        _record_decision(approval, user, client_address)
        observe.approval_decided(approval, runtime.session.key)  # on commit
        who = user.get_username()
        data = {
            "approval_id": approval.id,
            "tool_use_id": call.tool_use_id,
            "decision": approval.status,
            "reason": approval.reason,
            "edited": approval.edited_arguments is not None,
        }
        specs = [EventSpec("approval.decided", data, approval.turn_id, who)]
        resume_if_unblocked(runtime, approval.turn_id, specs, who)
        events.append(runtime, specs)
    return approval


def _record_decision(
    approval: Approval, user: AbstractBaseUser | None, client_address: str | None
) -> None:
    """The append-only record of the decision, in its transaction."""
    roles = ",".join(sorted(user.groups.values_list("name", flat=True))) if user else ""
    Decision.objects.create(
        approval_id=approval.id,
        session_id=approval.session_id,
        tool_call_id=approval.tool_call_id,
        tool_name=approval.tool_name,
        decision=approval.status,
        actor_id=user.pk if user else None,
        actor=user.get_username() if user else "system",
        role=roles[:100],
        client_address=client_address,
        arguments_before=approval.arguments,
        arguments_after=approval.edited_arguments,
        reason=approval.reason,
    )


def _check_decidable(approval: Approval, user: AbstractBaseUser, expected_hash: str | None) -> None:
    if approval.status != A.PENDING:
        raise Conflict(f"this approval was already {approval.status}", current=approval.status)
    if approval.expires_at <= timezone.now():
        raise Conflict("this approval has expired", current="expired")
    if expected_hash is not None and expected_hash != approval.arguments_hash:
        raise Conflict("the arguments changed since you looked", current=approval.status)
    if approval.requested_by_id is not None and approval.requested_by_id == user.pk:
        raise Forbidden("you started this turn, so someone else must approve its side effects")


def _approve(approval: Approval, call: ToolCall, edited: dict[str, Any] | None) -> None:
    if edited is not None and arguments_hash(edited) != approval.arguments_hash:
        tool = get_profile(approval.session.profile).tool(call.name)
        if tool is not None:  # the approver's edit is held to the model's rules
            edited = tool.normalize(edited)
        problem = tool.validate(edited) if tool else "the tool is no longer offered"
        if problem:
            raise Invalid(f"edited arguments do not fit the tool: {problem}")
        approval.edited_arguments = edited
        call.input = edited
    approval.status = A.APPROVED
    check_tool_move(call, C.APPROVED)
    call.status = C.APPROVED
    call.save(update_fields=["status", "input"])


def _close_call(call: ToolCall, status: str, note: str) -> None:
    check_tool_move(call, status)
    call.status, call.output, call.is_error = status, note, True
    call.finished_at = timezone.now()
    call.save(update_fields=["status", "output", "is_error", "finished_at"])


def approvals_expire(*, now=None) -> int:
    """Expire pending approvals past their time; each as its own transaction
    under its session's lock, so a click racing the expiry is serialized with
    it and exactly one of them wins."""
    now = now or timezone.now()
    due = Approval.objects.filter(status=A.PENDING, expires_at__lte=now).values_list(
        "id", "session_id"
    )
    expired = 0
    for approval_id, session_id in due[:500]:
        with transaction.atomic():
            runtime = store.lock_session(session_id)
            approval = (
                Approval.objects.select_for_update().select_related("tool_call").get(pk=approval_id)
            )
            if approval.status != A.PENDING or approval.expires_at > timezone.now():
                continue
            approval.status, approval.decided_at = A.EXPIRED, timezone.now()
            approval.save(update_fields=["status", "decided_at"])
            _record_decision(approval, None, None)
            observe.approval_decided(approval, runtime.session.key)  # on commit
            call = approval.tool_call
            _close_call(call, C.DENIED, "The approval for this action expired; it did not run.")
            data = {"approval_id": approval.id, "tool_use_id": call.tool_use_id}
            specs = [EventSpec("approval.expired", data, approval.turn_id, "system")]
            resume_if_unblocked(runtime, approval.turn_id, specs, "system")
            events.append(runtime, specs)
            expired += 1
    return expired
