"""Deciding approvals: vote, approve (with edited arguments), deny, bulk
approve, expire or escalate, and the check an approved call passes before it
runs.

A decision is one short transaction under the session lock (lock order:
session runtime row, then the approval and its tool call), so it can never
race the worker or another decider: every vote is serialized with every
other, and one made on an expired approval, on arguments that changed, or
on a card that changed since the decider loaded it (another vote, an edit,
an assignment: `expected_version`) is refused with Conflict (HTTP 409) and
runs nothing. Who may decide (role, amount, quorum) is policy
(approvals/terms.py::terms_for); a refusal by policy is Forbidden (403)
and says why in words.

The tool call moves to `approved` only with the last required vote, so the
step protocol runs the side effect once, with its idempotency key, after the
approval is fully granted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agents import events
from agents.errors import Conflict, Forbidden, Invalid
from agents.events import EventSpec
from agents.models import SessionRuntime, ToolCall
from agents.observability import observe
from agents.runtime import store
from agents.services import resume_if_unblocked
from agents.transitions import toolcall_move
from approvals import terms as who_decides
from approvals.models import Approval, Decision, Vote, arguments_hash
from approvals.terms import ADMIN, ROLE_LEVEL, Terms, dollars
from approvals.transitions import approval_move, approval_touch
from capabilities.profiles import get_profile

C = ToolCall.Status
A = Approval.Status


def approval_request(
    *,
    tool_call: ToolCall,
    policy: str,
    detail: str,
    requested_by_id: int | None,
    preview: dict[str, Any] | None = None,
    reasoning: str = "",
) -> int:
    """The approval row for a call the gate said must wait, written in the
    caller's transaction (the runtime's, under the session lock: an inner
    step of a running call, agents/runtime/store/steps.py; or an external
    agent's request, api/external.py); returns its id. The caller writes
    `approval.requested`."""
    now = timezone.now()
    approval = Approval.objects.create(
        tool_call=tool_call,
        session_id=tool_call.session_id,
        turn_id=tool_call.turn_id,
        policy=policy,
        policy_detail=detail[:300],
        tool_name=tool_call.name,
        arguments=tool_call.input,
        arguments_hash=arguments_hash(tool_call.input),
        reasoning=reasoning,
        requested_by_id=requested_by_id,
        expires_at=now + timedelta(seconds=settings.AGENTDESK_APPROVAL_TTL_S),
        preview=preview or None,
    )
    return approval.id


def approval_terms(approval: Approval, edited: dict[str, Any] | None = None) -> Terms:
    """Who may decide `approval` and how many must, with `edited` arguments."""
    declared = who_decides.declared_terms(approval.session.profile, approval.tool_name)
    return who_decides.terms_for(
        declared,
        arguments=approval.arguments,
        edited=edited if edited is not None else approval.edited_arguments,
        escalations=approval.escalations,
    )


def round_votes(approval: Approval) -> list[Vote]:
    return list(approval.votes.filter(round=approval.escalations).order_by("created_at", "id"))


# --- One decision ------------------------------------------------------------------


def approval_decide(
    *,
    approval_id: int,
    user: AbstractBaseUser,
    decision: str,
    reason: str = "",
    edited_input: dict[str, Any] | None = None,
    expected_hash: str | None = None,
    expected_version: int | None = None,
    client_address: str | None = None,
) -> Approval:
    """One person's decision: the deciding vote, or one vote of a quorum."""
    _check_request(user, decision, reason)
    session_id = Approval.objects.values_list("session_id", flat=True).get(pk=approval_id)
    with transaction.atomic():
        runtime = store.lock_session(session_id)
        approval = _locked(approval_id)
        specs: list[EventSpec] = []
        _vote(
            runtime,
            approval,
            user,
            decision,
            reason.strip(),
            edited_input,
            expected_hash,
            expected_version,
            client_address,
            specs,
        )
        events.append(runtime, specs)
    return approval


def _check_request(user: AbstractBaseUser, decision: str, reason: str) -> None:
    if not user.has_perm("approvals.decide_approval"):
        raise Forbidden("you may not decide approvals")
    if decision not in Approval.Decision.values:
        raise Invalid(f"unknown decision {decision!r}")
    if decision == Approval.Decision.DENY and not reason.strip():
        raise Invalid("a denial needs a reason: the agent reads it")


