"""Desk states built straight in the database, the shape the runtime leaves
them in (a turn parked on an approval, a call in doubt, a finished turn).

Events go through agents.events.append under the session lock, as the
runtime writes them, so they are published on commit like real ones.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents import events
from agents.events import EventSpec
from agents.models import Session, SessionRuntime, ToolCall, Turn
from agents.runtime import store
from approvals.models import Approval, arguments_hash

_numbers = itertools.count(9000)

REFUND = {"order_id": "ORD-1002", "amount_cents": 18900, "reason": "Arrived broken"}


def session(
    *,
    key: str | None = None,
    title: str = "Broken grinder",
    customer: str = "alice.martin@example.com",
    status: str = Session.Status.IDLE,
    context: dict[str, Any] | None = None,
) -> Session:
    n = next(_numbers)
    key = key or f"ticket:{n}"
    context = (
        context if context is not None else {"id": n, "subject": title, "order_id": "ORD-1002"}
    )
    found = Session.objects.create(
        key=key, title=title, customer=customer, status=status, context=context
    )
    SessionRuntime.objects.create(session=found)
    return found


def append(session_id: int, *specs: EventSpec) -> None:
    with transaction.atomic():
        runtime = store.lock_session(session_id)
        events.append(runtime, list(specs))


def _started(made: Turn, position: int) -> EventSpec:
    """The turn.started event, which carries the turn's input as its transcript row."""
    content = [{"type": "text", "text": made.input}]
    spec = EventSpec("turn.started", {"number": made.number}, made.id, "w1")
    return replace(spec, position=position, role="user", content=content)


def turn(
    owner: Session,
    *,
    text: str = "The grinder from order ORD-1002 arrived broken. Please refund $189.",
    status: str = Turn.Status.SUCCEEDED,
    trigger: str = Turn.Trigger.CUSTOMER,
    started_by=None,
    reply: str = "I looked at the order and replied to the customer.",
) -> Turn:
    """A finished turn: the input, one text reply, its events."""
    number = Turn.objects.filter(session=owner).count() + 1
    now = timezone.now()
    made = Turn.objects.create(
        session=owner,
        number=number,
        status=status,
        trigger=trigger,
        input=text,
        started_by=started_by,
        steps=1,
        input_tokens=1200,
        output_tokens=80,
        started_at=now,
        finished_at=now if status in Turn.TERMINAL else None,
    )
    runtime = SessionRuntime.objects.get(pk=owner.pk)
    base = runtime.transcript_len
    SessionRuntime.objects.filter(pk=owner.pk).update(
        transcript_len=base + 2, input_tokens=1200, output_tokens=80
    )
    usage = {"input": 1200, "output": 80}
    append(
        owner.id,
        EventSpec(
            "turn.accepted", {"number": number, "trigger": trigger, "text": text}, made.id, "system"
        ),
        _started(made, base),
        EventSpec(
            "model.replied",
            {"stop_reason": "end_turn", "usage": usage, "ms": 900, "tool_calls": []},
            made.id,
            "w1",
            position=base + 1,
            role="assistant",
            content=[{"type": "text", "text": reply}],
        ),
        EventSpec(f"turn.{status}", {"number": number}, made.id, "w1"),
    )
    return made


