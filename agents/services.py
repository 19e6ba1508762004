"""Writes on sessions that come from people and inbound channels.

Each is one short transaction under the session lock (the SessionRuntime row,
see agents/runtime/store/lock.py), so it never races the worker; each
writes its events in that transaction and enqueues `advance` after commit.
Views, consumers, the inbound API, tasks and management commands call these.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone

from agents import budgets, events
from agents.errors import Conflict
from agents.events import EventSpec
from agents.models import Event, Session, SessionRuntime, ToolCall, Turn
from agents.runtime import dispatch, hooks, store
from agents.transitions import sql_moves, toolcall_move

T = Turn.Status
C = ToolCall.Status
S = Session.Status
# What ACCEPT_TURN_SQL moves: the session shows running, whatever it showed
# (its WHERE: <> 'running'; the caller asks it only when no turn is open).
MOVES = sql_moves(session=[(shown, S.RUNNING) for shown in S.values if shown != S.RUNNING])
OPEN_TURN = [T.ACCEPTED, T.RUNNING, T.WAITING, T.WAITING_SUBAGENT, T.RESUMING]


def _actor(user: AbstractBaseUser | None, default: str = "system") -> str:
    return user.get_username() if user is not None else default


def session_get_or_create(
    *,
    key: str,
    profile: str = "support_triage",
    title: str = "",
    customer: str = "",
    context: dict[str, Any] | None = None,
    max_turn_steps: int | None = None,
) -> Session:
    """The one session for a domain key, created on first contact (with a
    step budget other than the default, when given)."""
    session = _session_insert(
        key=key,
        profile=profile,
        title=title,
        customer=customer,
        context=context,
        max_turn_steps=max_turn_steps,
    )
    if session is None:  # the key exists (or a concurrent first contact won): that session
        return Session.objects.get(key=key)
    return session


def _session_insert(
    *,
    key: str,
    profile: str = "support_triage",
    title: str = "",
    customer: str = "",
    context: dict[str, Any] | None = None,
    max_turn_steps: int | None = None,
) -> Session | None:
    """A new session and its runtime row, or None when the key is taken. In
    the caller's transaction, the new row is invisible to others until it
    commits, and a concurrent first contact with the same key waits on it."""
    values: dict[str, Any] = {"key": key, "profile": profile, "title": title[:300]}
    values.update(customer=customer[:200], context=context or {})
    if max_turn_steps is not None:
        values["max_turn_steps"] = max_turn_steps
    session = Session(**values)
    with connection.cursor() as cursor:
        cursor.execute(*_first_contact(session))
        row = cursor.fetchone()
    if row is None:
        return None
    session.pk = row[0]
    session._state.adding, session._state.db = False, "default"  # as if loaded, like a Turn below
    return session


def _first_contact(session: Session, runtime: SessionRuntime | None = None, turn: list[Any] = ()):
    """One statement: the session and its runtime row (and, given `turn`'s
    parameters, its first turn with the turn.accepted event: _FIRST_TURN),
    or nothing at all when the key is taken. As two ORM creates in a
    transaction this was four round trips and ~2 ms of Python per new
    session (bench: a few % of a fifty-step run)."""
    sql, s_fields, r_fields = _first_contact_sql(bool(turn))
    runtime = runtime or SessionRuntime(session_id=0)
    params = [f.get_db_prep_save(f.pre_save(session, True), connection) for f in s_fields]
    params += [f.get_db_prep_save(f.pre_save(runtime, True), connection) for f in r_fields]
    return sql, [*params, *turn]


@functools.cache
def _first_contact_sql(with_turn: bool = False) -> tuple[str, list[Field], list[Field]]:
    """The statement and its fields, from the models: every column with its
    model default, so a new field needs no change here."""
    s_fields = [f for f in Session._meta.concrete_fields if not f.primary_key]
    r_fields = [f for f in SessionRuntime._meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    # Names from the models' metadata; every value is a parameter.
    sql = (
        f"WITH s AS (INSERT INTO {Session._meta.db_table} "  # noqa: S608
        f"({', '.join(quote(f.column) for f in s_fields)}) "
        f"VALUES ({', '.join(['%s'] * len(s_fields))}) "
        "ON CONFLICT (key) DO NOTHING RETURNING id), "
        f"r AS (INSERT INTO {SessionRuntime._meta.db_table} "
        f"(session_id, {', '.join(quote(f.column) for f in r_fields)}) "
        f"SELECT s.id, {', '.join(['%s'] * len(r_fields))} FROM s) "
    )
    sql += _FIRST_TURN if with_turn else "SELECT id FROM s"
    return sql, s_fields, r_fields


# The first turn of a session made in the same statement (after s and r
# above): turn 1 at seq 1, as ACCEPT_TURN_SQL writes a later one.
# Parameters: trigger, input, started_by_id, the event's data, its actor.
_FIRST_TURN = """, t AS (
    INSERT INTO agents_turn (session_id, number, status, trigger, input, started_by_id, steps,
        input_tokens, output_tokens, cost_micros, error, created_at)
    SELECT s.id, 1, 'accepted', %s, %s, %s, 0, 0, 0, 0, '', now() FROM s
    RETURNING id, session_id, created_at
), e AS (
    INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at, role)
    SELECT t.session_id, 1, t.id, 'turn.accepted', %s::json, %s, t.created_at, '' FROM t
)
SELECT session_id, id, created_at FROM t"""


def message_post(
    *,
    key: str,
    text: str,
    trigger: str = Turn.Trigger.API,
    user: AbstractBaseUser | None = None,
    title: str = "",
    customer: str = "",
    context: dict[str, Any] | None = None,
    likely_new: bool = False,
) -> Turn:
    """A message for the agent: starts a turn, or queues one behind the
    running turn, as the session's message policy says. On first contact the
    session is created in the same transaction as its first turn.

    `likely_new` (a ticket just opened): try creating the session first,
    which saves the lookup that would find nothing."""
    # No savepoint: nothing below is caught after it wrote (a missing
    # session raises before any write).
    with transaction.atomic(savepoint=False):
        if likely_new and (turn := _first_turn(key, text, trigger, user, title, customer, context)):
            return turn
        try:
            return _post_message(key, text, trigger, user)
        except SessionRuntime.DoesNotExist:  # first contact: nothing was written
            pass
        turn = _first_turn(key, text, trigger, user, title, customer, context)
        if turn is not None:
            return turn
        # A concurrent first contact with this key committed between our
        # lookup and our insert (which waited for it): the session exists now.
        return _post_message(key, text, trigger, user)


def _first_turn(
    key: str,
    text: str,
    trigger: str,
    user: AbstractBaseUser | None,
    title: str,
    customer: str,
    context: dict[str, Any] | None,
) -> Turn | None:
    """A brand-new session with its first turn (seq 1, turn 1), or None when
    the key is taken: one statement (_first_contact with _FIRST_TURN), the
    session shown running from the start. Nothing else can be open on a
    session that did not exist: no running turn to queue behind or
    interrupt, no follow-up for a customer's reply to cancel, so none of
    that is looked up."""
    session = Session(key=key, title=title[:300], customer=customer[:200], context=context or {})
    session.status = S.RUNNING
    data = {"number": 1, "trigger": trigger}
    actor = _actor(user, trigger)
    turn_params = [trigger, text, user.pk if user is not None else None, _json(data), actor]
    sql, params = _first_contact(session, SessionRuntime(session_id=0, last_seq=1), turn_params)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    session_id, turn_id, created_at = row
    turn = _accepted(session_id, turn_id, created_at, 1, text, trigger, user, data, actor)
    dispatch.enqueue_on_commit(session_id)
    return turn


def _post_message(key: str, text: str, trigger: str, user: AbstractBaseUser | None) -> Turn:
    """In the caller's transaction; raises SessionRuntime.DoesNotExist, having
    written nothing, when there is no session for the key."""
    session_id, last_seq, policy = _lock_by_key(key)
    with connection.cursor() as cursor:  # after the lock: a new snapshot
        cursor.execute(TURN_COUNTS_SQL, [OPEN_TURN, session_id])
        last_number, open_count = cursor.fetchone()
    active: list[Turn] = []
    if open_count or trigger == Turn.Trigger.CUSTOMER:
        # The rarer paths work on the ORM row; the lock is already ours.
        runtime = store.lock_session(session_id)
        active = list(
            Turn.objects.filter(session_id=session_id, status__in=OPEN_TURN).order_by("number")
        )
        if active and policy == Session.MessagePolicy.REJECT:
            raise Conflict("a turn is already running on this session", current=active[0].status)
        specs: list[EventSpec] = []
        if active and policy == Session.MessagePolicy.INTERRUPT:
            _cancel_open_turns(runtime, user, specs)
        if trigger == Turn.Trigger.CUSTOMER:  # the customer answered: no need to chase
            hooks.customer_reply(runtime, specs)
        if specs:  # seqs from runtime.last_seq, saved with the turn below
            events.append(runtime, specs, save_seq=False)
        last_seq = runtime.last_seq
    turn = _accept_turn(
        session_id,
        seq=last_seq + 1,
        number=(last_number or 0) + 1,
        text=text,
        trigger=trigger,
        user=user,
        queued=bool(active) and policy == Session.MessagePolicy.QUEUE,
        # An interrupting message canceled what was open: its turn is the work
        # now (a running turn asked to stop keeps the session running anyway).
        shows_running=not active or policy == Session.MessagePolicy.INTERRUPT,
    )
    dispatch.enqueue_on_commit(session_id)
    return turn


# Posting a message is plain SQL in its common case (no open turn, not a
# customer's reply): the lock by key, the turn counts, and one statement that
# accepts the turn. As ORM queries these cost 2.4 ms more per message, on
# every message (bench: ~6% of a ten-step run).
POST_LOCK_SQL = """
SELECT r.session_id, r.last_seq, s.message_policy
FROM agents_sessionruntime r JOIN agents_session s ON s.id = r.session_id
WHERE s.key = %s
FOR NO KEY UPDATE OF r
"""

TURN_COUNTS_SQL = """
SELECT max(number), count(*) FILTER (WHERE status = ANY(%s))
FROM agents_turn WHERE session_id = %s
"""

# The turn, its `turn.accepted` event, the session shown running and the
# runtime's last seq, in one statement. The caller holds the lock.
ACCEPT_TURN_SQL = """
WITH t AS (
    INSERT INTO agents_turn (session_id, number, status, trigger, input, started_by_id, steps,
        input_tokens, output_tokens, cost_micros, error, created_at)
    VALUES (%(sid)s, %(number)s, 'accepted', %(trigger)s, %(input)s, %(user)s, 0, 0, 0, 0, '',
        now())
    RETURNING id, created_at
), s AS (
    UPDATE agents_session SET status = 'running', updated_at = now()
    WHERE id = %(sid)s AND %(start)s AND status <> 'running'
), r AS (
    UPDATE agents_sessionruntime SET last_seq = %(seq)s, updated_at = now()
    WHERE session_id = %(sid)s
), e AS (
    INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at, role)
    SELECT %(sid)s, %(seq)s, t.id, 'turn.accepted', %(data)s::json, %(actor)s, t.created_at, ''
    FROM t
)
SELECT id, created_at FROM t
"""


def _lock_by_key(key: str) -> tuple[int, int, str]:
    """The session lock, by domain key: (session id, last seq, message policy)."""
    with connection.cursor() as cursor:
        cursor.execute(POST_LOCK_SQL, [key])
        row = cursor.fetchone()
    if row is None:
        raise SessionRuntime.DoesNotExist(f"no session {key!r}")
    return row


def _accept_turn(
    session_id: int,
    *,
    seq: int,
    number: int,
    text: str,
    trigger: str,
    user: AbstractBaseUser | None,
    queued: bool,
    shows_running: bool,
) -> Turn:
    data = {"number": number, "trigger": trigger}  # the text is the turn's input
    if queued:
        data["queued"] = True
    actor = _actor(user, trigger)
    params = {
        "sid": session_id,
        "number": number,
        "trigger": trigger,
        "input": text,
        "user": user.pk if user is not None else None,
        "start": shows_running,
        "seq": seq,
        "data": _json(data),
        "actor": actor,
    }
    with connection.cursor() as cursor:
        cursor.execute(ACCEPT_TURN_SQL, params)
        turn_id, created_at = cursor.fetchone()
    return _accepted(session_id, turn_id, created_at, number, text, trigger, user, data, actor, seq)


def _accepted(
    session_id: int,
    turn_id: int,
    created_at: Any,
    number: int,
    text: str,
    trigger: str,
    user: AbstractBaseUser | None,
    data: dict[str, Any],
    actor: str,
    seq: int = 1,
) -> Turn:
    """The turn just accepted, as if loaded, and its turn.accepted event
    published once the caller's transaction commits."""
    turn = Turn(
        id=turn_id,
        session_id=session_id,  # turn.session loads it when asked
        number=number,
        trigger=trigger,
        input=text,
        started_by=user,
        created_at=created_at,
    )
    turn._state.adding, turn._state.db = False, "default"  # as if loaded
    accepted = Event(
        session_id=session_id,
        seq=seq,
        turn_id=turn_id,
        kind="turn.accepted",
        data=data,
        actor=actor,
        created_at=created_at,
    )
    events.publish_on_commit(session_id, [accepted])
    return turn


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def turn_cancel(*, session_id: int, user: AbstractBaseUser | None) -> Session:
    """Cancel the session's open turns. Closing a browser never calls this."""
    with transaction.atomic():
        runtime = store.lock_session(session_id)
        specs: list[EventSpec] = []
        if not _cancel_open_turns(runtime, user, specs):
            raise Conflict("nothing to cancel", current=runtime.session.status)
        events.append(runtime, specs)
        dispatch.enqueue_on_commit(session_id)
    hooks.turn_canceled(session_id, user=user)  # sub-agents: children go with the parent
    return runtime.session