def _locked(approval_id: int) -> Approval:
    # The approval row, under the session lock the caller holds: a second
    # lock so the row we check is the row we write.
    return (
        Approval.objects.select_for_update(of=("self",))
        .select_related("tool_call", "session")
        .get(pk=approval_id)
    )


def _vote(
    runtime: SessionRuntime,
    approval: Approval,
    user: AbstractBaseUser,
    decision: str,
    reason: str,
    edited: dict[str, Any] | None,
    expected_hash: str | None,
    expected_version: int | None,
    client_address: str | None,
    specs: list[EventSpec],
    *,
    bulk: bool = False,
) -> None:
    _check_decidable(approval, user, expected_hash, expected_version)
    if decision == Approval.Decision.APPROVE:
        edited = _checked_edit(approval, edited)
    else:
        edited = None
    terms = approval_terms(approval, edited)
    _check_policy(approval, user, terms, edited, decision)
    if bulk and (terms.quorum or approval.escalations):
        raise Forbidden(_not_bulk(approval, terms))
    earlier = round_votes(approval)
    mine = next((v for v in earlier if v.voter_id == user.pk), None)
    if mine is not None:
        raise Conflict(
            f"you already voted {mine.decision} on this approval at"
            f" {timezone.localtime(mine.created_at):%H:%M:%S}; a quorum needs"
            f" {terms.votes} different people",
            current=approval.status,
        )
    who = user.get_username()
    if edited is not None:  # the arguments everyone votes on from now on
        approval.edited_arguments = edited
    vote = Vote.objects.create(
        approval=approval,
        round=approval.escalations,
        voter=user,
        actor=who,
        role=_roles(user),
        decision=decision,
        reason=reason,
        arguments_hash=arguments_hash(approval.effective_arguments),
        edited_arguments=edited,
    )
    tally = _tally([*earlier, vote], approval, terms)
    if tally == "open":
        data = {"voter": who, "decision": decision, "votes": terms.votes}
        data["approvals"] = _approving(earlier + [vote], approval)
        approval_touch(
            approval,
            specs=specs,
            kind="approval.voted",
            actor=who,
            data=data,
            fields=("edited_arguments",),
        )
        return
    _finish(runtime, approval, user, tally, reason, client_address, specs)


def _check_decidable(
    approval: Approval,
    user: AbstractBaseUser,
    expected_hash: str | None,
    expected_version: int | None,
) -> None:
    if approval.status != A.PENDING:
        raise Conflict(f"this approval was already {approval.status}", current=approval.status)
    if approval.expires_at <= timezone.now():
        raise Conflict("this approval has expired", current="expired")
    if expected_hash is not None and expected_hash != approval.arguments_hash:
        raise Conflict("the arguments changed since you looked", current=approval.status)
    if expected_version is not None and expected_version != approval.version:
        raise Conflict(
            f"this card changed since you loaded it ({approval_last_change(approval)});"
            " look at it again and decide on what it shows now",
            current=approval.status,
        )
    if approval.requested_by_id is not None and approval.requested_by_id == user.pk:
        raise Forbidden("you started this turn, so someone else must approve its side effects")


def approval_last_change(approval: Approval) -> str:
    """What changed a card last, in words (for a refused stale decision)."""
    from agents.models import Event

    # Event data is json, not jsonb (agents.Event): matched here, among the
    # session's latest changes of approvals.
    recent = (
        Event.objects.filter(session_id=approval.session_id, kind__in=APPROVAL_CHANGE_KINDS)
        .order_by("-seq")
        .values_list("kind", "actor", "data")[:50]
    )
    last = next((r for r in recent if (r[2] or {}).get("approval_id") == approval.id), None)
    if last is None:
        return "its state moved on"
    kind, actor, data = last
    if kind == "approval.voted":
        return f"{actor} voted {data.get('decision')}"
    if kind == "approval.assigned":
        to = data.get("to") or "nobody"
        return f"{actor} assigned it to {to}" if data.get("to") != actor else f"{actor} took it"
    if kind == "approval.escalated":
        return "it was escalated to admins"
    return f"{actor}: {kind}"


