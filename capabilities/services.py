"""Writes on profiles and policies, each with its change-log row.

The admin (capabilities/admin.py) and anything else that edits a profile
or a tool policy goes through these, so no change goes unrecorded.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.forms.models import model_to_dict

from capabilities.models import AgentProfile, PolicyChange, ToolPolicy

PROFILE_FIELDS = ["name", "description", "system_prompt", "max_cost_cents_per_turn"]
POLICY_FIELDS = [
    "capability",
    "enabled",
    "kind",
    "approval",
    "timeout_s",
    "max_calls_per_turn",
    "cost_cents",
    # approvals policy (issue 19)
    "decider_role",
    "admin_above_cents",
    "quorum_above_cents",
    "quorum_votes",
    "quorum_deny_ends",
    "on_expiry",
    "escalation_ttl_s",
]


def snapshot(obj: AgentProfile | ToolPolicy | None) -> dict[str, Any]:
    if obj is None or obj.pk is None:
        return {}
    fields = PROFILE_FIELDS if isinstance(obj, AgentProfile) else POLICY_FIELDS
    return model_to_dict(obj, fields=fields)


def _diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    keys = sorted(set(before) | set(after))
    return {k: [before.get(k), after.get(k)] for k in keys if before.get(k) != after.get(k)}


def policy_change_record(
    *, user, obj: AgentProfile | ToolPolicy, action: str, before: dict[str, Any]
) -> PolicyChange | None:
    """One change-log row; None when nothing changed."""
    after = {} if action == "deleted" else snapshot(obj)
    changes = _diff(before, after)
    if not changes and action == "changed":
        return None
    if isinstance(obj, AgentProfile):
        profile, target = obj.name, "profile"
    else:
        profile, target = obj.profile.name, obj.capability
    return PolicyChange.objects.create(
        user=user if user is not None and user.pk else None,
        actor=user.get_username() if user is not None else "system",
        profile=profile,
        target=target,
        action=action,
        changes=changes,
    )


def policy_save(*, user, obj: AgentProfile | ToolPolicy) -> AgentProfile | ToolPolicy:
    """Create or change a profile or policy, with its change-log row."""
    with transaction.atomic():
        before = snapshot(type(obj).objects.filter(pk=obj.pk).first()) if obj.pk else {}
        action = "changed" if before else "created"
        obj.save()
        policy_change_record(user=user, obj=obj, action=action, before=before)
    return obj


def policy_delete(*, user, obj: AgentProfile | ToolPolicy) -> None:
    with transaction.atomic():
        if isinstance(obj, AgentProfile):
            for policy in obj.policies.all():
                policy_change_record(
                    user=user, obj=policy, action="deleted", before=snapshot(policy)
                )
        policy_change_record(user=user, obj=obj, action="deleted", before=snapshot(obj))
        obj.delete()
