"""Approval policy as a capability profile declares it, for tests: the
support profile taken over as rows, its issue_refund policy set."""

from __future__ import annotations

from capabilities.models import ToolPolicy
from capabilities.services import profile_from_code


def refund_policy(**fields) -> ToolPolicy:
    profile = profile_from_code(user=None, name="support_triage")
    policy = profile.policies.get(capability="issue_refund")
    for name, value in fields.items():
        setattr(policy, name, value)
    policy.save()
    return policy


def approver(django_user_model, username: str, role: str = "approver"):
    """Another persona in a desk role (password `<username>-pw`)."""
    from dashboard.roles import ensure_roles

    user = django_user_model.objects.create_user(username=username, password=f"{username}-pw")
    user.groups.add(ensure_roles()[role])
    return django_user_model.objects.get(pk=user.pk)
