"""The session page's sub-agent tree: the parent this session works for and
the children it delegated to (capabilities.SubagentLink)."""

from __future__ import annotations

from django import template

register = template.Library()


@register.inclusion_tag("dashboard/partials/_subagents.html")
def subagent_tree(session) -> dict:
    from capabilities.models import SubagentLink

    parent = (
        SubagentLink.objects.filter(child_session=session).select_related("parent_session").first()
    )
    children = (
        SubagentLink.objects.filter(parent_session=session)
        .select_related("child_session", "child_turn")
        .order_by("id")
    )
    return {"parent": parent, "children": list(children)}
