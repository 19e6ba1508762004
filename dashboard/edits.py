"""Checking an approver's edit before it is sent: the tool's schema, and a
diff of what changed. A read; approval_decide() validates again on write."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from approvals.models import Approval
from capabilities.profiles import get_profile
from dashboard.presenters import Change, arguments_diff


@dataclass(frozen=True)
class EditCheck:
    problem: str  # why the tool would refuse it; "" when it fits
    changes: list[Change]


def check_edit(approval: Approval, edited: dict[str, Any]) -> EditCheck:
    try:
        tool = get_profile(approval.session.profile).tool(approval.tool_name)
    except LookupError:
        tool = None
    if tool is not None:
        edited = tool.normalize(edited)
    problem = tool.validate(edited) if tool else "the tool is no longer offered"
    return EditCheck(problem or "", arguments_diff(approval.arguments, edited))
