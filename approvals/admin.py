from __future__ import annotations

from django.contrib import admin

from agents.admin import ReadOnlyAdmin
from approvals.models import Approval, Decision


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    """Decisions are made in the desk (approvals.services), not by editing rows."""

    list_display = ("tool_name", "status", "policy", "decided_by", "created_at", "expires_at")
    list_filter = ("status", "policy", "tool_name")
    search_fields = ("session__key",)


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    """The append-only record of every decision (the database refuses edits)."""

    list_display = ("created_at", "tool_name", "decision", "actor", "role", "client_address")
    list_filter = ("decision", "tool_name")
    search_fields = ("actor",)
