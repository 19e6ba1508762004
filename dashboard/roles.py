"""Desk roles as Django groups and permissions.

- support:  see sessions, post messages, cancel and resume runs
- approver: support's rights, plus deciding approvals
- admin:    everything, plus history, exports and the Django admin
"""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

SUPPORT = "support"
APPROVER = "approver"
ADMIN = "admin"

_PERMS = {
    SUPPORT: ["agents.view_session", "agents.operate_session"],
    APPROVER: ["agents.view_session", "agents.operate_session", "approvals.decide_approval"],
    ADMIN: [
        "agents.view_session",
        "agents.operate_session",
        "approvals.decide_approval",
        "agents.view_history",
    ],
}


def ensure_roles() -> dict[str, Group]:
    """Create the three groups with their permissions (idempotent)."""
    groups = {}
    for name, perms in _PERMS.items():
        group, _ = Group.objects.get_or_create(name=name)
        wanted = []
        for dotted in perms:
            app_label, codename = dotted.split(".")
            wanted.append(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )
        group.permissions.set(wanted)
        groups[name] = group
    return groups
