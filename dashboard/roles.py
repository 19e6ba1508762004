"""Desk roles as Django groups and permissions.

- support:  see sessions, post messages, cancel and resume runs
- approver: support's rights, plus deciding approvals
- admin:    everything, plus history, exports and the Django admin, where it
            edits agent profiles and tool policies (every permission of the
            capabilities app), outbound webhooks (of the integrations app),
            and lifts login lockouts (every permission of django-axes' app)
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
        "agents.fork_session",
        "agents.raise_budget",
    ],
}
# Every permission of these apps (so a model added to them is covered too).
_APPS = {ADMIN: ["capabilities", "integrations", "axes"]}


def assign_role(user, role: str) -> None:
    """Put a user in one desk role. Admins also get `is_staff`: the Django
    admin is part of their role, and Django lets only staff in."""
    groups = ensure_roles()
    user.groups.add(groups[role])
    if role == ADMIN and not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])


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
        wanted += Permission.objects.filter(content_type__app_label__in=_APPS.get(name, []))
        group.permissions.set(wanted)
        groups[name] = group
    return groups
