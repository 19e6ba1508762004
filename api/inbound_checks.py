"""What a signed inbound delivery must be before anything acts on it.

A valid signature says who sent a body, not that the body is sane: a NUL
(PostgreSQL text cannot hold one), a ticket id of 300 characters (the
session key has 200), `NaN` (not JSON, and not storable in jsonb), nesting
deep enough to exhaust the parser's recursion. Each gave a 500 and the
ticket was lost after the sender's retries; now `parsed` refuses them with
the reason, the view answers 400, and the refusal is recorded where an
admin sees it (the audit log: `inbound.refused`), so a delivery the desk
refused is not silently lost.

One function, no I/O but the audit row, so the inbound view (whoever
rewrites it) calls it first.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agents.errors import Invalid

MAX_DEPTH = 32
MAX_TEXT = 100_000  # api.schemas.MessageIn.text
MAX_TICKET_ID = 100  # "ticket:<id>" fits the session key's 200 with room


def _refuse_constant(name: str) -> Any:
    raise Invalid(f"{name} is not a JSON number")


def parsed(body: bytes) -> dict[str, Any]:
    """The delivery's JSON object, or Invalid with the reason."""
    try:
        payload = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:
        raise Invalid(f"nested more than {MAX_DEPTH} levels deep") from None
    except (ValueError, UnicodeDecodeError):
        raise Invalid("the body is not JSON") from None
    if not isinstance(payload, dict):
        raise Invalid("the body must be a JSON object")
    if problem := _problem(payload, "", 0):
        raise Invalid(problem)
    ticket = payload.get("ticket")
    if not isinstance(ticket, dict) or "id" not in ticket:
        raise Invalid("the delivery has no ticket with an id")
    ticket_id = ticket["id"]
    if isinstance(ticket_id, bool) or not isinstance(ticket_id, int | str):
        raise Invalid("ticket.id must be a string or an integer")
    if not str(ticket_id).strip() or len(str(ticket_id)) > MAX_TICKET_ID:
        raise Invalid(f"ticket.id must be 1 to {MAX_TICKET_ID} characters")
    return payload


def _problem(value: Any, where: str, depth: int) -> str:
    if depth > MAX_DEPTH:
        return f"{where or 'body'}: nested more than {MAX_DEPTH} levels deep"
    if isinstance(value, str):
        if "\x00" in value:
            return f"{where or 'body'}: contains a NUL character"
        if len(value) > MAX_TEXT:
            return f"{where}: {len(value):,} characters; at most {MAX_TEXT:,}"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{where}: not a finite number"
    elif isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key or len(key) > 200:
                return f"{where or 'body'}: a key with a NUL or over 200 characters"
            if problem := _problem(item, f"{where}.{key}" if where else key, depth + 1):
                return problem
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if problem := _problem(item, f"{where}[{index}]", depth + 1):
                return problem
    return ""


def record_refusal(*, body: bytes, reason: str, request: Any = None) -> None:
    """An audit row an admin sees: what was refused, why, and the event id
    when one can be read (the helpdesk can re-send that event)."""
    from agents.audit import audit_record

    event_id = ""
    try:
        head = json.loads(body[:100_000])
        event_id = str(head.get("id", ""))[:100].replace("\x00", "")
    except (ValueError, RecursionError, AttributeError, UnicodeDecodeError):
        pass
    audit_record(
        kind="inbound.refused",
        request=request,
        actor="helpdesk",
        detail={"event_id": event_id, "reason": reason[:500], "bytes": len(body)},
    )
