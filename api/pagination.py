"""Cursor pagination: an opaque cursor that names the last row of a page.

A cursor is stable under inserts (unlike an offset, a new session does not
shift the next page) and costs one index range scan however deep the page.
"""

from __future__ import annotations

import base64
from typing import Any

from django.db.models import QuerySet

from agents.errors import Invalid

MAX_LIMIT = 200


def encode(value: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{value}".encode()).decode().rstrip("=")


def decode(cursor: str | None) -> int | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        version, value = raw.split(":", 1)
        if version != "v1":
            raise ValueError(version)
        return int(value)
    except (ValueError, UnicodeDecodeError):
        raise Invalid("not a cursor this API gave out") from None


def page(
    rows: QuerySet, *, field: str, cursor: str | None, limit: int, descending: bool = False
) -> dict[str, Any]:
    """{"items", "next_cursor"} of rows ordered by the unique integer `field`."""
    after = decode(cursor)
    if after is not None:
        rows = rows.filter(**{f"{field}__{'lt' if descending else 'gt'}": after})
    rows = rows.order_by(f"-{field}" if descending else field)
    items = list(rows[: limit + 1])
    more = len(items) > limit
    items = items[:limit]
    next_cursor = encode(getattr(items[-1], field)) if more else None
    return {"items": items, "next_cursor": next_cursor}
