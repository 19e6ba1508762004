"""The two statements of the hot path: one agent step = two commits.

- `record_reply`: the model's reply becomes durable (its `model.replied`
  event, which carries the transcript row; its tool calls, their approvals,
  other events) BEFORE any tool it asks for runs, so
  tool_use ids, and the idempotency keys derived from them, never change on
  replay. The same statement marks the first tool call `running`: the
  durable record that it may have left the process.
- `record_tool_result`: the `tool.finished` event carrying the result row,
  the call's final status, and the next call marked `running` (record step
  k, claim step k+1).

Each is ONE SQL statement of data-modifying CTEs, sent on an autocommit
connection: one round trip, one commit. They touch `updated_at` of the
runtime row only when the turn ends: a step's time is its event's, and an
unchanged column costs no WAL in a HOT update (the changed bytes are logged). Each starts by updating the session's
runtime row `WHERE fence = <our token>`; when another claim has happened
since ours, that matches nothing, every later CTE selects from it and so
writes nothing, and the caller gets LostClaim. No read-before-write.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from functools import partial
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from agents import events
from agents.fields import json_column
from agents.models import Session, ToolCall, Turn
from agents.runtime import hooks
from agents.runtime.state import CallState, Claimed
from agents.runtime.store.lock import LostClaim
from agents.runtime.store.pool import borrow
from agents.transitions import check_tool_move_from, sql_moves

C = ToolCall.Status
T = Turn.Status
S = Session.Status

# What these statements move (the reply that ends a turn: the session shows
# running when a turn is queued, else idle, whatever it showed; the next call
# marked running with a result), checked against agents/transitions.py, and
# read from the SQL itself by tests/agents/test_status_sql.py.
MOVES = sql_moves(
    turn=[(T.RUNNING, T.SUCCEEDED)],
    session=[(shown, to) for shown in S.values for to in (S.RUNNING, S.IDLE)],
    tool=[(C.PENDING, C.RUNNING), (C.APPROVED, C.RUNNING)],
)


# One encoder for every statement's JSON: json.dumps with arguments builds a
# new JSONEncoder on each call (five a step). Its encode() keeps no state.
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _dumps(value: Any) -> str:
    return _ENCODE(value)


# record_reply is assembled from these parts, the approvals (written by the
# approvals app: hooks.approval_rows, approvals/rows.py)
# and the end of the turn only when there are some (most replies have neither), because every
# table a statement names is opened, with its indexes and triggers, on every
# execution: the lean variant opens three tables instead of six.
_REPLY_RUNTIME = """
WITH s AS (
    UPDATE agents_sessionruntime SET
        last_seq = last_seq + %(n_events)s,
        transcript_len = transcript_len + 1,
        step_attempts = 0,
        turn_steps = turn_steps + 1,
        turn_input_tokens = turn_input_tokens + %(in_tokens)s,
        turn_output_tokens = turn_output_tokens + %(out_tokens)s,
        input_tokens = input_tokens + %(in_tokens)s,
        output_tokens = output_tokens + %(out_tokens)s,
        turn_cost_micros = turn_cost_micros + %(cost)s,
        cost_micros = cost_micros + %(cost)s,
        current_turn_id = CASE WHEN %(finish)s THEN NULL ELSE current_turn_id END,
        owner = CASE WHEN %(finish)s THEN '' ELSE owner END,
        updated_at = CASE WHEN %(finish)s THEN now() ELSE updated_at END
    WHERE session_id = %(sid)s AND fence = %(fence)s
    RETURNING last_seq - %(n_events)s AS base, transcript_len - 1 AS pos, cancel_requested,
              turn_steps, turn_input_tokens, turn_output_tokens, turn_cost_micros
), tc AS (
    INSERT INTO agents_toolcall (session_id, turn_id, tool_use_id, idempotency_key, name, kind,
        status, input, output, is_error, external_id, attempts, message_position, created_at,
        started_at)
    SELECT %(sid)s, %(turn)s, x.tool_use_id, x.idempotency_key, x.name, x.kind, x.status,
        x.input, x.output, x.output <> '', '', x.attempts, s.pos, now(),
        CASE WHEN x.status = 'running' THEN now() END
    FROM s, jsonb_to_recordset(%(calls)s::jsonb) AS x(tool_use_id text, idempotency_key text,
        name text, kind text, status text, input jsonb, output text, attempts int)
    RETURNING id, tool_use_id
), e AS (
    -- The first event (model.replied) carries the reply's transcript row.
    INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at,
        position, role, content)
    -- json, not jsonb: each event's data stays the compact text we sent.
    SELECT %(sid)s, s.base + ev.ord, %(turn)s, ev.d->>'kind', ev.d->'data', %(actor)s, now(),
        CASE WHEN ev.ord = 1 THEN s.pos END, CASE WHEN ev.ord = 1 THEN 'assistant' ELSE '' END,
        CASE WHEN ev.ord = 1 THEN %(content)s::jsonb END
    FROM s, json_array_elements(%(events)s::json) WITH ORDINALITY AS ev(d, ord)
)"""

_REPLY_FINISH = """, t AS (
    UPDATE agents_turn SET status = 'succeeded', finished_at = now(), steps = s.turn_steps,
        input_tokens = s.turn_input_tokens, output_tokens = s.turn_output_tokens,
        cost_micros = s.turn_cost_micros
    FROM s WHERE agents_turn.id = %(turn)s AND agents_turn.status = 'running'
), ss AS (
    -- 'running' when a queued turn waits, so the sweeper still sees work.
    UPDATE agents_session SET updated_at = now(), status = CASE WHEN EXISTS (
            SELECT 1 FROM agents_turn q WHERE q.session_id = %(sid)s AND q.status = 'accepted')
        THEN 'running' ELSE 'idle' END
    FROM s WHERE agents_session.id = %(sid)s
    RETURNING status = 'running' AS queued
)"""

_REPLY_RESULT = """
SELECT s.base, s.pos, s.cancel_requested,
    (SELECT coalesce(jsonb_object_agg(tool_use_id, id), '{}'::jsonb) FROM tc), {queued}
