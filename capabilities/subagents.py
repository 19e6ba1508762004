"""Sub-agents: a tool call that hands a sub-task to a child session.

`subagent.<profile>` (wire name `subagent__<profile>`) takes a task. Running it:

1. creates the child session `<parent key>/<label>-<tool_use_id tail>` with
   the given profile and posts the task as its message, in one transaction
   with a SubagentLink row unique per parent call: a worker that dies and
   reissues the call (the tool is idempotent by key) finds the link and
   creates nothing twice;
2. raises Waiting; the engine then calls `park_on_child` (its call_waiting
   hook, agents/runtime/hooks.py, registered in capabilities/apps.py), which
   moves the call to `waiting_for_subagent` and parks the parent's turn as an
   approval does, but in its own status (`waiting_for_subagent`, turn and
   session alike): no person is needed. The child is durable on its own: its own turns, events,
   recovery and desk page.

When the child's turn ends (succeeded, failed, canceled), `settle` writes the
child's final answer (or why there is none) on the parent's call, moves it to
succeeded / failed and resumes the parent (agents/runtime/store/resume.py
resume_if_unblocked), whose worker then records it as the tool_result. The
child's worker calls `settle` right after the turn ends; the beat task
`capabilities.settle_subagents` (`sweep`) does it for anything missed
(a worker died in between, a child canceled from the desk).

Cancelling the parent cancels its children (`cancel_children`, called by
turn_cancel, by the parent's worker when its turn ends, and by the sweep).

Lock order: the parent's session lock, then the child's (never the reverse).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents import events, services
from agents.errors import Conflict
from agents.events import EventSpec
from agents.models import Message, ToolCall, Turn
from agents.runtime import hooks, store
from agents.runtime.state import CallState, Claimed
from agents.tools.base import Kind, Tool, ToolContext, ToolError, ToolOutput, Waiting
from agents.transitions import toolcall_move
from capabilities.models import SubagentLink

log = logging.getLogger(__name__)
C = ToolCall.Status
PROVIDER = "subagent"

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "minLength": 1, "maxLength": 20_000},
        "label": {"type": "string", "pattern": "^[a-z0-9-]{1,30}$"},
    },
    "required": ["task"],
    "additionalProperties": False,
}


def delegate_tool(profile: str) -> Tool:
    return Tool(
        name=f"{PROVIDER}__{profile}",
        description=(
            f"Delegate a self-contained sub-task to a {profile} sub-agent. Say everything it "
            "needs in `task`; its final answer comes back as this tool's result."
        ),
        input_schema=INPUT_SCHEMA,
        kind=Kind.IDEMPOTENT_BY_KEY,  # creating the child is deduplicated by the parent call
        run=functools.partial(_delegate, profile),
        timeout_s=10,
    )


def _delegate(profile: str, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
    tool_use_id = ctx.idempotency_key.removeprefix(f"{ctx.session_key}:")
    call = ToolCall.objects.select_related("session").get(
        session__key=ctx.session_key, tool_use_id=tool_use_id
    )
    link = SubagentLink.objects.select_related("child_session").filter(parent_call=call).first()
    if link is None:
        link = _start_child(call, profile, arguments)
    raise Waiting(f"delegated to {link.child_session.key}")


def _start_child(call: ToolCall, profile: str, arguments: dict[str, Any]):

    parent = call.session
    if parent.key.count("/") >= settings.AGENTDESK_SUBAGENT_MAX_DEPTH:
        raise ToolError(f"sub-agents nest at most {settings.AGENTDESK_SUBAGENT_MAX_DEPTH} deep")
    try:
        hooks.profiles(profile)  # an unknown profile: LookupError
    except LookupError as exc:
        raise ToolError(str(exc)) from exc
    label = arguments.get("label") or profile.replace("_", "-")[:30]
    key = f"{parent.key}/{label}-{call.tool_use_id[-12:]}"
    if len(key) > 200:
        raise ToolError("the parent's key is too long for a child key")
    try:
        with transaction.atomic():
            child = services.session_get_or_create(
                key=key,
                profile=profile,
                title=f"Sub-task of {parent.key}: {arguments['task']}"[:300],
                customer=parent.customer,
                context=parent.context,
            )
            turn = services.message_post(key=key, text=arguments["task"])
            return SubagentLink.objects.create(
                parent_session=parent,
                parent_call=call,
                parent_turn_id=call.turn_id,
                child_session=child,
                child_turn=turn,
            )
    except IntegrityError:  # made meanwhile for the same call: the same child
        return SubagentLink.objects.select_related("child_session").get(parent_call=call)


# --- The parent parks, and is handed the answer -------------------------------------------


def park_on_child(claimed: Claimed, call: CallState) -> bool:
    """Park the parent's turn on its child; False when the child already
    answered (the call then carries the answer, ready to be recorded)."""
    with transaction.atomic():
        runtime = store.lock_session(claimed.session_id, claimed.fence)
        link = (
            SubagentLink.objects.select_for_update()
            .select_related("child_session", "child_turn")
            .get(parent_call_id=call.id)
        )
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        data = {"tool_use_id": call.tool_use_id, "name": call.name}
        data.update(child=link.child_session.key, child_session_id=link.child_session_id)
        if link.child_turn.is_terminal:  # it was quick: no need to park
            status, output = _answer(link)
            _settle_call(row, status, output)
            _close(link, SubagentLink.Status.SETTLED)
            data["status"] = status
            events.append(
                runtime, [EventSpec("subagent.finished", data, claimed.turn_id, claimed.owner)]
            )
            call.status, call.output = status, output
            return False
        toolcall_move(row, C.WAITING_SUBAGENT, external_id=link.child_session.key)
        spec = EventSpec("subagent.started", data, claimed.turn_id, claimed.owner)
        events.append(runtime, [spec])
        call.status = C.WAITING_SUBAGENT
        # In the same transaction: a child that ends now finds the parent parked.
        return store.park(claimed)


def settle(link_id: int) -> bool:
    """Hand a finished child's answer to its parent's call; True when done."""
    link = SubagentLink.objects.filter(pk=link_id).first()
    if link is None:
        return False
    with transaction.atomic():
        runtime = store.lock_session(link.parent_session_id)  # the parent's lock first
        link = (
            SubagentLink.objects.select_for_update()
            .select_related("child_session", "child_turn")
            .get(pk=link_id)
        )
        if link.status != SubagentLink.Status.RUNNING or not link.child_turn.is_terminal:
            return False
        row = ToolCall.objects.select_for_update().get(pk=link.parent_call_id)
        if row.status == C.RUNNING:
            return False  # the parent's worker has not parked yet; park_on_child will see it
        if row.status != C.WAITING_SUBAGENT:  # the parent stopped waiting (canceled)
            _close(link, SubagentLink.Status.CANCELED)
            return False
        status, output = _answer(link)
        _settle_call(row, status, output)
        _close(link, SubagentLink.Status.SETTLED)
        actor = f"subagent:{link.child_session.key}"[:150]
        data = {"tool_use_id": row.tool_use_id, "name": row.name, "status": status}
        data.update(child=link.child_session.key, child_session_id=link.child_session_id)
        specs = [EventSpec("subagent.finished", data, row.turn_id, actor)]
        store.resume_if_unblocked(runtime, row.turn_id, specs, actor)
        events.append(runtime, specs)
        return True


def _settle_call(row: ToolCall, status: str, output: str) -> None:
    toolcall_move(
        row, status, output=output, is_error=status == C.FAILED, finished_at=timezone.now()
    )


def _close(link, status: str) -> None:
    link.status, link.settled_at = status, timezone.now()
    link.save(update_fields=["status", "settled_at"])


def _answer(link) -> tuple[str, str]:
    """The child's final answer as the parent's tool result."""
    turn, key = link.child_turn, link.child_session.key
    if turn.status == Turn.Status.SUCCEEDED:
        last = (
            Message.objects.filter(session_id=turn.session_id, turn_id=turn.id, role="assistant")
            .order_by("-position")
            .first()
        )
        blocks = last.content if last is not None else []
        text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text").strip()
        return C.SUCCEEDED, text or f"The sub-agent {key} finished without an answer."
    if turn.status == Turn.Status.FAILED:
        return C.FAILED, f"Error: the sub-agent {key} failed: {turn.error}"
    return C.FAILED, f"Error: the sub-agent {key} was canceled."


# --- Endings and cancels ------------------------------------------------------------------


def turn_ended(claimed: Claimed) -> None:
    """After a session's turn ended in its worker: answer the parent, cancel
    children no longer wanted. Failures are left to the sweep."""
    try:
        if "/" in claimed.key:  # only children have a / in their key (a cheap test first)
            for link_id in SubagentLink.objects.filter(
                child_session_id=claimed.session_id, status=SubagentLink.Status.RUNNING
            ).values_list("id", flat=True):
                settle(link_id)
        if any(c.name.startswith(f"{PROVIDER}__") for c in claimed.calls):
            cancel_children(claimed.session_id)
    except Exception:
        log.exception("session %s: settling sub-agents failed; the sweep will", claimed.session_id)


def cancel_children(parent_session_id: int, user=None) -> int:
    """Cancel the children whose parent call no longer waits for them."""
    canceled = 0
    links = SubagentLink.objects.filter(
        parent_session_id=parent_session_id, status=SubagentLink.Status.RUNNING
    ).select_related("parent_call")
    for link in links:
        if link.parent_call.status in (C.WAITING_SUBAGENT, C.RUNNING):
            continue  # still wanted
        canceled += _cancel_child(link, user)
    return canceled


def _cancel_child(link, user) -> int:
    try:
        services.turn_cancel(session_id=link.child_session_id, user=user)
        done = 1
    except Conflict:
        done = 0  # nothing open any more
    SubagentLink.objects.filter(pk=link.pk, status=SubagentLink.Status.RUNNING).update(
        status=SubagentLink.Status.CANCELED, settled_at=timezone.now()
    )
    return done


def sweep(limit: int = 500) -> dict[str, int]:
    """The durable net under the immediate hooks (a periodic task)."""
    settled = canceled = 0
    links = SubagentLink.objects.filter(status=SubagentLink.Status.RUNNING).select_related(
        "child_turn", "parent_call"
    )[:limit]
    for link in links:
        if link.parent_call.status not in (C.WAITING_SUBAGENT, C.RUNNING):
            canceled += _cancel_child(link, None)
        elif link.child_turn.is_terminal:
            settled += settle(link.id)
    return {"settled": settled, "canceled": canceled}
