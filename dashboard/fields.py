"""A tool's output as fields a person reads, not a wall of JSON.

Tools answer the model with JSON text (capabilities/connectors.py). The session
page shows it as nested key/value lists, lists and small tables; the raw
text stays one click away (a <details> the template adds). Every key and
value goes through presenters.visible (escaped, invisible characters shown,
long text folded): the output comes from the outside world and from the
model, so it is hostile until shown otherwise. Big outputs are cut per
level (MAX_ITEMS, MAX_DEPTH) with a note saying how much more the raw JSON
has: nothing is hidden without saying so.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from dashboard.presenters import visible

MAX_ITEMS = 50  # per object or list
MAX_DEPTH = 5
MAX_PARSE_CHARS = 200_000  # past this the raw text alone (parsing is not free)
TABLE_MAX_COLUMNS = 8


def parse_output(text: Any) -> tuple[str, Any] | None:
    """(a leading note, the JSON value) when `text` is JSON worth showing as
    fields (an object, or a list), else None. A note is a first line the
    runtime put before the tool's JSON ("Note: an approver changed ...")."""
    if not isinstance(text, str) or not text or len(text) > MAX_PARSE_CHARS:
        return None
    note, body = "", text
    if not text.lstrip().startswith(("{", "[")) and "\n" in text:
        note, body = text.split("\n", 1)
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict | list) or not value:
        return None
    return note, value


def output_fields(text: Any) -> SafeString:
    """The output as fields (markup, every piece escaped), or "" when it is
    not JSON to show that way."""
    parsed = parse_output(text)
    if parsed is None:
        return SafeString("")
    note, value = parsed
    lead = f'<p class="fields-note">{visible(note)}</p>' if note else ""
    return mark_safe(f'<div class="fields" hx-disable>{lead}{_value(value, 0, "")}</div>')  # noqa: S308


def _value(value: Any, depth: int, key: str) -> str:
    if isinstance(value, dict):
        return _object(value, depth) if value else '<span class="muted">(empty)</span>'
    if isinstance(value, list):
        return _list(value, depth) if value else '<span class="muted">(none)</span>'
    return _scalar(value, key)


def _scalar(value: Any, key: str) -> str:
    if value is None:
        return '<span class="muted">none</span>'
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        text = f"{value:,}" if isinstance(value, int) else str(value)
        if isinstance(value, int) and key.endswith("_cents"):
            return f'<span class="money">${value / 100:,.2f}</span> <span class="muted">({text} cents)</span>'
        return f'<span class="num">{escape(text)}</span>'
    return f'<span class="text">{visible(value)}</span>'


def _more(total: int, shown: int) -> str:
    left = total - shown
    return f'<p class="muted fields-more">… {left:,} more in the raw JSON</p>' if left > 0 else ""


def _deep(value: Any) -> str:
    return '<span class="muted">(nested deeper: see the raw JSON)</span>'


def _object(value: dict, depth: int) -> str:
    if depth >= MAX_DEPTH:
        return _deep(value)
    rows = []
    for key, item in list(value.items())[:MAX_ITEMS]:
        rows.append(f"<dt>{visible(key)}</dt><dd>{_value(item, depth + 1, str(key))}</dd>")
    return f'<dl class="field-dl">{"".join(rows)}</dl>{_more(len(value), MAX_ITEMS)}'


def _list(value: list, depth: int) -> str:
    if depth >= MAX_DEPTH:
        return _deep(value)
    shown = value[:MAX_ITEMS]
    columns = _columns(shown)
    if columns:
        head = "".join(f'<th scope="col">{visible(c)}</th>' for c in columns)
        body = "".join(
            "<tr>"
            + "".join(
                f"<td>{_value(row[c], depth + 1, c) if c in row else ''}</td>" for c in columns
            )
            + "</tr>"
            for row in shown
        )
        table = f'<table class="field-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        return table + _more(len(value), MAX_ITEMS)
    items = "".join(f"<li>{_value(item, depth + 1, '')}</li>" for item in shown)
    return f'<ul class="field-list">{items}</ul>{_more(len(value), MAX_ITEMS)}'


def _columns(rows: list) -> list[str] | None:
    """A list of flat objects with a few keys reads best as a table."""
    if len(rows) < 2 or not all(isinstance(r, dict) and r for r in rows):
        return None
    columns: list[str] = []
    for row in rows:
        for key, item in row.items():
            if isinstance(item, dict | list):
                return None
            if key not in columns:
                columns.append(key)
    return columns if len(columns) <= TABLE_MAX_COLUMNS else None