FROM s
"""
# Whether a turn waits: what the end of the turn just set the session's status by.
_QUEUED = "coalesce((SELECT queued FROM ss), false)"


# (with approvals, ends the turn) -> the statement; assembled on first use,
# once the approvals app has provided its part.
_RECORD_REPLY_SQL: dict[tuple[bool, bool], str] = {}


def record_reply_sql(approvals: bool, finish: bool) -> str:
    sql = _RECORD_REPLY_SQL.get((approvals, finish))
    if sql is None:
        sql = (
            _REPLY_RUNTIME
            + (hooks.approval_rows.get().request_cte if approvals else "")
            + (_REPLY_FINISH if finish else "")
            + _REPLY_RESULT.replace("{queued}", _QUEUED if finish else "false")
        )
        _RECORD_REPLY_SQL[approvals, finish] = sql
    return sql


def record_reply(
    claimed: Claimed,
    *,
    content: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    approvals: list[dict[str, Any]],
    event_list: list[dict[str, Any]],
    in_tokens: int,
    out_tokens: int,
    finish: bool,
    cost_micros: int = 0,
) -> tuple[int, dict[str, int]]:
    """Commit a model reply; returns its transcript position and call ids.
    (Long for a reason: one statement's parameters, named one per line.)"""
    params = {
        "sid": claimed.session_id,
        "fence": claimed.fence,
        "turn": claimed.turn_id,
        "content": _dumps(content),
        "calls": _dumps(calls),
        "events": _dumps(event_list),
        "n_events": len(event_list),
        "in_tokens": in_tokens,
        "out_tokens": out_tokens,
        "cost": cost_micros,
        "finish": finish,
        "actor": claimed.owner,
        "started_by": claimed.started_by_id,
    }
    if approvals:  # the approvals app's rows, in this same statement
        params.update(hooks.approval_rows.get().request_params(approvals))
    sql = record_reply_sql(bool(approvals), finish)
    row = _execute_one(sql, params, claimed)
    base, position, cancel_requested, ids, queued = row
    ids = json_column(ids)
    claimed.cancel_requested = cancel_requested
    if finish:  # no queued turn: the engine need not claim again to find none
        claimed.turn_queued = queued
    claimed.turn_steps += 1
    claimed.transcript.append({"role": "assistant", "content": content})
    _publish(claimed, base, event_list, position, {"content": content})
    return position, ids


RECORD_RESULT_SQL = """
WITH s AS (
    UPDATE agents_sessionruntime SET
        last_seq = last_seq + 1,
        transcript_len = transcript_len + 1,
        step_attempts = 0
    WHERE session_id = %(sid)s AND fence = %(fence)s
    RETURNING last_seq AS seq, transcript_len - 1 AS pos, cancel_requested
), tc AS (
    UPDATE agents_toolcall SET status = %(status)s, is_error = %(is_error)s,
        external_id = %(external_id)s, result_position = s.pos, finished_at = now()
    FROM s WHERE agents_toolcall.id = %(call)s
), nxt AS (
    UPDATE agents_toolcall SET status = 'running', attempts = attempts + 1, started_at = now()
    FROM s WHERE agents_toolcall.id = %(next)s AND agents_toolcall.status IN ('pending', 'approved')
), e AS (
    INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at,
        position, role, content)
    SELECT %(sid)s, s.seq, %(turn)s, 'tool.finished', %(data)s::json, %(actor)s, now(),
        s.pos, 'user', %(content)s::jsonb
    FROM s
)
SELECT s.seq, s.pos, s.cancel_requested FROM s
"""


def record_tool_result(
    claimed: Claimed,
    call: CallState,
    *,
    content: str,
    is_error: bool,
    status: str,
    external_id: str = "",
    data: dict[str, Any],
    next_call: CallState | None,
) -> None:
    """Commit one tool result (and mark the next call running)."""
    check_tool_move_from(call.name, call.status, status)  # the statement's move, checked
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.tool_use_id}
    block["content"] = content
    if is_error:
        block["is_error"] = True
    params = {
        "sid": claimed.session_id,
        "fence": claimed.fence,
        "turn": claimed.turn_id,
        "call": call.id,
        "status": status,
        "is_error": is_error,
        "external_id": external_id,
        "next": next_call.id if next_call else None,
        "content": _dumps([block]),
        "data": _dumps(data),
        "actor": claimed.owner,
    }
    seq, position, cancel_requested = _execute_one(RECORD_RESULT_SQL, params, claimed)
    claimed.cancel_requested = cancel_requested
    call.status, call.is_error, call.result_position = status, is_error, position
    claimed.transcript.append({"role": "user", "content": [block]})
    if next_call is not None:
        next_call.status = C.RUNNING
        next_call.attempts += 1
    _publish(
        claimed, seq - 1, [{"kind": "tool.finished", "data": data}], position, {"block": block}
    )


