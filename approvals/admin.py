from __future__ import annotations

from django.contrib import admin

from agents.admin import ReadOnlyAdmin
from approvals.models import Approval, Decision, SessionAssignment, Vote


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    """Decisions are made in the desk (approvals.services), not by editing rows."""

    list_display = ("tool_name", "status", "policy", "assignee", "decided_by", "created_at")
    list_display += ("expires_at", "escalations", "version")
    list_filter = ("status", "policy", "tool_name")
    search_fields = ("session__key",)


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    """The append-only record of every decision (the database refuses edits)."""

    list_display = ("created_at", "tool_name", "decision", "actor", "role", "client_address")
    list_filter = ("decision", "tool_name")
    search_fields = ("actor",)


@admin.register(Vote)
class VoteAdmin(ReadOnlyAdmin):
    """Every vote on an approval, append-only (a quorum's, or the single decider's)."""

    list_display = ("created_at", "approval", "round", "actor", "role", "decision")
    list_filter = ("decision",)
    search_fields = ("actor",)


@admin.register(SessionAssignment)
class SessionAssignmentAdmin(ReadOnlyAdmin):
    """Who took a whole session's approvals (given back in the desk)."""

    list_display = ("session", "user", "assigned_at")
