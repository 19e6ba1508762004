"""The approval rows the step engine's commits carry, written by this app.

The approvals table belongs to this app; the runtime (agents/runtime/) never
imports it: it writes approval rows only through `ROWS`, which this app
provides at start on the runtime's plug point (hooks.approval_rows; the
protocol is agents/gate.py::ApprovalRows), so the approval rules stay here:

- REQUEST_CTE: the approvals a model reply asks for, inserted as `pending` in
  record_reply's one statement (agents/runtime/store/hot.py), so a call that
  waits for approval and its approval row commit together. It reads the CTE
  `tc` (the reply's new tool calls: id, tool_use_id) and the parameters
  sid, turn, started_by and those of `request_params`.
- request: one approval row for a waiting call (an inner step of a running
  call; an external agent's request, api/external.py), in the caller's
  transaction.
- cancel_pending: the pending approvals of a turn that was canceled.
- lapsed: an approved call whose approval ran out before it could start.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from agents.models import ToolCall
from agents.transitions import IllegalTransition
from approvals.models import Approval, arguments_hash
from approvals.services import approval_lapse
from approvals.transitions import APPROVAL_MOVES

A = Approval.Status

REQUEST_CTE = """, ap AS (
    INSERT INTO approvals_approval (tool_call_id, session_id, turn_id, status, policy,
        policy_detail, tool_name, arguments, arguments_hash, reasoning, requested_by_id, reason,
        created_at, expires_at)
    SELECT tc.id, %(sid)s, %(turn)s, 'pending', a.policy, a.detail, a.tool_name, a.arguments,
        a.arguments_hash, a.reasoning, %(started_by)s, '', now(),
        now() + make_interval(secs => %(approval_ttl)s)
    FROM tc JOIN jsonb_to_recordset(%(approvals)s::jsonb) AS a(tool_use_id text, policy text,
        detail text, tool_name text, arguments jsonb, arguments_hash text, reasoning text)
        ON a.tool_use_id = tc.tool_use_id
)"""


def request_params(requested: list[dict[str, Any]]) -> dict[str, Any]:
    """REQUEST_CTE's own parameters for these requested approvals (each
    bound to the hash of its exact arguments)."""
    rows = [{**a, "arguments_hash": arguments_hash(a["arguments"])} for a in requested]
    dumped = json.dumps(rows, separators=(",", ":"), ensure_ascii=False)
    return {"approvals": dumped, "approval_ttl": settings.AGENTDESK_APPROVAL_TTL_S}


def request(
    *,
    tool_call: ToolCall,
    policy: str,
    detail: str,
    requested_by_id: int | None,
    preview: dict[str, Any] | None = None,
    reasoning: str = "",
) -> int:
    """The approval row for a call the gate said must wait, in the caller's
    transaction (under the session lock); returns its id. The caller writes
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


def cancel_pending(*, turn_id: int, now: datetime) -> int:
    """Cancel a canceled turn's pending approvals (in the caller's
    transaction, under its session lock); returns how many. One statement
    for all of them, by approval_move's table (and its version bump, so an
    open card's decision is refused as changed)."""
    if A.CANCELED not in APPROVAL_MOVES[A.PENDING]:
        raise IllegalTransition("approvals of a canceled turn", A.PENDING, A.CANCELED)
    return Approval.objects.filter(turn_id=turn_id, status=A.PENDING).update(
        status=A.CANCELED, decided_at=now, version=F("version") + 1
    )


class _Rows:
    """What this app provides on hooks.approval_rows (agents/gate.py::ApprovalRows)."""

    request_cte = REQUEST_CTE
    request_params = staticmethod(request_params)
    request = staticmethod(request)
    cancel_pending = staticmethod(cancel_pending)

    lapsed = staticmethod(approval_lapse)


ROWS = _Rows()
