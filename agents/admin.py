"""The Django admin: for admins inspecting state (the desk is where people work).

Read-mostly on purpose: statuses change only through services and the
engine, never by editing a row here. Messages and events (composite primary
keys, which Django's admin does not support) are read in the desk's history.
"""

from __future__ import annotations

from django.contrib import admin

from agents.models import (
    AuditEntry,
    FollowUp,
    Job,
    MemorySnapshot,
    Session,
    SessionArchive,
    ToolCall,
    Turn,
)
from agents.selectors import session_storage


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ("key", "status", "profile", "customer", "updated_at")
    list_filter = ("status", "profile")
    search_fields = ("key", "customer", "title")
    # Storage is a few index scans per session: on the detail page only,
    # never in the list (agents/selectors.py::session_storage).
    readonly_fields = ("storage",)

    @admin.display(description="Storage (rows, bytes as stored)")
    def storage(self, obj: Session) -> str:
        parts = session_storage(session_id=obj.pk)
        total = sum(size for _, _, size in parts)
        listed = ", ".join(f"{part}: {n} rows, {size:,} B" for part, n, size in parts)
        return f"{total:,} bytes ({listed})"


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = ("session", "number", "status", "trigger", "steps", "created_at")
    list_filter = ("status", "trigger")
    search_fields = ("session__key",)
    list_select_related = ("session",)


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ("idempotency_key", "name", "status", "attempts", "started_at", "finished_at")
    list_filter = ("status", "name", "kind")
    search_fields = ("idempotency_key",)


@admin.register(MemorySnapshot)
class MemorySnapshotAdmin(ReadOnlyAdmin):
    list_display = ("session", "upto_position", "created_at")


class OpsAdmin(ReadOnlyAdmin):
    """Rows about sessions' work: whoever may view sessions may view these
    (no separate view_followup / view_job permissions to hand out)."""

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.has_perm("agents.view_session")

    def has_module_permission(self, request) -> bool:
        return request.user.has_perm("agents.view_session")


@admin.register(FollowUp)
class FollowUpAdmin(OpsAdmin):
    list_display = ("key", "session", "status", "due_at", "cancel_on_reply", "fired_at")
    list_filter = ("status",)
    search_fields = ("key", "session__key")
    list_select_related = ("session",)


@admin.register(Job)
class JobAdmin(OpsAdmin):
    list_display = ("id", "kind", "status", "attempts", "max_attempts", "items_done", "created_at")
    list_filter = ("status", "kind")


@admin.register(SessionArchive)
class SessionArchiveAdmin(OpsAdmin):
    list_display = ("session", "upto_seq", "messages", "events", "raw_bytes", "created_at")
    search_fields = ("session__key",)
    list_select_related = ("session",)
    exclude = ("data",)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """Refused attempts and lockouts (agents/audit.py); append-only in the database."""

    list_display = ("created_at", "kind", "actor", "client_address", "method", "path")
    list_filter = ("kind",)
    search_fields = ("actor", "path")
