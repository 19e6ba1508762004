"""Template filters for the desk (see dashboard/presenters.py)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from agents import budgets
from dashboard import fields, presenters

register = template.Library()


@register.filter
def visible(text: Any) -> SafeString:
    """Escaped, with invisible characters shown as code points."""
    return presenters.visible(text)


@register.filter
def visible_json(value: Any) -> SafeString:
    """Indented JSON, in full, escaped, invisible characters shown."""
    return presenters.visible_json(value)


@register.filter
def output_fields(text: Any) -> SafeString:
    """A tool's JSON output as readable fields; "" when it is not JSON."""
    return fields.output_fields(text)


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON as plain text (autoescaped where it is output)."""
    return presenters.pretty_json(value)


@register.filter
def editable_json(value: Any) -> str:
    """JSON for a text box: invisible characters as JSON escapes."""
    return presenters.editable_json(value)


@register.filter
def summary(event: Any) -> str:
    if isinstance(event, dict):
        return presenters.event_summary(event.get("kind", ""), event.get("data"))
    return presenters.event_summary(event.kind, event.data)


@register.simple_tag
def cost(input_tokens: int, output_tokens: int) -> str:
    value = presenters.cost_usd(input_tokens or 0, output_tokens or 0)
    return "" if value is None else f"${value}"


# Micro-dollars as dollars ("$0.0123"); "" for None (no limit).
register.filter("usd", budgets.usd)


@register.filter
def get(mapping: dict, key: Any) -> Any:
    return mapping.get(key) if mapping else None


_OPEN = {"running", "waiting_for_approval", "waiting_for_subagent", "in_doubt", "paused"}


@register.filter
def can_cancel(session: Any) -> bool:
    """A turn is open: running, parked for approval or in doubt."""
    return session.status in _OPEN


@register.filter
def can_resume(session: Any) -> bool:
    """Nothing open, and the last turn ended badly."""
    return session.status in ("failed", "canceled")


@register.filter
def status_label(value: str) -> str:
    return value.replace("_", " ").capitalize()


@register.filter
def duration(call: Any) -> str:
    """How long a tool call ran, from its timestamps."""
    if not call.started_at or not call.finished_at:
        return ""
    ms = (call.finished_at - call.started_at).total_seconds() * 1000
    return f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


@register.filter
def browser_thumb(value: Any) -> str:
    """A browser step's screenshot, only when it is a base64 image data URL."""
    return presenters.browser_thumb(value)
