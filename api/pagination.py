"""Cursor (keyset) pagination: the cursor is the ordering key of the last
row of a page (an id, or a turn's number), as Stripe's `starting_after`.

A cursor is stable under inserts (unlike an offset, a new session does not
shift the next page) and costs one index range scan however deep the page.
Any integer is a valid cursor (it means "after this key"), so a client can
never be refused for one.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from ninja import Path, Query

MAX_LIMIT = 200
MAX_KEY = 2**63 - 1  # bigint

Cursor = Query(None, ge=0, le=MAX_KEY, description="`next_cursor` of the previous page")
Limit = Query(50, ge=1, le=MAX_LIMIT)
Id = Path(..., ge=0, le=MAX_KEY)  # a path id that a bigint column can hold


def page(
    rows: QuerySet, *, field: str, cursor: int | None, limit: int, descending: bool = False
) -> dict[str, Any]:
    """{"items", "next_cursor"} of rows ordered by the unique integer `field`."""
    after = cursor
    if after is not None:
        rows = rows.filter(**{f"{field}__{'lt' if descending else 'gt'}": after})
    rows = rows.order_by(f"-{field}" if descending else field)
    items = list(rows[: limit + 1])
    more = len(items) > limit
    items = items[:limit]
    next_cursor = getattr(items[-1], field) if more else None
    return {"items": items, "next_cursor": next_cursor}
