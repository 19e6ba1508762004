"""What a slot that lost its claim learned, left for whoever decides now.

A slot loses its claim while it is alive when its liveness lock goes with a
cut connection (runtime/ownership.py) and another slot takes the session
over. What it then learns about the call it was running is not a record (the
fence moved on: it changes no state of its own), but it is evidence:

- `note_late_outcome`: how the call ended after all, kept where the person
  deciding the in-doubt call sees it;
- `note_never_sent`: that every try was refused before it left, which is
  certain, so the call is run rather than put to a person.

Both take the session lock without the fence. When the database is away for
longer than a step's retries (store/retry.py), the word that a call never
left waits in this process for the watchdog (`never_sent_pending`).
"""

from __future__ import annotations

import logging
import threading

from django.db import InterfaceError, OperationalError, connection, transaction

from agents import events
from agents.events import EventSpec
from agents.fields import json_column
from agents.models import Event, ToolCall
from agents.runtime.state import CallState, Claimed
from agents.runtime.store.lock import lock_session
from agents.runtime.store.resume import resume_if_unblocked
from agents.runtime.store.retry import retrying
from agents.transitions import toolcall_move

log = logging.getLogger(__name__)
C = ToolCall.Status


# Starts what a slot that lost its claim mid-call learned (note_late_outcome).
LATE_OUTCOME = "Late outcome, from the slot that was running this call when it lost its claim"


def note_late_outcome(
    claimed: Claimed, call: CallState, *, status: str, content: str, external_id: str = ""
) -> None:
    """A slot lost its claim (its liveness lock went with a cut connection;
    it was alive) while `call` ran, and then learned how the call ended: not
    a record (the fence moved on, so this changes no state), but evidence,
    kept where the person deciding the call sees it. The new owner takes a
    not-idempotent call found running for in doubt; its note, on the call's
    output, gets this appended (mark_in_doubt reads it if it comes first)."""
    text = f"{LATE_OUTCOME} (fence {claimed.fence}): {status}"
    if external_id:
        text += f", external id {external_id}"
    text += f". What it returned: {content[:1500]}"
    with transaction.atomic():
        runtime = lock_session(claimed.session_id)  # no fence: evidence, not a record
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        if row.status == C.RUNNING and not row.output:
            row.output = text  # the new owner's in-doubt note will carry it
        elif row.status == C.IN_DOUBT:
            row.output = f"{row.output}\n\n{text}"
        else:
            text = ""  # already settled (re-sent with its key, or resolved): the log says it
        if text:
            row.save(update_fields=["output"])
        data = {"tool_use_id": call.tool_use_id, "name": call.name, "status": status}
        data.update(fence=claimed.fence, external_id=external_id, output=content[:1500])
        events.append(
            runtime, [EventSpec("tool.late_outcome", data, claimed.turn_id, claimed.owner)]
        )


# Starts what a slot that lost its claim left on a call it knew never left (note_never_sent).
NEVER_SENT = "Never sent, said the slot that was running this call when it lost its claim"


def note_never_sent(claimed: Claimed, call: CallState, *, status: str, reason: str) -> str:
    """A slot lost its claim while `call` ran (its liveness lock went with a
    cut connection; the slot was alive), and every try of the call had been
    refused before it left the process (NotSent: its provider, or the link,
    was down). That is certain, and it is evidence for the session's new
    owner, which takes a not-idempotent call it finds `running` for one that
    may have been sent, and asks a person. Under the session lock, unless a
    later attempt or a person settled the call first (then only the event):

    - still `running` (not judged yet): back to `status` (pending, or
      approved), as retry_call_later would have put it; the new owner runs
      it (mark_in_doubt finds it not running);
    - `in_doubt`, its turn parked on it: back to be run again (approved, as
      a person's "retry" does), and the turn resumes unless something else
      holds it;
    - `in_doubt` and closed with its ended turn: canceled (it never ran).

    A person resolving the same call is serialized by the same lock: who
    comes first wins, the other finds the new state (toolcall_resolve then
    answers 409). No fence: evidence, not a record. Tried again on a lost
    connection; a second run finds its own event and writes nothing; a
    database away for longer leaves it to the watchdog (never_sent_later).
    Returns what became of the call (the event's `then`)."""
    try:
        return retrying(
            claimed,
            "note of a call never sent",
            lambda: _note_never_sent(claimed, call, status, reason),
        )
    except (OperationalError, InterfaceError):
        never_sent_later(claimed, call, status=status, reason=reason)
        raise


def _note_never_sent(claimed: Claimed, call: CallState, status: str, reason: str) -> str:
    with transaction.atomic():
        runtime = lock_session(claimed.session_id)
        if _noted_never_sent(claimed, call):  # our first commit landed, its answer was lost
            return "noted"
        row = ToolCall.objects.select_for_update().get(pk=call.id)
        then, to = _never_sent_then(row, call, status)
        text = (
            f"{NEVER_SENT} (fence {claimed.fence}, attempt {call.attempts}): every try was "
            f"refused before it left the process, so it did not happen. {reason[:1500]}"
        )
        if to:
            toolcall_move(row, to, output=text)
        data = {"tool_use_id": call.tool_use_id, "name": call.name, "attempt": call.attempts}
        data.update(fence=claimed.fence, then=then, status=row.status, reason=reason[:1500])
        specs = [EventSpec("tool.never_sent", data, row.turn_id, claimed.owner)]
        if then == "resumed":
            resume_if_unblocked(runtime, row.turn_id, specs, claimed.owner)
        events.append(runtime, specs)
    return then


def _never_sent_then(row: ToolCall, call: CallState, status: str) -> tuple[str, str]:
    """(what becomes of a call that certainly never left, its new status or "")."""
    if row.attempts != call.attempts:
        return "settled", ""  # run again since (this was an earlier attempt)
    if row.status == C.RUNNING:
        return "to_run", status
    if row.status == C.IN_DOUBT and row.result_position is None:
        return "resumed", C.APPROVED
    if row.status == C.IN_DOUBT:
        return "closed", C.CANCELED
    return "settled", ""  # a person resolved it first


def _noted_never_sent(claimed: Claimed, call: CallState) -> bool:
    noted = Event.objects.filter(
        session_id=claimed.session_id, turn_id=claimed.turn_id, kind="tool.never_sent"
    ).values_list("data", flat=True)
    return any(
        data.get("tool_use_id") == call.tool_use_id and data.get("fence") == claimed.fence
        for data in map(json_column, noted)
    )


def never_sent_later(claimed: Claimed, call: CallState, *, status: str, reason: str) -> None:
    """The database stayed away past a step's retries while `call`, which
    never left, was to go back and wait: its step is given up (abandoned),
    and the word that it never left is noted once the database is back, by
    the watchdog, whoever holds the session by then."""
    with _unsent_lock:
        _unsent.append((claimed, call, status, reason))


def never_sent_pending() -> None:
    """Note what never_sent_later kept (the watchdog, every sweep)."""
    with _unsent_lock:
        pending, _unsent[:] = list(_unsent), []
    failed = []
    for claimed, call, status, reason in pending:
        try:
            then = _note_never_sent(claimed, call, status, reason)
            log.info("session %s: %s never sent, noted (%s)", claimed.session_id, call.name, then)
        except Exception:  # still away: the next sweep tries again
            failed.append((claimed, call, status, reason))
    if failed:
        connection.close()  # maybe broken: the sweep after this borrows another
        with _unsent_lock:
            _unsent.extend(failed)


_unsent: list[tuple[Claimed, CallState, str, str]] = []
_unsent_lock = threading.Lock()