APPROVAL_CHANGE_KINDS = ["approval.voted", "approval.assigned", "approval.escalated"]


def _checked_edit(approval: Approval, edited: dict[str, Any] | None) -> dict[str, Any] | None:
    """The edit held to the tool's rules, or None when it changes nothing."""
    if edited is None or arguments_hash(edited) == approval.effective_hash:
        return None
    tool = get_profile(approval.session.profile).tool(approval.tool_name)
    if tool is None and approval.tool_call.parent_id is not None:
        return edited  # an inner step: the tool that asked holds it to its own rules
    if tool is not None:  # the approver's edit is held to the model's rules
        edited = tool.normalize(edited)
    problem = tool.validate(edited) if tool else "the tool is no longer offered"
    if problem:
        raise Invalid(f"edited arguments do not fit the tool: {problem}")
    return edited


def _check_policy(
    approval: Approval,
    user: AbstractBaseUser,
    terms: Terms,
    edited: dict[str, Any] | None,
    decision: str,
) -> None:
    """Separation of duties and the role ladder, as the profile declares them."""
    level = who_decides.role_level(user)
    asked = who_decides.amount_of(approval.arguments)
    wanted = who_decides.amount_of(edited) if edited is not None else None
    if wanted is not None and (asked is None or wanted > asked) and level < ROLE_LEVEL[ADMIN]:
        raise Forbidden(
            f"this edit raises the amount from {dollars(asked)} to {dollars(wanted)}, more than"
            " the agent asked for; only an admin may approve that"
        )
    if level < ROLE_LEVEL[terms.role]:
        why = f" ({terms.why_role})" if terms.why_role else ""
        raise Forbidden(
            f"only an {terms.role} may decide this {approval.tool_name} approval{why}; you are"
            f" an {'approver' if level == ROLE_LEVEL['approver'] else 'unprivileged user'}"
        )


def _approving(votes: list[Vote], approval: Approval) -> int:
    current = approval.effective_hash
    return sum(1 for v in votes if v.decision == "approve" and v.arguments_hash == current)


def _tally(votes: list[Vote], approval: Approval, terms: Terms) -> str:
    """'approved', 'denied', or 'open' (more votes needed). Approvals count
    only for the arguments as they are now: an edit after a vote asks the
    earlier voters (and others) again."""
    denies = sum(1 for v in votes if v.decision == "deny")
    if denies and (terms.deny_ends or not terms.quorum or denies >= terms.votes):
        return "denied"
    if _approving(votes, approval) >= terms.votes:
        return "approved"
    return "open"


def _finish(
    runtime: SessionRuntime,
    approval: Approval,
    user: AbstractBaseUser,
    outcome: str,
    reason: str,
    client_address: str | None,
    specs: list[EventSpec],
) -> None:
    """The last required vote: the approval and its call are decided."""
    call = approval.tool_call
    who = user.get_username()
    if outcome == "approved":
        edited = approval.edited_arguments
        toolcall_move(call, C.APPROVED, input=call.input if edited is None else edited)
        to = A.APPROVED
    else:
        note = f"Denied by {who}: {reason}"
        if approval.escalations:
            note = (
                f"Escalated to admins after nobody decided in time, then denied by {who}: {reason}"
            )
        _close_call(call, C.DENIED, note)
        to = A.DENIED
    approval.decided_by, approval.decided_at, approval.reason = user, timezone.now(), reason
    data = {
        "tool_use_id": call.tool_use_id,
        "decision": to,
        "reason": reason,
        "edited": approval.edited_arguments is not None,
        "votes": approval.votes.filter(round=approval.escalations).count(),
    }
    approval_move(
        approval,
        to,
        specs=specs,
        kind="approval.decided",
        actor=who,
        data=data,
        fields=("decided_by", "reason", "edited_arguments"),
    )
    _record_decision(approval, user, client_address)
    observe.approval_decided(approval, runtime.session.key)  # on commit
    _wake_parent(call)
    resume_if_unblocked(runtime, approval.turn_id, specs, who)


