"""Every input has a bound and a clear refusal, before it reaches SQL or a parser.

What used to become a 500 (and Django's debug page under DEBUG):
- a number past bigint in the query string or the path (`?page=999...9`,
  `/sessions/99999999999999999999/`): psycopg refuses it mid-query;
- a NUL character (`?q=%00`): PostgreSQL text cannot hold one;
- 100,000 nested `[` in edited arguments: json.loads recurses until
  RecursionError; NaN/Infinity in them, which jsonb refuses on save.

Ids in URLs go through IdConverter (1 to 18 digits, so always a bigint);
numbers in forms and query strings through bounded_int(); NUL anywhere in a
form or query is refused by RefuseNulMiddleware with a 400 page that says
so; JSON typed by a person goes through parse_json_object(), which checks
size and nesting depth by a linear scan before parsing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

MAX_BIGINT = 2**63 - 1
MAX_JSON_CHARS = 100_000  # an edited tool input; the biggest real one is a few KiB
MAX_JSON_DEPTH = 32  # agents/tools/arguments.MAX_DEPTH: what a tool accepts anyway


class IdConverter:
    """`<id:name>`: a positive database id. 1-18 digits always fits a bigint,
    so a longer number is a 404 from the resolver, never a query."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


def bounded_int(raw: Any, *, default: int, lo: int = 0, hi: int = MAX_BIGINT) -> int:
    """`raw` as an int clamped to [lo, hi]; `default` when it is not a number.
    Long strings are not handed to int() (its cost grows with the length)."""
    if raw is None:
        return default
    text = str(raw).strip()
    if not text or len(text) > 40:
        return hi if text.isdigit() else default
    try:
        value = int(text)
    except ValueError:
        return default
    return min(max(value, lo), hi)


def strict_int(raw: Any, *, lo: int = 1, hi: int = MAX_BIGINT) -> int | None:
    """`raw` as an int within [lo, hi], or None (for ids and positions, where
    clamping would pick something the person did not mean)."""
    text = str(raw if raw is not None else "").strip()
    if not text or len(text) > 20:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if lo <= value <= hi else None


def json_too_deep(raw: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether arrays/objects in `raw` nest deeper than `limit`: a scan that
    skips strings, linear in the length, with no recursion."""
    depth, in_string, escaped = 0, False, False
    for char in raw:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json_object(raw: str) -> tuple[dict[str, Any] | None, str]:
    """(object, "") or (None, why not), with size and depth checked first."""
    if len(raw) > MAX_JSON_CHARS:
        return (
            None,
            f"The edited arguments are too long ({len(raw):,} characters; at most {MAX_JSON_CHARS:,}).",
        )
    if json_too_deep(raw):
        return None, f"The edited arguments nest more than {MAX_JSON_DEPTH} levels deep."
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except ValueError as exc:
        return None, f"The edited arguments are not valid JSON: {exc}"
    if not isinstance(value, dict):
        return None, "The edited arguments must be a JSON object."
    return value, ""


def _has_nul(data) -> bool:
    return any("\x00" in key or any("\x00" in v for v in data.getlist(key)) for key in data)


class RefuseNulMiddleware:
    """A NUL in the path, a query parameter or a form field is refused with a
    400 page that says why, before any view (PostgreSQL text cannot hold it,
    and no person types one). The machine API (/api/) refuses it itself, as
    a 422 problem document its clients can read (api/)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            return self.get_response(request)
        if (
            "\x00" in request.path
            or _has_nul(request.GET)
            or (
                request.method == "POST"
                and request.content_type
                in ("application/x-www-form-urlencoded", "multipart/form-data")
                and _has_nul(request.POST)
            )
        ):
            message = "The request contained a NUL character (%00), which no field accepts."
            return render(request, "400.html", {"message": message}, status=400)
        return self.get_response(request)
