"""The commits of inner steps: a running call's own durable execution log
(a Code Mode host call, a browser action), and parking a call on one.

An inner step is a ToolCall row with `parent` = the outer call and `step` =
n; its tool_use_id is `<outer tool_use_id>:<n>`, so its idempotency key is
`<session key>:<tool_use_id>:<n>` and the session's unique index finds it.
Like every control transition here, each write is one short transaction
with the session's runtime row locked and the fence checked (store.lock):
a worker whose claim was superseded gets LostClaim and writes nothing, so a
step recorded `running` is recorded by the owner that may send it. These run
on the tool's own thread (tooling), which borrows a connection for them and
gives it back when the call ends.

A program's host calls take the fast path, `advance`: host call n's result
(with the program's snapshot) and host call n+1 begun `running`, in ONE
statement (record step k and begin step k+1 in one commit, DESIGN.md),
shaped as the engine's hot statements are (store/hot.py): data-modifying
CTEs on the autocommit connection, the first of which moves the session's
runtime row only `WHERE fence = <our token>`.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents import events
from agents.events import EventSpec
from agents.gate import MAX_PREVIEW_BYTES, InnerStep, NeedsApproval
from agents.models import Session, SessionRuntime, ToolCall, Turn
from agents.runtime import hooks
from agents.runtime.state import CallState, Claimed
from agents.runtime.store import hot
from agents.runtime.store.lock import LostClaim, lock_session
from agents.tools.base import StepBegun, StepEnded
from agents.transitions import (
    IllegalTransition,
    session_move,
    sql_moves,
    toolcall_move,
    turn_move,
)

C = ToolCall.Status
T = Turn.Status
ENDED = (C.SUCCEEDED, C.FAILED)

# What ADVANCE_SQL moves (read from the SQL by tests/agents/test_status_sql.py).
MOVES = sql_moves(tool=[(C.RUNNING, C.SUCCEEDED), (C.RUNNING, C.FAILED)])


# The events of an inner step carry what the desk shows of it (a viewer, an
# SSE client): the arguments it began with, and the start of its result.
EVENT_OUTPUT_CHARS = 2_000


def inner_use_id(tool_use_id: str, n: int) -> str:
    return f"{tool_use_id}:{n}"


def began_data(
    call: CallState, n: int, name: str, arguments: dict[str, Any], attempt: int
) -> dict[str, Any]:
    data = {"tool_use_id": call.tool_use_id, "step": n, "name": name, "attempt": attempt}
    data["input"] = arguments
    return data


def ended_data(
    call: CallState, n: int, name: str, status: str, ms: int, output: str
) -> dict[str, Any]:
    data = {"tool_use_id": call.tool_use_id, "step": n, "name": name, "status": status}
    data.update(ms=ms, output=output[:EVENT_OUTPUT_CHARS])
    if len(output) > EVENT_OUTPUT_CHARS:
        data["output_chars"] = len(output)  # cut: the step's row has it whole
    return data


def inner_log(session_id: int, call_id: int) -> list[InnerStep]:
    rows = ToolCall.objects.filter(session_id=session_id, parent_id=call_id).order_by("step")
    return [_inner(row) for row in rows]


def _inner(row: ToolCall) -> InnerStep:
    decided_no = row.status in (C.DENIED, C.CANCELED)
    return InnerStep(
        n=row.step,
        name=row.name,
        status=row.status,
        input=row.input,
        output=row.output,
        is_error=row.is_error,
        reason=row.output if decided_no else "",
        snapshot=bytes(row.snapshot) if row.snapshot is not None else None,
        key=row.idempotency_key,
    )


def begin(
    claimed: Claimed, call: CallState, n: int, name: str, arguments: dict[str, Any], kind: str
) -> str:
    """Inner step n is `running` from this commit on: the durable record that
    it may leave the process. A first begin makes the row; a begin of a step
    a person approved runs it with the approved (maybe edited) arguments
    only; a begin again of a step left running (its worker died) counts a
    new attempt under the same key."""
    use = inner_use_id(call.tool_use_id, n)
    now = timezone.now()
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        row = _row(claimed, use)
        if row is None:
            row = _new_row(claimed, call, n, use, name, arguments, kind, C.RUNNING)
            row.attempts, row.started_at = 1, now
            row.save()
        else:
            if row.status == C.APPROVED and row.input != arguments:
                raise ValueError(f"inner step {n} was approved with other arguments")
            toolcall_move(row, C.RUNNING, attempts=row.attempts + 1, started_at=now)
        data = began_data(call, n, name, arguments, row.attempts)
        events.append(runtime, [EventSpec("tool.step_began", data, claimed.turn_id, claimed.owner)])
    return row.idempotency_key


def end(
    claimed: Claimed,
    call: CallState,
    n: int,
    *,
    status: str,
    output: str,
    is_error: bool,
    snapshot: bytes | None,
) -> None:
    """Inner step n's result, and the tool's state after it, in one commit."""
    if status not in ENDED:
        raise ValueError(f"an inner step ends succeeded or failed, not {status}")
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        row = _row(claimed, inner_use_id(call.tool_use_id, n))
        if row is None:
            raise IllegalTransition(f"inner step {n}", "absent", status)
        now = timezone.now()
        toolcall_move(
            row, status, output=output, is_error=is_error, snapshot=snapshot, finished_at=now
        )
        ms = round((now - row.started_at).total_seconds() * 1000) if row.started_at else 0
        data = ended_data(call, n, row.name, status, ms, output)
        events.append(runtime, [EventSpec("tool.step_ended", data, claimed.turn_id, claimed.owner)])


def park_on_inner_step(claimed: Claimed, call: CallState, asked: NeedsApproval) -> None:
    """A running call's inner step must wait for a person: in one commit,
    the step (`waiting_for_approval`, its exact arguments), its approval row
    (built by the approvals app, through hooks.approval_rows, with the
    preview), the outer call and the turn waiting, `approval.requested`;
    then the session is let go (parked). A decision moves the step, makes
    the outer call runnable again and re-enqueues (approvals/services.py)."""
    use = inner_use_id(call.tool_use_id, asked.step)
    kind = asked.tool_kind.value if asked.tool_kind is not None else ""
    with transaction.atomic():
        runtime = lock_session(claimed.session_id, claimed.fence)
        if _row(claimed, use) is not None:
            raise IllegalTransition(f"inner step {asked.step}", "already recorded", C.WAITING)
        row = _new_row(claimed, call, asked.step, use, asked.name, asked.arguments, kind, C.WAITING)
        row.save()
        approval_id = hooks.approval_rows.get().request(
            tool_call=row,
            policy=asked.verdict.policy,
            detail=asked.verdict.detail,
            requested_by_id=claimed.started_by_id,
            preview=_bounded(asked.preview),
        )
        outer = ToolCall.objects.select_for_update().get(pk=call.id)
        toolcall_move(outer, C.WAITING)
        turn = Turn.objects.get(pk=claimed.turn_id)
        turn_move(turn, T.WAITING)
        session_move(runtime.session, Session.Status.WAITING)
        runtime.owner = ""
        runtime.save(update_fields=["owner", "updated_at"])
        data = {"tool_use_id": use, "policy": asked.verdict.policy, "approval_id": approval_id}
        data.update(parent_tool_use_id=call.tool_use_id, step=asked.step)
        waiting = {"tool_use_ids": [call.tool_use_id]}
        events.append(
            runtime,
            [
                EventSpec("approval.requested", data, claimed.turn_id, claimed.owner),
                EventSpec("turn.waiting", waiting, claimed.turn_id, claimed.owner),
            ],
        )
    call.status = C.WAITING


def _bounded(preview: dict[str, Any]) -> dict[str, Any]:
    """The raiser bounds its preview; a row is kept a row if it did not."""
    size = len(json.dumps(preview, default=str))
    if size > MAX_PREVIEW_BYTES:
        return {"omitted": f"the preview was {size} bytes, over {MAX_PREVIEW_BYTES}"}
    return preview


def _row(claimed: Claimed, tool_use_id: str) -> ToolCall | None:
    # Through the session's unique index; locked: the row we check is the row we write.
    return (
        ToolCall.objects.select_for_update()
        .filter(session_id=claimed.session_id, tool_use_id=tool_use_id)
        .first()
    )


def _new_row(
    claimed: Claimed,
    call: CallState,
    n: int,
    use: str,
    name: str,
    arguments: dict[str, Any],
    kind: str,
    status: str,
) -> ToolCall:
    outer_position = (
        ToolCall.objects.filter(pk=call.id).values_list("message_position", flat=True).get()
    )
    return ToolCall(
        session_id=claimed.session_id,
        turn_id=claimed.turn_id,
        tool_use_id=use,
        idempotency_key=f"{claimed.key}:{use}",
        name=name,
        kind=kind,
        status=status,
        input=arguments,
        message_position=outer_position,
        created_at=timezone.now(),
        parent_id=call.id,
        step=n,
    )


# --- The fast path: host call n ended and host call n+1 begun, one statement ------------

# The runtime row first: the fence (another claim since ours matches nothing,
# so nothing below writes: every CTE selects from s), the session lock (the
# row lock of this UPDATE is the one lock_session takes), the events' seqs.
# When a step ends here, s also requires it to be `running`: a step is only
# ever ended by the owner that began it, so this is a check, not a race, and
# the seqs never move without their events.
_ADVANCE_RUNTIME = """
WITH s AS (
    UPDATE agents_sessionruntime SET last_seq = last_seq + %(n_events)s
    WHERE session_id = %(sid)s AND fence = %(fence)s{running}
    RETURNING last_seq - %(n_events)s AS base
)"""
_ADVANCE_RUNNING = """
        AND EXISTS (SELECT 1 FROM agents_toolcall r WHERE r.session_id = %(sid)s
            AND r.tool_use_id = %(end_use)s AND r.status = 'running')"""
_ADVANCE_END = """, ended AS (
    UPDATE agents_toolcall SET
        status = CASE WHEN %(failed)s THEN 'failed' ELSE 'succeeded' END,
        output = %(output)s, is_error = %(failed)s, snapshot = %(snapshot)s, finished_at = now()
    FROM s WHERE agents_toolcall.session_id = %(sid)s
        AND agents_toolcall.tool_use_id = %(end_use)s AND agents_toolcall.status = 'running'
)"""
# A new row under the outer call (p), by the session's unique index: a step
# recorded twice is an IntegrityError, and the whole statement writes nothing.
_ADVANCE_BEGIN = """, begun AS (
    INSERT INTO agents_toolcall (session_id, turn_id, tool_use_id, idempotency_key, name, kind,
        status, input, output, is_error, external_id, attempts, message_position, created_at,
        started_at, parent_id, step)
    SELECT %(sid)s, %(turn)s, %(begin_use)s, %(key)s, %(name)s, %(kind)s, 'running',
        %(input)s::jsonb, '', false, '', 1, p.message_position, now(), now(), p.id, %(step)s
    FROM s, agents_toolcall p WHERE p.id = %(parent)s
)"""
_ADVANCE_EVENTS = """, e AS (
    INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at)
    SELECT %(sid)s, s.base + ev.ord, %(turn)s, ev.d->>'kind', ev.d->'data', %(actor)s, now()
    FROM s, json_array_elements(%(events)s::json) WITH ORDINALITY AS ev(d, ord)
)
SELECT s.base FROM s
"""


def _advance_sql(ending: bool, beginning: bool) -> str:
    return (
        _ADVANCE_RUNTIME.replace("{running}", _ADVANCE_RUNNING if ending else "")
        + (_ADVANCE_END if ending else "")
        + (_ADVANCE_BEGIN if beginning else "")
        + _ADVANCE_EVENTS
    )


ADVANCE_SQL = {(e, b): _advance_sql(e, b) for e in (True, False) for b in (True, False) if e or b}


def advance(
    claimed: Claimed, call: CallState, ended: StepEnded | None, begun: StepBegun | None
) -> str:
    """Inner step `ended.n` (running) ends with its result and snapshot, and
    the new inner step `begun.n` is `running` from this commit on (it may
    leave the process); either may be None. Returns the begun step's key."""
    params: dict[str, Any] = {
        "sid": claimed.session_id,
        "fence": claimed.fence,
        "turn": claimed.turn_id,
        "actor": claimed.owner,
    }
    event_list = []
    if ended is not None:
        end_use = inner_use_id(call.tool_use_id, ended.n)
        params.update(
            end_use=end_use,
            failed=ended.is_error,
            output=ended.output,
            snapshot=ended.snapshot,
        )
        status = C.FAILED if ended.is_error else C.SUCCEEDED
        data = ended_data(call, ended.n, ended.name, status, ended.ms, ended.output)
        event_list.append({"kind": "tool.step_ended", "data": data})
    key = ""
    if begun is not None:
        use = inner_use_id(call.tool_use_id, begun.n)
        key = f"{claimed.key}:{use}"
        kind = begun.tool_kind.value if begun.tool_kind is not None else ""
        params.update(
            begin_use=use,
            key=key,
            name=begun.name,
            kind=kind,
            input=hot._dumps(begun.arguments),
            parent=call.id,
            step=begun.n,
        )
        data = began_data(call, begun.n, begun.name, begun.arguments, 1)
        event_list.append({"kind": "tool.step_began", "data": data})
    params.update(events=hot._dumps(event_list), n_events=len(event_list))
    cursor = hot._kept_cursor()
    cursor.execute(ADVANCE_SQL[ended is not None, begun is not None], params)
    row = cursor.fetchone()
    if row is None:
        _refused(claimed, ended)
    hot._publish(claimed, row[0], event_list, None, {})
    return key


def _refused(claimed: Claimed, ended: StepEnded | None) -> None:
    """The statement wrote nothing: another claim, or (a bug) a step ended
    that is not running."""
    fence = (
        SessionRuntime.objects.filter(pk=claimed.session_id).values_list("fence", flat=True).first()
    )
    if fence != claimed.fence or ended is None:
        raise LostClaim(
            f"session {claimed.session_id}: fence {claimed.fence} superseded by {fence}"
        )
    raise IllegalTransition(f"inner step {ended.n}", "not running", "ended")