def _roles(user: AbstractBaseUser | None) -> str:
    if user is None:
        return ""
    return ",".join(sorted(user.groups.values_list("name", flat=True)))[:100]


def _record_decision(
    approval: Approval, user: AbstractBaseUser | None, client_address: str | None
) -> None:
    """The append-only record of the decision, in its transaction."""
    Decision.objects.create(
        approval_id=approval.id,
        session_id=approval.session_id,
        tool_call_id=approval.tool_call_id,
        tool_name=approval.tool_name,
        decision=approval.status,
        actor_id=user.pk if user else None,
        actor=user.get_username() if user else "system",
        role=_roles(user),
        client_address=client_address,
        arguments_before=approval.arguments,
        arguments_after=approval.edited_arguments,
        reason=approval.reason,
    )


def _close_call(call: ToolCall, status: str, note: str) -> None:
    toolcall_move(call, status, output=note, is_error=True, finished_at=timezone.now())


def _wake_parent(call: ToolCall) -> None:
    """A decided inner step (agents/gate.py): its outer call, parked on it,
    is runnable again (`approved`: a person's answer is in); the runtime runs
    the tool again, which reads the decision in its steps' log."""
    if call.parent_id is None:
        return
    parent = ToolCall.objects.select_for_update().get(pk=call.parent_id)
    if parent.status == C.WAITING:
        toolcall_move(parent, C.APPROVED)


# --- Bulk -------------------------------------------------------------------------------


def _not_bulk(approval: Approval, terms: Terms) -> str:
    what = f"approval {approval.id} ({approval.tool_name} {dollars(terms.amount)})"
    if approval.escalations:
        return f"{what} was escalated; decide it on its own"
    return (
        f"{what} needs {terms.votes} approvers; bulk approval is for cards one approver"
        " may decide alone. Decide it on its own"
    )


@dataclass(frozen=True)
class BulkItem:
    approval_id: int
    version: int


def approvals_bulk_approve(
    *,
    items: list[BulkItem],
    user: AbstractBaseUser,
    client_address: str | None = None,
) -> list[int]:
    """Approve several low-risk cards at once, all or none: each must be
    pending at the version the confirmation showed, of one tool and policy,
    one approver's to decide alone (never a quorum, never an escalated card).
    One transaction: sessions locked in id order (two bulk approvals never
    wait on each other in a cycle), then each card as approval_decide does."""
    _check_request(user, Approval.Decision.APPROVE, "")
    if not items:
        raise Invalid("select at least one approval")
    if len(items) > settings.AGENTDESK_BULK_APPROVE_MAX:
        raise Invalid(f"at most {settings.AGENTDESK_BULK_APPROVE_MAX} approvals at once")
    ids = [i.approval_id for i in items]
    rows = dict(Approval.objects.filter(pk__in=ids).values_list("id", "session_id"))
    if missing := sorted(set(ids) - set(rows)):
        raise Invalid(f"no approval {missing[0]}")
    with transaction.atomic():
        runtimes = {sid: store.lock_session(sid) for sid in sorted(set(rows.values()))}
        approvals = [_locked(i.approval_id) for i in items]
        kinds = {(a.tool_name, a.policy) for a in approvals}
        if len(kinds) > 1:
            listed = ", ".join(sorted(f"{t} ({p})" for t, p in kinds))
            raise Invalid(f"bulk approval needs cards of one tool and policy; these mix {listed}")
        specs: dict[int, list[EventSpec]] = {sid: [] for sid in runtimes}
        for item, approval in zip(items, approvals, strict=True):
            sid = approval.session_id
            _vote(
                runtimes[sid],
                approval,
                user,
                Approval.Decision.APPROVE,
                "",
                None,
                None,
                item.version,
                client_address,
                specs[sid],
                bulk=True,
            )
        for sid, runtime in runtimes.items():
            events.append(runtime, specs[sid])
    return ids


# --- Expiry, escalation, and the check before an approved call runs ----------------------


