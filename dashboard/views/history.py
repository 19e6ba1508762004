"""A session's history from the event log (admins): the timeline and its export."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from agents import selectors
from agents.models import Session
from approvals import selectors as approval_selectors
from dashboard.inputs import bounded_int
from dashboard.presenters import cost_usd, event_summary
from dashboard.views.common import desk_view

HISTORY = "agents.view_history"
PAGE = 500
KIND_FAMILIES = ("turn", "model", "tool", "approval", "recovery")


def _session(request: HttpRequest, session_id: int) -> Session:
    found = selectors.session_get(user=request.user, session_id=session_id)
    if found is None:
        raise Http404("no such session")
    return found


def _kinds(request: HttpRequest) -> list[str]:
    return [k for k in request.GET.getlist("kind") if k in KIND_FAMILIES]


@require_GET
@never_cache
@desk_view(HISTORY)
def history(request: HttpRequest, session_id: int) -> HttpResponse:
    found = _session(request, session_id)
    kinds = _kinds(request)
    after = bounded_int(request.GET.get("after"), default=0)  # a seq: 0..bigint
    events = list(
        selectors.history_events(session_id=found.id, kinds=kinds, after=after, limit=PAGE + 1)
    )
    more = len(events) > PAGE
    events = events[:PAGE]
    turns = selectors.history_turns(session_id=found.id)
    runtime = found.runtime
    context = {
        "session": found,
        "runtime": runtime,
        "events": events,
        "more_after": events[-1].seq if more else None,
        "turns": turns,
        "kinds": kinds,
        "families": selectors.history_kind_counts(session_id=found.id),
        "approvals": approval_selectors.history_approvals(session_id=found.id),
        "total_cost": cost_usd(runtime.input_tokens, runtime.output_tokens),
    }
    return render(request, "dashboard/history.html", context)


@require_GET
@never_cache
@desk_view(HISTORY)
def history_export(request: HttpRequest, session_id: int) -> StreamingHttpResponse:
    """The whole history as one JSON document, never truncated, streamed from
    an async iterator: under ASGI Django sends it as it is made (a synchronous
    iterator it would first collect in memory), so a session of any length
    costs one chunk of rows at a time."""
    found = _session(request, session_id)
    kinds = _kinds(request)
    head = _head(found, kinds)  # here, synchronously: it reads session.runtime
    response = StreamingHttpResponse(
        _export(found.id, head, kinds), content_type="application/json"
    )
    name = f"session-{found.id}-history.json"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


# Rows fetched per round trip (a server-side cursor), and about how many
# characters are joined into one body message.
ROWS = 2000
CHUNK_CHARS = 64 * 1024


def _dump(value: Any) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)


def _head(session: Session, kinds: list[str]) -> dict[str, Any]:
    runtime = session.runtime
    return {
        "id": session.id,
        "key": session.key,
        "title": session.title,
        "customer": session.customer,
        "status": session.status,
        "context": session.context,
        "created_at": session.created_at,
        "input_tokens": runtime.input_tokens,
        "output_tokens": runtime.output_tokens,
        "cost_usd": cost_usd(runtime.input_tokens, runtime.output_tokens),
        "event_kinds": kinds or "all",
    }


async def _export(session_id: int, head: dict[str, Any], kinds: list[str]) -> AsyncIterator[str]:
    sections = (
        ("turns", selectors.history_turn_rows(session_id=session_id), _turn),
        ("tool_calls", selectors.history_tool_call_rows(session_id=session_id), _call),
        ("approvals", approval_selectors.history_approval_rows(session_id=session_id), _approval),
        (
            "events",
            selectors.history_events(session_id=session_id, kinds=kinds, limit=None),
            _event,
        ),
    )
    parts = ['{"session": ' + _dump(head)]
    size = 0
    for name, rows, shape in sections:
        parts.append(f', "{name}": [')
        first = True
        async for row in rows.aiterator(chunk_size=ROWS):
            piece = ("" if first else ",") + _dump(shape(row))
            first = False
            parts.append(piece)
            size += len(piece)
            if size >= CHUNK_CHARS:
                yield "".join(parts)
                parts, size = [], 0
        parts.append("]")
    parts.append("}\n")
    yield "".join(parts)


def _event(event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "at": event.created_at,
        "kind": event.kind,
        "turn_id": event.turn_id,
        "actor": event.actor,
        "summary": event_summary(event.kind, event.data),
        "data": event.data,
    }


def _turn(turn) -> dict[str, Any]:
    return {
        "id": turn.id,
        "number": turn.number,
        "status": turn.status,
        "trigger": turn.trigger,
        "input": turn.input,
        "started_by": turn.started_by.get_username() if turn.started_by else None,
        "cancel_requested_by": (
            turn.cancel_requested_by.get_username() if turn.cancel_requested_by else None
        ),
        "error": turn.error,
        "steps": turn.steps,
        "input_tokens": turn.input_tokens,
        "output_tokens": turn.output_tokens,
        "cost_usd": cost_usd(turn.input_tokens, turn.output_tokens),
        "created_at": turn.created_at,
        "started_at": turn.started_at,
        "finished_at": turn.finished_at,
    }


def _call(call) -> dict[str, Any]:
    return {
        "id": call.id,
        "turn_id": call.turn_id,
        "tool_use_id": call.tool_use_id,
        "idempotency_key": call.idempotency_key,
        "name": call.name,
        "status": call.status,
        "input": call.input,
        "note": call.output,
        "result_position": call.result_position,
        "attempts": call.attempts,
        "external_id": call.external_id,
        "created_at": call.created_at,
        "started_at": call.started_at,
        "finished_at": call.finished_at,
    }


def _approval(approval) -> dict[str, Any]:
    return {
        "id": approval.id,
        "turn_id": approval.turn_id,
        "tool_name": approval.tool_name,
        "tool_use_id": approval.tool_call.tool_use_id,
        "status": approval.status,
        "policy": approval.policy,
        "policy_detail": approval.policy_detail,
        "arguments": approval.arguments,
        "arguments_hash": approval.arguments_hash,
        "edited_arguments": approval.edited_arguments,
        "reasoning": approval.reasoning,
        "requested_by": approval.requested_by.get_username() if approval.requested_by else None,
        "decided_by": approval.decided_by.get_username() if approval.decided_by else None,
        "reason": approval.reason,
        "created_at": approval.created_at,
        "expires_at": approval.expires_at,
        "decided_at": approval.decided_at,
    }
