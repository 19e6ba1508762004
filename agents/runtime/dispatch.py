"""Enqueueing `advance`: a trigger only (the task re-reads durable state).

A trigger that cannot be sent (the broker is down) is logged, not raised:
the state it points at is already committed, and the sweeper re-enqueues
every runnable session without a live owner once the broker is back. Raising
here would tell a caller that its committed change failed. In a worker whose
slots share its process (config/slots.py), such a trigger goes to one of
those slots instead, once per session until its claim: the sessions of a
worker that died during a Redis outage are taken over by the sweeper of a
live one within seconds, not when Redis is back (issue 26: a kill inside a
12 s outage took 14 s to recover).

Every trigger leaves a mark in Redis until its task has claimed the session
(or found nothing to claim): the time it is due (now, or after its
countdown). The sweeper leaves a marked session
alone, so a burst whose triggers wait in the queue is not sent a duplicate
of each. A mark older than MARK_TTL_S may belong to a lost trigger (Redis
restarted without the mark's key going too, a message prefetched by a
worker that then died): it is sent again, unless routine triggers still
wait in the broker's queue, because then the trigger is most likely among
them, behind the burst it came with (a worker busy with hundreds of
sessions takes its messages in at tens a second). Past MARK_KEEP_S a trigger is sent again
whatever the queue holds. (Measured, bench.latency with 500 tickets on one
worker: with a plain 10 s mark the sweeper sent 372 duplicates for 500
first triggers.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import cache

import redis
from celery import current_app
from django.conf import settings
from django.db import transaction

from agents.observability.outages import Outage
from agents.runtime import trigger_wire
from agents.runtime.live import redis_client

log = logging.getLogger(__name__)
_unsent = Outage(log, "triggers not sent to the broker (run here, or sent again by the sweeper)")

# How long a trigger may stay unstarted before the sweeper sends another
# when the queue is empty. Short on purpose: it bounds how long a lost
# trigger goes unnoticed.
MARK_TTL_S = 10
# ...and when the queue still holds messages (the trigger is most likely
# among them): the bound on a lost trigger behind a long backlog.
MARK_KEEP_S = 120
# ...and for a session whose owner died (the sweeper's urgent triggers): its
# trigger jumps every backlog, and while it is on its way the session shows
# the dead owner, so a mark this old most likely names a trigger another
# worker took and died with (its messages come back after the visibility
# timeout, an hour). Seen: three workers down within 2.5 s, a recovery
# trigger prefetched by the third, its session recovered 12 s after the
# kill, when the mark went stale. Sent again sooner, a duplicate costs a
# claim that finds the session taken.
DEAD_OWNER_MARK_TTL_S = 3
# A sweeper's mark lives this long until its trigger is sent (enqueue
# marks it again, MARK_KEEP_S, with the message): Redis expires it by itself
# if the sweeper's host loses Redis between marking and sending.
SEND_WINDOW_S = 5

# Redis priorities, 0 served first (CELERY_TASK_DEFAULT_PRIORITY is routine).
URGENT = 0
ADVANCE = "agents.advance_session"


def enqueue(session_id: int, countdown: float | None = None, *, urgent: bool = False) -> None:
    """Trigger `advance` for a session, by the task's name (agents/tasks.py,
    which the runtime does not import). `urgent` jumps the routine backlog:
    for a session whose worker died mid-turn (its recovery bound must not
    depend on how much routine work is queued). The sweeper sends its
    triggers this way too, after mark_unmarked: the mark it won goes on
    with the message, and lives as long as any trigger's."""
    # Marked before the send (in the same round trip when it can): the task
    # clears the mark when it claims, which may be before a mark set after
    # the send would land.
    due = time.time() + (countdown or 0)
    mark = (due, MARK_KEEP_S + int(countdown or 0))
    # Every trigger names its lane: send_task leaves a message at priority 0
    # unless told, where routine work would share the urgent lane.
    priority = URGENT if urgent else settings.CELERY_TASK_DEFAULT_PRIORITY
    try:
        if trigger_wire.redis_broker():
            _push(session_id, countdown, priority, mark)
        else:
            _set_mark(session_id, mark)
            current_app.send_task(
                ADVANCE, (session_id,), countdown=countdown, retry=False, priority=priority
            )
    except Exception:  # kombu/redis errors: a slot here, or the sweeper, is the backstop
        _unsent.failed()
        _delete_mark(session_id)
        if countdown is None and _handed_here(session_id):
            return
        log.info("could not enqueue advance for session %s; the sweeper will", session_id)
    else:
        _unsent.ok()


