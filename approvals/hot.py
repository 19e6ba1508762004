"""The approval rows the step engine writes inside its own commits.

The approvals table belongs to this app; the runtime (agents/runtime/) writes
it only through what is here, so the approval rules stay in one app:

- REQUEST_CTE: the approvals a model reply asks for, inserted as `pending` in
  record_reply's one statement (agents/runtime/store/hot.py), so a call that
  waits for approval and its approval row commit together. It reads the CTE
  `tc` (the reply's new tool calls: id, tool_use_id) and the parameters
  sid, turn, started_by and those of `request_params`.
- cancel_pending: the pending approvals of a turn that was canceled.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import F

from agents.transitions import IllegalTransition
from approvals.models import Approval
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


def request_params(approvals: list[dict[str, Any]]) -> dict[str, Any]:
    """REQUEST_CTE's own parameters for these requested approvals."""
    dumped = json.dumps(approvals, separators=(",", ":"), ensure_ascii=False)
    return {"approvals": dumped, "approval_ttl": settings.AGENTDESK_APPROVAL_TTL_S}


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
