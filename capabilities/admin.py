"""Profiles and tool policies, editable; every save and delete is recorded
(capabilities/services.py) and the change log is read-only."""

from __future__ import annotations

from django.contrib import admin, messages

from capabilities import mcp, mcp_config, services
from capabilities.models import AgentProfile, McpToolList, PolicyChange, SubagentLink, ToolPolicy


class ToolPolicyInline(admin.TabularInline):
    model = ToolPolicy
    extra = 1
    fields = services.POLICY_FIELDS


@admin.register(AgentProfile)
class AgentProfileAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "max_cost_cents_per_turn", "updated_at"]
    inlines = [ToolPolicyInline]
    fields = services.PROFILE_FIELDS

    def save_model(self, request, obj, form, change):
        services.policy_save(user=request.user, obj=obj)

    def delete_model(self, request, obj):
        services.policy_delete(user=request.user, obj=obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            services.policy_delete(user=request.user, obj=obj)

    def save_formset(self, request, form, formset, change):
        instances = formset.save(commit=False)
        for obj in formset.deleted_objects:
            services.policy_delete(user=request.user, obj=obj)
        for obj in instances:
            services.policy_save(user=request.user, obj=obj)
        formset.save_m2m()


@admin.register(ToolPolicy)
class ToolPolicyAdmin(admin.ModelAdmin):
    list_display = ["profile", "capability", "enabled", "kind", "approval", "timeout_s"]
    list_display += ["max_calls_per_turn", "cost_cents"]
    list_filter = ["profile", "approval", "enabled"]
    fields = ["profile", *services.POLICY_FIELDS]

    def save_model(self, request, obj, form, change):
        services.policy_save(user=request.user, obj=obj)

    def delete_model(self, request, obj):
        services.policy_delete(user=request.user, obj=obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            services.policy_delete(user=request.user, obj=obj)


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(PolicyChange)
class PolicyChangeAdmin(ReadOnly):
    list_display = ["at", "actor", "profile", "target", "action", "changes"]
    list_filter = ["profile", "action"]


@admin.register(McpToolList)
class McpToolListAdmin(ReadOnly):
    list_display = ["server", "refreshed_at", "error", "failed_at"]
    actions = ["refresh"]

    @admin.action(description="Ask the server for its tools now")
    def refresh(self, request, queryset):
        configs = mcp_config.servers()
        for row in queryset:
            if row.server in configs:
                row.refreshed_at = row.failed_at = None
                row.save(update_fields=["refreshed_at", "failed_at"])
                tools = mcp.tool_list(configs[row.server])
                self.message_user(request, f"{row.server}: {len(tools)} tools", messages.INFO)


@admin.register(SubagentLink)
class SubagentLinkAdmin(ReadOnly):
    list_display = ["parent_session", "child_session", "status", "created_at", "settled_at"]
    list_filter = ["status"]