def _execute_one(sql: str, params: dict[str, Any], claimed: Claimed) -> tuple:
    cursor = _kept_cursor()
    cursor.execute(sql, params)
    row = cursor.fetchone()
    if row is None:
        raise LostClaim(f"session {claimed.session_id}: fence {claimed.fence} superseded")
    return row


def _kept_cursor():
    """The hot statements' cursor: one per pooled connection, kept on it.

    `connection.cursor()` borrows the connection the long way (connect())
    and makes and wraps a new psycopg cursor, about 30 µs of CPU per
    statement (twice a step) over executing on one already made; a step
    borrows twice (pool.py), and the pool hands out its connections in
    turn, so the cursor is kept on the psycopg connection, not on this
    thread's Django wrapper. It is wrapped anew (cheap) in Django's
    CursorWrapper for this thread: execute wrappers, error translation and
    the broken-transaction check run on every statement as on any cursor.
    Django's own way is taken when a health check is due, and while queries
    are being logged (that is a different wrapper).
    """
    db = connections[DEFAULT_DB_ALIAS]
    if db.queries_logged or (db.health_check_enabled and not db.health_check_done):
        return db.cursor()
    if db.connection is None:
        borrow(db)
    raw = db.connection
    cursor = raw.__dict__.get("_agentdesk_cursor")
    if cursor is None or cursor.closed:
        cursor = raw._agentdesk_cursor = db.create_cursor()
    return db.make_cursor(cursor)


def _publish(
    claimed: Claimed,
    base: int,
    event_list: list[dict[str, Any]],
    position: int,
    extra: dict[str, Any],
) -> None:
    """Hand the committed events to the publisher, which builds their
    payload on its own thread: the step loop only queues the pieces."""
    at = time.time()
    events.publish_built(
        claimed.session_id,
        partial(_payload, at, claimed.turn_id, claimed.owner, base, event_list, position, extra),
    )


def _payload(
    at: float,
    turn_id: int,
    actor: str,
    base: int,
    event_list: list[dict[str, Any]],
    position: int,
    extra: dict[str, Any],
) -> list[dict[str, Any]]:
    now = datetime.fromtimestamp(at, UTC).isoformat()
    return [
        events.payload(
            seq=base + offset,
            kind=spec["kind"],
            turn_id=turn_id,
            data=spec["data"],
            actor=actor,
            at=now,
            # The transcript row (its position and content) is on the first event.
            position=position if offset == 1 else None,
            extra=extra if offset == 1 else None,
        )
        for offset, spec in enumerate(event_list, start=1)
    ]