def approvals_expire(*, now=None) -> int:
    """Expire (or escalate, when the tool's policy says so) pending approvals
    past their time; each as its own transaction under its session's lock,
    so a click racing the expiry is serialized with it and exactly one wins."""
    now = now or timezone.now()
    due = Approval.objects.filter(status=A.PENDING, expires_at__lte=now).values_list(
        "id", "session_id"
    )
    done = 0
    for approval_id, session_id in due[:500]:
        with transaction.atomic():
            runtime = store.lock_session(session_id)
            approval = _locked(approval_id)
            if approval.status != A.PENDING or approval.expires_at > timezone.now():
                continue
            specs: list[EventSpec] = []
            terms = approval_terms(approval)
            if terms.can_escalate and not approval.escalations:
                _escalate(approval, terms, specs)
            else:
                _expire(runtime, approval, terms, specs)
            events.append(runtime, specs)
            done += 1
    return done


def _escalate(approval: Approval, terms: Terms, specs: list[EventSpec]) -> None:
    """Re-open for the admin role with a fresh clock: a new round of votes
    (the first round's do not count), nobody assigned (an approver cannot
    decide it now). The call keeps waiting; the model is told when it ends."""
    now = timezone.now()
    waited = int((now - approval.clock_start).total_seconds())
    approval.escalations += 1
    approval.clock_started_at = now
    approval.expires_at = now + timedelta(seconds=terms.escalation_ttl_s)
    approval.assignee, approval.assigned_at = None, None
    data = {
        "tool_use_id": approval.tool_call.tool_use_id,
        "from_role": terms.role,
        "to_role": ADMIN,
        "waited_s": waited,
        "expires_at": approval.expires_at.isoformat(),
    }
    approval_touch(
        approval,
        specs=specs,
        kind="approval.escalated",
        actor="system",
        data=data,
        fields=("escalations", "clock_started_at", "expires_at", "assignee", "assigned_at"),
    )


def _expire(
    runtime: SessionRuntime, approval: Approval, terms: Terms, specs: list[EventSpec]
) -> None:
    call = approval.tool_call
    note = "The approval for this action expired; it did not run."
    if approval.escalations:
        note = (
            "Nobody decided in time, so the approval was escalated to admins; no admin"
            " decided in time either. It expired and the action did not run."
        )
    elif terms.on_expiry == "escalate":
        note = (
            f"The approval for this action expired (only an {terms.role} could decide it,"
            " and there is no higher role to escalate to); it did not run."
        )
    data = {"tool_use_id": call.tool_use_id, "escalated": bool(approval.escalations)}
    approval_move(
        approval, A.EXPIRED, specs=specs, kind="approval.expired", actor="system", data=data
    )
    _record_decision(approval, None, None)
    observe.approval_decided(approval, runtime.session.key)  # on commit
    _close_call(call, C.DENIED, note)
    _wake_parent(call)
    resume_if_unblocked(runtime, approval.turn_id, specs, "system")


def approval_lapse(*, session_id: int, tool_call_id: int) -> str | None:
    """Called by the engine before an approved call's first attempt: when
    the approval's time ran out before the call could start (a worker was
    down), the approval lapses and the call is denied, with the note the
    model reads; None when the call may run (or has no approval)."""
    approval = Approval.objects.filter(tool_call_id=tool_call_id).only("expires_at").first()
    grace = timedelta(seconds=settings.AGENTDESK_APPROVAL_RUN_GRACE_S)
    if approval is None or approval.expires_at + grace > timezone.now():
        return None  # the usual case, answered without a lock
    with transaction.atomic():
        runtime = store.lock_session(session_id)
        approval = _locked(approval.pk)
        call = approval.tool_call
        if approval.status != A.APPROVED or call.status != C.APPROVED:
            return None
        note = (
            f"The approval was granted, but the action had not started when the approval"
            f" expired at {timezone.localtime(approval.expires_at):%Y-%m-%d %H:%M:%S}"
            " (the worker was down); it did not run. Ask for approval again if it is still due."
        )
        specs: list[EventSpec] = []
        data = {"tool_use_id": call.tool_use_id, "lapsed": True}
        approval_move(
            approval, A.EXPIRED, specs=specs, kind="approval.lapsed", actor="system", data=data
        )
        _record_decision(approval, None, None)
        _close_call(call, C.DENIED, note)
        events.append(runtime, specs)
    return note