def _cancel_open_turns(runtime: SessionRuntime, user, specs: list[EventSpec]) -> bool:
    actor = _actor(user)
    open_turns = list(Turn.objects.filter(session_id=runtime.session_id, status__in=OPEN_TURN))
    # Queued turns first, the current one last, so the session's final status
    # is computed once nothing else is open.
    open_turns.sort(key=lambda t: t.id == runtime.current_turn_id)
    for turn in open_turns:
        turn.cancel_requested_by = user
        turn.save(update_fields=["cancel_requested_by"])
        if turn.id == runtime.current_turn_id and runtime.owner:
            # A worker holds this turn in memory: it honours the flag at its
            # next step boundary, or aborts its model stream (runtime/cancel.py).
            runtime.cancel_requested = True
            runtime.save(update_fields=["cancel_requested", "updated_at"])
            specs.append(
                EventSpec("turn.cancel_requested", {"number": turn.number}, turn.id, actor)
            )
            continue
        store.cancel_open_calls(runtime, turn, specs, actor)
        store.finish_turn(runtime, turn, T.CANCELED, specs, actor)
        runtime.save()
    return bool(open_turns)


def session_resume(*, session_id: int, user: AbstractBaseUser | None) -> Turn:
    """Start a turn that asks the agent to carry on after a failure or cancel."""
    session = Session.objects.get(pk=session_id)
    if Turn.objects.filter(session=session, status__in=OPEN_TURN).exists():
        raise Conflict("a turn is still open; nothing to resume", current=session.status)
    return message_post(
        key=session.key,
        text="Please continue where you left off.",
        trigger=Turn.Trigger.STAFF,
        user=user,
    )