def _push(session_id: int, countdown: float | None, priority: int, mark: tuple[float, int]) -> None:
    """The mark and the message (trigger_wire.py), in one round trip when
    the marks live in the broker's Redis (the default: one REDIS_URL)."""
    body = trigger_wire.message(ADVANCE, session_id, countdown=countdown, priority=priority)
    lane = trigger_wire.lane(priority)
    if settings.CELERY_BROKER_URL != settings.REDIS_URL:
        _set_mark(session_id, mark)
        _broker_client().lpush(lane, body)
        return
    pipe = redis_client().pipeline(transaction=False)
    pipe.set(mark_key(session_id), mark[0], ex=mark[1])
    pipe.lpush(lane, body)
    _, pushed = pipe.execute(raise_on_error=False)
    if isinstance(pushed, Exception):  # (an unset mark only costs a duplicate)
        raise pushed


def _set_mark(session_id: int, mark: tuple[float, int]) -> None:
    try:
        redis_client().set(mark_key(session_id), mark[0], ex=mark[1])
    except redis.RedisError:
        pass  # unmarked: the sweeper may send a duplicate, which is harmless


def mark_key(session_id: int) -> str:
    return f"agentdesk:trigger:{session_id}"


def mark_unmarked(session_ids: list[int], dead_owner: frozenset[int] = frozenset()) -> list[int]:
    """Mark those of `session_ids` that no trigger is on its way to, and
    return them: the sessions to send a trigger (two round trips, three
    when a mark was found: is there a routine backlog). A session in
    `dead_owner` counts its mark stale after DEAD_OWNER_MARK_TTL_S.

    Among several sweepers (one per worker) exactly one marks a session
    anew: SET NX for an unmarked one, SET XX GET for a stale one (the one
    that read back the stale value it saw won)."""
    if not session_ids:
        return []
    try:
        marks = redis_client().mget([mark_key(session_id) for session_id in session_ids])
        stale_after = MARK_TTL_S
        if any(mark is not None for mark in marks) and _routine_backlog():
            stale_after = MARK_KEEP_S
        now = time.time()
        lost = [
            (session_id, mark)
            for session_id, mark in zip(session_ids, marks, strict=True)
            if mark is None
            or now - _due(mark)
            > (DEAD_OWNER_MARK_TTL_S if session_id in dead_owner else stale_after)
        ]
        return renew_marks(lost)
    except redis.RedisError:
        return list(session_ids)  # no mark store: a duplicate trigger is harmless


def renew_marks(seen: list[tuple[int, bytes | None]]) -> list[int]:
    """Mark each session anew if its mark is still the one seen (None: none
    was), and return those marked: the ones this sweeper sends. A mark
    lives SEND_WINDOW_S until enqueue() marks it again with its message: a
    sweeper whose host lost Redis between marking and sending, and so could
    neither send nor clear, left its marks for the others to honour (198
    sessions marked and not sent in one chaos run, 22-23 s with no trigger)."""
    if not seen:
        return []
    now = time.time()
    pipe = redis_client().pipeline(transaction=False)
    for session_id, mark in seen:
        if mark is None:
            pipe.set(mark_key(session_id), now, nx=True, ex=SEND_WINDOW_S)
        else:
            pipe.set(mark_key(session_id), now, xx=True, get=True, ex=SEND_WINDOW_S)
    answers = pipe.execute()
    return [
        session_id
        for (session_id, mark), answer in zip(seen, answers, strict=True)
        if (answer is True if mark is None else answer == mark)
    ]


