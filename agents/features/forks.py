"""Forking a session from a recorded step into a new session (admins only).

For investigation or a retry: the fork gets a new key (`ticket:4812/fork-1`)
and a copy of the transcript up to the chosen position, cut back to the last
complete step (no tool_use without its tool_result, so the Messages API takes
it as it is), with the tool calls of that range, so the desk shows them as
the original did. The original is only read: no row of it is written.

Tools still act on the same outside object: ToolContext.ticket_id reads the
ticket id before the `/`, so a fork's reply goes to the same ticket.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents import events
from agents.errors import Forbidden, Invalid
from agents.events import EventSpec
from agents.models import Message, Session, SessionRuntime, ToolCall, Turn

MAX_FORK_KEY_TRIES = 20


def complete_positions(rows: list[tuple[int, list[dict[str, Any]]]]) -> list[int]:
    """Each prefix length n such that rows[:n] leaves no tool_use unanswered.

    `rows` are (position, content) in position order; the answer is the
    values the desk offers (fork "after position n - 1")."""
    open_uses: set[str] = set()
    ends = []
    for n, (_, content) in enumerate(rows, start=1):
        for block in content:
            if block.get("type") == "tool_use":
                open_uses.add(block.get("id"))
            elif block.get("type") == "tool_result":
                open_uses.discard(block.get("tool_use_id"))
        if not open_uses:
            ends.append(n)
    return ends


def session_fork(*, session_id: int, upto: int, user: AbstractBaseUser) -> Session:
    """Fork the session's transcript rows with position < `upto` (cut back to
    a complete step) into a new session; returns the new session."""
    if not user.has_perm("agents.fork_session"):
        raise Forbidden("only an admin may fork a session")
    source = Session.objects.get(pk=session_id)
    # A consistent read of the original (one snapshot), without locking it:
    # forking must never stall the live session.
    with transaction.atomic():
        rows = list(
            Message.objects.filter(session_id=session_id, position__lt=upto).order_by("position")
        )
        calls = list(ToolCall.objects.filter(session_id=session_id).order_by("id"))
    cut = max((n for n in complete_positions([(r.position, r.content) for r in rows])), default=0)
    if cut == 0:
        raise Invalid("nothing complete to fork before that position")
    rows = rows[:cut]
    for n, row in enumerate(rows):
        if row.position != n:  # pruned by retention: the fork would not be faithful
            raise Invalid("this session's early transcript was archived; it cannot be forked")
    for attempt in range(1, MAX_FORK_KEY_TRIES + 1):
        key = f"{source.key.split('/fork-')[0]}/fork-{_next_fork_number(source) + attempt - 1}"
        try:
            return _create_fork(source, key, rows, calls, user)
        except IntegrityError:  # another admin took that key meanwhile
            continue
    raise Invalid("could not find a free fork key")


def _next_fork_number(source: Session) -> int:
    root = source.key.split("/fork-")[0]
    return Session.objects.filter(key__startswith=f"{root}/fork-").count() + 1


def _create_fork(
    source: Session, key: str, rows: list[Message], calls: list[ToolCall], user
) -> Session:
    now = timezone.now()
    who = user.get_username()
    note = f"Forked from {source.key} before position {len(rows)} by {who}."
    uses = {b.get("id") for r in rows for b in r.content if b.get("type") == "tool_use"}
    with transaction.atomic():
        fork = Session.objects.create(
            key=key,
            profile=source.profile,
            message_policy=source.message_policy,
            title=source.title,
            customer=source.customer,
            context={**source.context, "forked_from": source.key, "forked_upto": len(rows)},
            max_turn_steps=source.max_turn_steps,
            max_turn_tokens=source.max_turn_tokens,
        )
        runtime = SessionRuntime.objects.create(session=fork, transcript_len=len(rows))
        # The copied rows hang off one finished turn that says where they came from.
        turn = Turn.objects.create(
            session=fork,
            number=1,
            status=Turn.Status.SUCCEEDED,
            trigger=Turn.Trigger.STAFF,
            input=note,
            started_by=user,
            started_at=now,
            finished_at=now,
        )
        ToolCall.objects.bulk_create(
            _copy_call(c, fork, turn) for c in calls if c.tool_use_id in uses
        )
        data = {"from": source.key, "from_id": source.id, "upto": len(rows), "by": who}
        specs = [EventSpec("session.forked", data, turn.id, who)]
        specs.extend(  # transcript rows are events (agents.models.Event)
            EventSpec(
                "transcript.copied",
                {"from_position": r.position},
                turn.id,
                who,
                position=r.position,
                role=r.role,
                content=r.content,
            )
            for r in rows
        )
        events.append(runtime, specs)
    return fork


def _copy_call(call: ToolCall, fork: Session, turn: Turn) -> ToolCall:
    return ToolCall(
        session_id=fork.id,
        turn_id=turn.id,
        tool_use_id=call.tool_use_id,
        idempotency_key=f"{fork.key}:{call.tool_use_id}",
        name=call.name,
        kind=call.kind,
        status=call.status,
        input=call.input,
        output=call.output,
        result_position=call.result_position,
        is_error=call.is_error,
        external_id=call.external_id,
        attempts=call.attempts,
        message_position=call.message_position,
        created_at=call.created_at,
        started_at=call.started_at,
        finished_at=call.finished_at,
    )