def toolcall_resolve(
    *, tool_call_id: int, user: AbstractBaseUser, resolution: str, note: str = ""
) -> ToolCall:
    """A human settles an in-doubt call: `retry` (resend; only sensible after
    checking the other side), `succeeded` or `failed` (with what happened)."""
    call = ToolCall.objects.get(pk=tool_call_id)
    with transaction.atomic():
        runtime = store.lock_session(call.session_id)
        call = ToolCall.objects.select_for_update().get(pk=tool_call_id)
        if call.status != C.IN_DOUBT:
            raise Conflict("this call is not in doubt", current=call.status)
        to = {"retry": C.APPROVED, "succeeded": C.SUCCEEDED, "failed": C.FAILED}[resolution]
        who = _actor(user)
        toolcall_move(
            call,
            to,
            output=f"Resolved by {who} ({resolution}): {note}".strip(),
            is_error=to == C.FAILED,
            finished_at=timezone.now(),
        )
        specs = [
            EventSpec(
                "tool.resolved",
                {"tool_use_id": call.tool_use_id, "resolution": resolution, "note": note},
                call.turn_id,
                who,
            )
        ]
        store.resume_if_unblocked(runtime, call.turn_id, specs, who)
        events.append(runtime, specs)
    return call


def toolcall_decided(
    runtime: SessionRuntime,
    call: ToolCall,
    to: str,
    *,
    specs: list[EventSpec],
    actor: str,
    runs_with: dict[str, Any] | None = None,
    note: str = "",
) -> None:
    """A decision on a call that waited for a person (approvals/services.py),
    handed back to the runtime in the deciding transaction, under the
    session lock: the call is approved (to run with `runs_with`, an
    approver's edit, or as asked) or denied (`note` is what the model, or
    the tool that asked, reads); an inner step's outer call is runnable
    again (the runtime runs the tool again, which reads the decision in its
    steps' log); the turn resumes when nothing else holds it."""
    if to == C.APPROVED:
        toolcall_move(call, to, input=call.input if runs_with is None else runs_with)
    else:
        toolcall_move(call, to, output=note, is_error=True, finished_at=timezone.now())
    if call.parent_id is not None:
        parent = ToolCall.objects.select_for_update().get(pk=call.parent_id)
        if parent.status == C.WAITING:
            toolcall_move(parent, C.APPROVED)
    store.resume_if_unblocked(runtime, call.turn_id, specs, actor)