def _due(mark: bytes) -> float:
    try:
        return float(mark)
    except ValueError:  # a mark written by an older release: treat it as stale
        return 0.0


def work_waiting() -> int:
    """How many triggers wait in the broker's queue: every slot that could
    take them is busy (a worker with a free slot takes a message at once).
    0 when that cannot be told (the broker away)."""
    try:
        return _broker_backlog()
    except redis.RedisError:
        return 0


def _broker_backlog() -> int:
    """The messages in the broker's queue (every priority lane of the
    default queue; 0 when the broker is not Redis)."""
    return _waiting(_queue_lanes())


def _routine_backlog() -> bool:
    """Whether routine triggers wait in the broker: the lane a burst's
    triggers queue in. Not the urgent lane, where beat's ticks come and go
    every couple of seconds: counted, a tick caught there made a lost
    trigger's mark look fresh for MARK_KEEP_S, 2 minutes, where MARK_TTL_S
    was meant (a worker that died holding a trigger it had not claimed yet:
    its messages come back only after the visibility timeout, an hour)."""
    if not trigger_wire.redis_broker():
        return False
    return _waiting((trigger_wire.lane(settings.CELERY_TASK_DEFAULT_PRIORITY),)) > 0


def _waiting(lanes: tuple[str, ...]) -> int:
    if not lanes:
        return 0
    pipe = _broker_client().pipeline(transaction=False)
    for lane in lanes:
        pipe.llen(lane)
    return sum(pipe.execute())


def _queue_lanes() -> tuple[str, ...]:
    """The Redis lists kombu keeps the default queue in, one per priority
    step (trigger_wire.lane); none when the broker is not Redis."""
    if not trigger_wire.redis_broker():
        return ()
    steps = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("priority_steps", [0])
    return tuple(trigger_wire.lane(step) for step in steps)


@cache
def _broker_client() -> redis.Redis:
    return redis.Redis.from_url(
        settings.CELERY_BROKER_URL, socket_timeout=2, socket_connect_timeout=2
    )


def clear_mark(session_id: int) -> None:
    """The trigger arrived: its task claimed the session, or found nothing
    to claim (engine._drive)."""
    if _handed:
        with _handed_lock:
            _handed.discard(session_id)
    _delete_mark(session_id)


def _delete_mark(session_id: int) -> None:
    try:
        redis_client().delete(mark_key(session_id))
    except redis.RedisError:
        pass


def enqueue_on_commit(session_id: int) -> None:
    """Enqueue once the caller's transaction commits (never for a rollback)."""
    transaction.on_commit(lambda: enqueue(session_id))


# --- The broker away: a slot of this process drives the session -------------------

_hand: Callable[[int], None] | None = None
_handed: set[int] = set()  # handed to a slot here, not claimed yet
_handed_lock = threading.Lock()


def hand_to_slots(hand: Callable[[int], None] | None) -> None:
    """What a worker whose slots share its process does with a trigger it
    cannot send: hand(session_id) runs `advance` on a free slot (set at
    worker start, config/celery.py; None: the sweeper sends it once the
    broker is back). A trigger with a countdown is not handed over: its
    session's wake_at is in PostgreSQL, and the sweeper finds it when due."""
    global _hand
    _hand = hand
    with _handed_lock:
        _handed.clear()


def _handed_here(session_id: int) -> bool:
    """Hand the session to a slot here, once until its claim (the sweeper
    finds it again every interval meanwhile); False with nowhere to hand it."""
    hand = _hand
    if hand is None:
        return False
    with _handed_lock:
        if session_id in _handed:
            return True
        _handed.add(session_id)
    from agents.observability import metrics

    metrics.TRIGGERS_RUN_HERE.inc()
    log.info("broker away: session %s goes to a slot of this process", session_id)
    hand(session_id)
    return True
