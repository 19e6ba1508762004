from __future__ import annotations

from django.contrib import admin

from agents.admin import ReadOnlyAdmin
from approvals.models import Approval


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    """Decisions are made in the desk (approvals.services), not by editing rows."""

    list_display = ("tool_name", "status", "policy", "decided_by", "created_at", "expires_at")
    list_filter = ("status", "policy", "tool_name")
    search_fields = ("session__key",)