def session_raise_budget(
    *,
    session_id: int,
    user: AbstractBaseUser,
    max_total_tokens: int | None = None,
    max_total_cost_micros: int | None = None,
) -> Session:
    """An admin raises a session's spend limits (None: no limit). A session
    paused by its budget (agents/budgets.py) resumes its turn when the new
    limits are above what it has spent; a limit not above it is refused."""
    with transaction.atomic():
        runtime = store.lock_session(session_id)
        session = runtime.session
        spent_tokens = runtime.input_tokens + runtime.output_tokens
        if max_total_tokens is not None and max_total_tokens <= spent_tokens:
            raise Conflict(
                f"the session has used {spent_tokens:,} tokens; the limit must be higher",
                current=session.status,
            )
        if max_total_cost_micros is not None and max_total_cost_micros <= runtime.cost_micros:
            raise Conflict(
                f"the session has spent {budgets.usd(runtime.cost_micros)}; the limit must be higher",
                current=session.status,
            )
        before = {"max_total_tokens": session.max_total_tokens}
        before["max_total_cost_micros"] = session.max_total_cost_micros
        session.max_total_tokens = max_total_tokens
        session.max_total_cost_micros = max_total_cost_micros
        session.save(update_fields=["max_total_tokens", "max_total_cost_micros", "updated_at"])
        who = _actor(user)
        after = {"max_total_tokens": max_total_tokens}
        after["max_total_cost_micros"] = max_total_cost_micros
        specs = [EventSpec("budget.raised", {"before": before, "after": after}, None, who)]
        if session.status == Session.Status.PAUSED and runtime.current_turn_id is not None:
            turn = Turn.objects.get(pk=runtime.current_turn_id)
            turn.error = ""  # the pause's reason; the timeline keeps it
            turn.save(update_fields=["error"])
            store.resume_if_unblocked(runtime, turn.id, specs, who)
        events.append(runtime, specs)
    return session
