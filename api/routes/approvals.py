"""Approvals: the pending ones, one of them, and deciding it, exactly as the
desk decides (approvals.services.approval_decide: the argument hash, first
decision wins, 409 otherwise)."""

from typing import Literal

from django.http import Http404, HttpRequest
from ninja import Query, Router

from agents import selectors
from api import pagination
from api.auth import need
from api.routes.common import READ_ERRORS, WRITE_ERRORS
from api.schemas import ApprovalOut, ApprovalPage, DecisionIn
from api.writes import write
from approvals import services
from approvals.models import Approval

router = Router(tags=["approvals"])
DECIDE = "approvals.decide_approval"


def _approval(request: HttpRequest, approval_id: int) -> Approval:
    approval = selectors.approval_card(user=need(request, DECIDE).user, approval_id=approval_id)
    if approval is None:
        raise Http404("no such approval")
    return approval


@router.get("/approvals", response={200: ApprovalPage, **READ_ERRORS})
def approvals_list(
    request: HttpRequest,
    status: Literal[tuple(Approval.Status.values)] = "pending",  # type: ignore[valid-type]
    session_id: int | None = None,
    cursor: str | None = Query(None, max_length=100),
    limit: int = Query(50, ge=1, le=pagination.MAX_LIMIT),
):
    """Approvals, oldest first: by default the pending ones (the inbox)."""
    rows = (
        selectors.approvals_for_user(user=need(request, DECIDE).user)
        .filter(status=status)
        .select_related("requested_by", "decided_by")
    )
    if session_id is not None:
        rows = rows.filter(session_id=session_id)
    return pagination.page(rows, field="id", cursor=cursor, limit=limit)


@router.get("/approvals/{approval_id}", response={200: ApprovalOut, **READ_ERRORS})
def approval_get(request: HttpRequest, approval_id: int):
    return _approval(request, approval_id)


@router.post("/approvals/{approval_id}/decision", response={200: ApprovalOut, **WRITE_ERRORS})
@write(DECIDE)
def approval_decide(request: HttpRequest, approval_id: int, body: DecisionIn):
    """Approve, approve with edited arguments, or deny with a reason.
    `expected_hash` is the `arguments_hash` you were shown: arguments that
    changed since, an approval already decided or expired, answer 409."""
    _approval(request, approval_id)
    services.approval_decide(
        approval_id=approval_id,
        user=request.auth.user,
        decision=body.decision,
        reason=body.reason,
        edited_input=body.edited_arguments if body.decision == "approve" else None,
        expected_hash=body.expected_hash,
    )
    return 200, ApprovalOut.from_orm(_approval(request, approval_id))