def parked_call(
    *,
    owner: Session | None = None,
    name: str = "issue_refund",
    arguments: dict[str, Any] | None = None,
    call_status: str = ToolCall.Status.WAITING,
    text: str = "The grinder from order ORD-1002 arrived broken. Please refund $189.",
    reasoning: str = "The order was found and the item arrived broken; refunding it.",
    started_by=None,
) -> ToolCall:
    """A turn parked on one tool call: waiting for approval, or in doubt."""
    owner = owner or session()
    arguments = dict(REFUND if arguments is None else arguments)
    now = timezone.now()
    number = Turn.objects.filter(session=owner).count() + 1
    made = Turn.objects.create(
        session=owner,
        number=number,
        status=Turn.Status.WAITING,
        trigger=Turn.Trigger.CUSTOMER,
        input=text,
        started_by=started_by,
        steps=1,
        input_tokens=900,
        output_tokens=60,
        started_at=now,
    )
    runtime = SessionRuntime.objects.get(pk=owner.pk)
    base = runtime.transcript_len
    use_id = f"toolu_{next(_numbers)}"
    in_doubt = call_status == ToolCall.Status.IN_DOUBT
    call = ToolCall.objects.create(
        session=owner,
        turn=made,
        tool_use_id=use_id,
        idempotency_key=f"{owner.key}:{use_id}",
        name=name,
        kind="idempotent_by_key" if name == "issue_refund" else "not_idempotent",
        status=call_status,
        input=arguments,
        attempts=1 if in_doubt else 0,
        output="The worker died mid-call; it may or may not have happened." if in_doubt else "",
        message_position=base + 1,
        created_at=now,
        started_at=now if in_doubt else None,
    )
    SessionRuntime.objects.filter(pk=owner.pk).update(
        transcript_len=base + 2, current_turn_id=made.id
    )
    Session.objects.filter(pk=owner.pk).update(
        status=Session.Status.IN_DOUBT if in_doubt else Session.Status.WAITING
    )
    specs = [
        EventSpec(
            "turn.accepted",
            {"number": number, "trigger": "customer_message", "text": text},
            made.id,
            "system",
        ),
        _started(made, base),
        EventSpec(
            "model.replied",
            {
                "stop_reason": "tool_use",
                "usage": {"input": 900, "output": 60},
                "ms": 700,
                "tool_calls": [{"name": name}],
            },
            made.id,
            "w1",
            position=base + 1,
            role="assistant",
            content=[
                {"type": "text", "text": reasoning},
                {"type": "tool_use", "id": use_id, "name": name, "input": arguments},
            ],
        ),
    ]
    if in_doubt:
        specs.append(
            EventSpec(
                "tool.in_doubt",
                {"tool_use_id": use_id, "name": name, "note": call.output},
                made.id,
                "w1",
            )
        )
    else:
        Approval.objects.create(
            tool_call=call,
            session=owner,
            turn=made,
            policy="refund_over_limit",
            policy_detail="Refund of $189.00 is above the $100.00 limit",
            tool_name=name,
            arguments=arguments,
            arguments_hash=arguments_hash(arguments),
            reasoning=reasoning,
            requested_by=started_by,
            expires_at=now + timedelta(hours=24),
        )
        specs.append(
            EventSpec(
                "approval.requested",
                {"tool_use_id": use_id, "policy": "refund_over_limit"},
                made.id,
                "w1",
            )
        )
    specs.append(EventSpec("turn.waiting", {"tool_use_ids": [use_id]}, made.id, "w1"))
    append(owner.id, *specs)
    return call


def pending_approval(**kwargs: Any) -> Approval:
    return parked_call(**kwargs).approval


def finished_call(
    *,
    owner: Session | None = None,
    name: str = "lookup_order",
    arguments: dict[str, Any] | None = None,
    output: str = '{"id": "ORD-1002", "status": "shipped", "total_cents": 18900}',
    ms: int = 240,
    is_error: bool = False,
) -> ToolCall:
    """A finished turn with one tool call that ran: model reply asking for
    the call, the call's result row, the final reply, each an event."""
    owner = owner or session()
    arguments = {"order_id": "ORD-1002"} if arguments is None else arguments
    now = timezone.now()
    number = Turn.objects.filter(session=owner).count() + 1
    made = Turn.objects.create(
        session=owner,
        number=number,
        status=Turn.Status.SUCCEEDED,
        trigger=Turn.Trigger.CUSTOMER,
        input="Where is order ORD-1002?",
        steps=2,
        input_tokens=2000,
        output_tokens=120,
        started_at=now,
        finished_at=now,
    )
    base = SessionRuntime.objects.get(pk=owner.pk).transcript_len
    use_id = f"toolu_{next(_numbers)}"
    status = ToolCall.Status.FAILED if is_error else ToolCall.Status.SUCCEEDED
    call = ToolCall.objects.create(
        session=owner,
        turn=made,
        tool_use_id=use_id,
        idempotency_key=f"{owner.key}:{use_id}",
        name=name,
        kind="read_only",
        status=status,
        input=arguments,
        attempts=1,
        is_error=is_error,
        message_position=base + 1,
        result_position=base + 2,
        created_at=now,
        started_at=now,
        finished_at=now + timedelta(milliseconds=ms),
    )
    SessionRuntime.objects.filter(pk=owner.pk).update(transcript_len=base + 4)
    usage = {"input": 1000, "output": 60}
    result = {"type": "tool_result", "tool_use_id": use_id, "content": output}
    if is_error:
        result["is_error"] = True
    append(
        owner.id,
        EventSpec("turn.accepted", {"number": number, "trigger": "customer_message"}, made.id),
        _started(made, base),
        EventSpec(
            "model.replied",
            {"stop_reason": "tool_use", "usage": usage, "ms": 800, "tool_calls": [name]},
            made.id,
            "w1",
            position=base + 1,
            role="assistant",
            content=[
                {"type": "text", "text": "Looking it up."},
                {"type": "tool_use", "id": use_id, "name": name, "input": arguments},
            ],
        ),
        EventSpec(
            "tool.finished",
            {"tool_use_id": use_id, "name": name, "status": status, "ms": ms},
            made.id,
            "w1",
            position=base + 2,
            role="user",
            content=[result],
        ),
        EventSpec(
            "model.replied",
            {"stop_reason": "end_turn", "usage": usage, "ms": 600, "tool_calls": []},
            made.id,
            "w1",
            position=base + 3,
            role="assistant",
            content=[{"type": "text", "text": "It has shipped."}],
        ),
        EventSpec("turn.succeeded", {"number": number}, made.id, "w1"),
    )
    return call
