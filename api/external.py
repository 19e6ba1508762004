"""Approvals asked for by agents that are not ours (the MCP endpoint).

An external request is recorded with the shapes the desk already knows, so
the inbox, the card, the decision (approvals.services.approval_decide:
hash check, first decision wins, separation of duties), expiry, webhooks and
notifications all work unchanged: a session for the caller's domain key, a
Turn that stands for the caller's request, and a ToolCall of kind
`external` waiting for approval.

Who may attach a request to which session: anyone to a session of its
own (a new key, or one only outside requests made); an admin to any
session; anyone else only to a session whose profile is listed in
AGENTDESK_EXTERNAL_APPROVAL_PROFILES. Otherwise a support token could put
an outside request on a customer's session, where an approver could take it
for that session's agent asking.

Our engine must never run an external call: the Turn is recorded as
already finished (succeeded), so a decision's resume_if_unblocked, which
only wakes a turn that waits, leaves it alone; the caller learns the
decision by polling the approval (api/mcp.py).
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agents import events, services
from agents.errors import Forbidden, Invalid
from agents.events import EventSpec
from agents.models import ToolCall, Turn
from agents.runtime import store
from approvals.models import Approval, arguments_hash

EXTERNAL = "external"  # ToolCall.kind of a call made elsewhere
POLICY = "mcp_request"
ANY_SESSION = "capabilities.change_agentprofile"  # admins: they set what profiles allow


def _may_attach(user: AbstractBaseUser, key: str) -> bool:
    from agents.models import Session

    session = Session.objects.filter(key=key).first()
    if session is None or user.has_perm(ANY_SESSION):
        return True
    if session.profile in settings.AGENTDESK_EXTERNAL_APPROVAL_PROFILES:
        return True
    # A session only outside requests made (every turn of it is one).
    return not Turn.objects.filter(session=session).exclude(tool_calls__kind=EXTERNAL).exists()


def external_approval_request(
    *,
    user: AbstractBaseUser,
    tool_name: str,
    arguments: dict[str, Any],
    reason: str,
    session_key: str = "",
) -> Approval:
    tool_name, reason = tool_name.strip(), reason.strip()
    if not tool_name or len(tool_name) > 128:
        raise Invalid("tool_name must be 1 to 128 characters")
    if not reason or len(reason) > 4000:
        raise Invalid("a reason (at most 4000 characters) tells the approver why")
    if not isinstance(arguments, dict):
        raise Invalid("arguments must be an object")
    key = (session_key.strip() or f"mcp:{user.get_username()}")[:200]
    if not _may_attach(user, key):
        raise Forbidden(
            "this session's profile takes no outside approval requests "
            "(AGENTDESK_EXTERNAL_APPROVAL_PROFILES); leave session_key empty for a session of your own"
        )
    session = services.session_get_or_create(key=key, title=f"External agent: {key}"[:300])
    now = timezone.now()
    use_id = f"ext_{secrets.token_hex(8)}"
    with transaction.atomic():
        runtime = store.lock_session(session.id)
        number = Turn.objects.filter(session_id=session.id).count() + 1
        turn = Turn.objects.create(
            session_id=session.id,
            number=number,
            status=Turn.Status.SUCCEEDED,  # nothing of ours runs it: see the module's doc
            trigger=Turn.Trigger.API,
            input=f"{user.get_username()} asks, through MCP, to run {tool_name}: {reason}",
            started_by=user,
            started_at=now,
            finished_at=now,
        )
        call = ToolCall.objects.create(
            session_id=session.id,
            turn=turn,
            tool_use_id=use_id,
            idempotency_key=f"{key}:{use_id}",
            name=tool_name,
            kind=EXTERNAL,
            status=ToolCall.Status.WAITING,
            input=arguments,
            message_position=-1,  # no transcript row: the call was made elsewhere
            created_at=now,
        )
        approval = Approval.objects.create(
            tool_call=call,
            session_id=session.id,
            turn=turn,
            policy=POLICY,
            policy_detail=f"asked for by {user.get_username()} through MCP"[:300],
            tool_name=tool_name,
            arguments=arguments,
            arguments_hash=arguments_hash(arguments),
            reasoning=reason,
            requested_by=user,  # who asked may not approve it
            expires_at=now + timedelta(seconds=settings.AGENTDESK_APPROVAL_TTL_S),
        )
        data = {"approval_id": approval.id, "tool_use_id": use_id, "policy": POLICY}
        events.append(
            runtime,
            [
                EventSpec(
                    "approval.requested", {**data, "external": True}, turn.id, user.get_username()
                )
            ],
        )
    return approval


def approval_outcome(*, approval_id: int, user: AbstractBaseUser) -> dict[str, Any]:
    """What the caller is told: the status and, once decided, by whom, why,
    and the arguments it may run with (edited ones, if the approver edited)."""
    approval = (
        Approval.objects.select_related("decided_by", "tool_call")
        .filter(pk=approval_id, requested_by=user, tool_call__kind=EXTERNAL)
        .first()
    )
    if approval is None:
        raise Invalid("no such approval among the ones you asked for")
    return {
        "approval_id": approval.id,
        "status": approval.status,
        "decided_by": approval.decided_by.get_username() if approval.decided_by_id else None,
        "reason": approval.reason,
        "arguments": approval.effective_arguments,
        "expires_at": approval.expires_at.isoformat(),
    }
