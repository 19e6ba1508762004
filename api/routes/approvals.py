"""Approvals: the pending ones, one of them, and deciding it, exactly as the
desk decides (approvals.services.approval_decide: the argument hash, first
decision wins, 409 otherwise)."""

from typing import Any, Literal

from django.http import Http404, HttpRequest
from ninja import Query, Router

from agents.errors import Invalid
from api import pagination
from api.auth import need
from api.routes.common import READ_ERRORS, WRITE_ERRORS
from api.schemas import ApprovalOut, ApprovalPage, DecisionIn
from api.writes import write
from approvals import selectors as approval_selectors
from approvals import services
from approvals.models import Approval

router = Router(tags=["approvals"])
DECIDE = "approvals.decide_approval"


def _approval(request: HttpRequest, approval_id: int) -> Approval:
    approval = approval_selectors.approval_card(
        user=need(request, DECIDE).user, approval_id=approval_id
    )
    if approval is None:
        raise Http404("no such approval")
    return approval


@router.get("/approvals", response={200: ApprovalPage, **READ_ERRORS})
def approvals_list(
    request: HttpRequest,
    status: Literal[tuple(Approval.Status.values)] = "pending",  # type: ignore[valid-type]
    session_id: int = Query(None, ge=0, le=pagination.MAX_KEY),
    cursor: int = pagination.Cursor,
    limit: int = pagination.Limit,
):
    """Approvals, oldest first: by default the pending ones (the inbox)."""
    rows = (
        approval_selectors.approvals_for_user(user=need(request, DECIDE).user)
        .filter(status=status)
        .select_related("requested_by", "decided_by")
    )
    if session_id is not None:
        rows = rows.filter(session_id=session_id)
    return pagination.page(rows, field="id", cursor=cursor, limit=limit)


@router.get("/approvals/{approval_id}", response={200: ApprovalOut, **READ_ERRORS})
def approval_get(request: HttpRequest, approval_id: int = pagination.Id):
    return _approval(request, approval_id)


@router.post("/approvals/{approval_id}/decision", response={200: ApprovalOut, **WRITE_ERRORS})
@write(DECIDE)
def approval_decide(request: HttpRequest, body: DecisionIn, approval_id: int = pagination.Id):
    """Approve, approve with edited arguments, or deny with a reason.
    `expected_hash` is the `arguments_hash` you were shown: arguments that
    changed since, an approval already decided or expired, answer 409."""
    _approval(request, approval_id)
    edited = getattr(body, "edited_arguments", None)
    if edited is not None and _has_nul(edited):
        raise Invalid("edited arguments may not contain NUL characters")
    services.approval_decide(
        approval_id=approval_id,
        user=request.auth.user,
        decision=body.decision,
        reason=body.reason,
        edited_input=edited,
        expected_hash=body.expected_hash,
    )
    return 200, ApprovalOut.from_orm(_approval(request, approval_id))


def _has_nul(value: Any) -> bool:
    """Postgres stores no NUL character in text or jsonb."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False
