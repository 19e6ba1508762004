"""The Django admin: for admins inspecting state (the desk is where people work).

Read-mostly on purpose: statuses change only through services and the
engine, never by editing a row here. Messages and events (composite primary
keys, which Django's admin does not support) are read in the desk's history.
"""

from __future__ import annotations

from django.contrib import admin

from agents.models import MemorySnapshot, Session, ToolCall, Turn


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
