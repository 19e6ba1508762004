"""Approval policy as a capability profile declares it, for tests: the
support profile taken over as rows (every tool it declares in code, default
policy), its issue_refund policy set."""

from __future__ import annotations

from capabilities.models import AgentProfile, ToolPolicy
from capabilities.registry import code_profile
from capabilities.services import policy_save


def refund_policy(**fields) -> ToolPolicy:
    profile = AgentProfile.objects.filter(name="support_triage").first() or policy_save(
        user=None, obj=AgentProfile(name="support_triage")
    )
    for tool in code_profile("support_triage").tools:
        if not profile.policies.filter(capability=tool.name).exists():
            policy_save(user=None, obj=ToolPolicy(profile=profile, capability=tool.name))
    policy = profile.policies.get(capability="issue_refund")
    for name, value in fields.items():
        setattr(policy, name, value)
    policy_save(user=None, obj=policy)
    return policy


def approver(django_user_model, username: str, role: str = "approver"):
    """Another persona in a desk role (password `<username>-pw`)."""
    from dashboard.roles import ensure_roles

    user = django_user_model.objects.create_user(username=username, password=f"{username}-pw")
    user.groups.add(ensure_roles()[role])
    return django_user_model.objects.get(pk=user.pk)
