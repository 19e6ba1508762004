"""A trigger on its way is marked until its task has claimed (runtime/dispatch.py):
the sweeper does not send a queued session a second one, and sends a lost
trigger again once its mark is gone. Real Redis broker and Postgres; no
worker runs, so the triggers stay in the queue."""

from __future__ import annotations

import socket
from datetime import timedelta

import psycopg
import pytest
from django.db import connections
from django.utils import timezone

from agents.models import SessionRuntime
from agents.runtime import dispatch, engine, live, ownership, store, sweeper, trigger_wire
from agents.services import message_post
from tests.agents.helpers import drain_broker, queued_triggers


@pytest.mark.django_db(transaction=True)
def test_a_queued_trigger_is_not_sent_twice_and_a_lost_one_is_sent_again(broker, settings):
    settings.AGENTDESK_SWEEP_GRACE_S = 0  # every unowned running session is a candidate
    session_id = message_post(key="ticket:marks", text="Where is my order?").session_id
    assert queued_triggers(broker) == 1
    assert broker.ttl(dispatch.mark_key(session_id)) > 0

    assert sweeper.sweep() == []  # its trigger is on its way
    assert queued_triggers(broker) == 1

    # Lost: the queue emptied (a Redis restart takes the mark with it).
    drain_broker(broker)
    broker.delete(dispatch.mark_key(session_id))
    assert sweeper.sweep() == [session_id]
    assert queued_triggers(broker) == 1
    assert sweeper.sweep() == []  # the resent trigger is marked too
    assert queued_triggers(broker) == 1


def _age_mark(broker, session_id: int, seconds: float) -> None:
    """As if the trigger had been sent `seconds` ago."""
    key = dispatch.mark_key(session_id)
    broker.set(key, float(broker.get(key)) - seconds, keepttl=True)


@pytest.mark.django_db(transaction=True)
def test_a_trigger_behind_a_backlog_is_not_sent_twice_until_the_keep_time(broker, settings):
    """A burst's triggers can wait longer than MARK_TTL_S in the queue of a
    busy worker: while the queue holds messages, a stale mark is left alone
    up to MARK_KEEP_S; with the queue empty, it means a lost trigger."""
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    first = message_post(key="ticket:backlog-1", text="Where is my order?").session_id
    second = message_post(key="ticket:backlog-2", text="And mine?").session_id
    assert queued_triggers(broker) == 2
    _age_mark(broker, first, dispatch.MARK_TTL_S + 5)
    assert sweeper.sweep() == []  # both triggers are still in the queue
    assert queued_triggers(broker) == 2

    _age_mark(broker, first, dispatch.MARK_KEEP_S)  # queued for longer than we wait
    assert sweeper.sweep() == [first]
    assert queued_triggers(broker) == 3

    drain_broker(broker)  # the queue drained, by a worker that then died
    _age_mark(broker, second, dispatch.MARK_TTL_S + 1)
    assert sweeper.sweep() == [second]  # first's mark is fresh again: it was just resent
    assert sweeper.sweep() == []


@pytest.mark.django_db(transaction=True)
def test_beats_ticks_in_the_urgent_lane_are_no_backlog_a_lost_trigger_waits_behind(
    broker, settings
):
    """A worker died holding a trigger it had not claimed (its messages come
    back after the visibility timeout, an hour): the mark goes stale after
    MARK_TTL_S. Beat's ticks pass through the urgent lane every couple of
    seconds; one caught there made the mark look fresh for MARK_KEEP_S."""
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    session_id = message_post(key="ticket:beat-tick", text="Hello").session_id
    drain_broker(broker)  # taken by the worker that died
    _age_mark(broker, session_id, dispatch.MARK_TTL_S + 1)
    broker.lpush(trigger_wire.lane(dispatch.URGENT), b"a tick of beat's")
    assert sweeper.sweep() == [session_id]


@pytest.mark.django_db(transaction=True)
def test_a_dead_owners_trigger_not_claimed_in_seconds_is_sent_again(broker, settings):
    """The sweeper sent a dead owner's session its recovery trigger, and
    another worker took it and died too (three workers down within 2.5 s,
    chaos campaign): the session still shows the dead owner. Its mark goes
    stale after DEAD_OWNER_MARK_TTL_S, not MARK_TTL_S (recovered 12 s
    after the kill that way); an unowned session's mark keeps MARK_TTL_S."""
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    orphaned = message_post(key="ticket:dead-twice", text="Hello").session_id
    waiting = message_post(key="ticket:not-yet", text="Hello").session_id
    SessionRuntime.objects.filter(session_id=orphaned).update(
        owner="ghost:1/1", owner_process=987_654_321, fence=1
    )
    drain_broker(broker)  # both triggers taken by a worker that died
    assert sweeper.sweep() == []  # just sent: on their way
    for session_id in (orphaned, waiting):
        _age_mark(broker, session_id, dispatch.DEAD_OWNER_MARK_TTL_S + 1)
    assert sweeper.sweep() == [orphaned]
    assert queued_triggers(broker) == 1


@pytest.mark.django_db(transaction=True)
def test_a_sweepers_mark_outlives_its_sweeper_only_once_the_trigger_is_sent(broker, settings):
    """A sweeper whose host lost Redis between marking a session and sending
    its trigger can neither send nor clear the mark: Redis lets the mark go
    by itself after SEND_WINDOW_S, and the next sweep sends. (With the
    trigger's own 2 minutes, the other sweepers left 198 such sessions
    alone for 10 s and more: 113 violations in one chaos run.) A mark whose
    trigger went lives as any trigger's."""
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    stranded = message_post(key="ticket:marked-unsent", text="Hello").session_id
    sent = message_post(key="ticket:marked-sent", text="Hello").session_id
    drain_broker(broker)
    broker.delete(dispatch.mark_key(stranded), dispatch.mark_key(sent))

    assert dispatch.mark_unmarked([stranded]) == [stranded]  # ...and then Redis was gone
    assert 0 < broker.ttl(dispatch.mark_key(stranded)) <= dispatch.SEND_WINDOW_S

    assert sweeper.sweep() == [sent]  # the stranded one is still marked, for now
    assert broker.ttl(dispatch.mark_key(sent)) > dispatch.MARK_TTL_S
    broker.delete(dispatch.mark_key(stranded))  # (as Redis does at SEND_WINDOW_S)
    assert sweeper.sweep() == [stranded]


@pytest.mark.django_db(transaction=True)
def test_two_sweepers_send_a_stale_trigger_once(broker, settings):
    session_id = message_post(key="ticket:race", text="Hello").session_id
    drain_broker(broker)
    _age_mark(broker, session_id, dispatch.MARK_TTL_S + 1)
    stale = broker.get(dispatch.mark_key(session_id))
    # Both sweepers read the stale mark; the first renews it and sends...
    assert dispatch.renew_marks([(session_id, stale)]) == [session_id]
    # ...the second finds a mark that is not the one it read, and does not.
    assert dispatch.renew_marks([(session_id, stale)]) == []
    # Likewise for a session neither saw marked: SET NX lets one through.
    broker.delete(dispatch.mark_key(session_id))
    assert dispatch.renew_marks([(session_id, None)]) == [session_id]
    assert dispatch.renew_marks([(session_id, None)]) == []


@pytest.mark.django_db(transaction=True)
def test_the_mark_goes_once_the_claim_is_settled(broker):
    """The task's claim clears its trigger's mark (engine._drive), not the
    task's start: until the slot's name is on the session, the sweeper must
    see the trigger as on its way."""
    session_id = message_post(key="ticket:clears", text="Hello").session_id
    # Backing off after a failed step: the claim finds nothing to run now.
    later = timezone.now() + timedelta(minutes=1)
    SessionRuntime.objects.filter(session_id=session_id).update(wake_at=later)
    assert broker.exists(dispatch.mark_key(session_id))
    try:
        engine.advance(session_id)
    finally:
        ownership.release_liveness()  # its connection would outlive the test database
    assert not broker.exists(dispatch.mark_key(session_id))


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def test_a_reply_that_arrives_in_one_go_after_a_long_wait_publishes_nothing(
    broker, settings, monkeypatch
):
    clock = _Clock()
    monkeypatch.setattr(live, "time", clock)
    stream = live.TextStream(session_id=991, turn_id=7)
    clock.now += 2.0  # two seconds to the first token
    stream.push("Your order ")
    stream.push("shipped on Monday.")
    stream.close()
    assert live.partial_text(991, 7) == ""  # model.replied will carry it


def test_a_reply_that_streams_is_shown_while_it_streams(broker, settings, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(live, "time", clock)
    stream = live.TextStream(session_id=992, turn_id=7)
    clock.now += 2.0
    stream.push("Your order ")
    clock.now += 2 * live.FLUSH_S
    stream.push("shipped ")
    assert live.partial_text(992, 7) == "Your order shipped "
    clock.now += 0.01
    stream.push("on Monday.")
    stream.close()
    assert live.partial_text(992, 7) == "Your order shipped on Monday."


@pytest.mark.django_db(transaction=True)
def test_a_trigger_whose_task_cannot_reach_the_database_is_sent_again_at_the_next_sweep(
    broker, settings
):
    """Its task met the database away before it could claim (taking this
    process's liveness lock again, the first thing it does after a lost
    connection): the trigger is spent, and its mark goes with it, so the
    sweeper's next look sends another. (Left marked, it waited for the mark
    to go stale: 10 s, or 2 minutes behind a backlog.)"""
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    session_id = message_post(key="ticket:away", text="Hello").session_id
    drain_broker(broker)  # the trigger was taken by a task...
    assert broker.exists(dispatch.mark_key(session_id))

    # ...in a process whose liveness connection was lost with the database,
    # which refuses new connections (a port nothing listens on, on loopback).
    ownership.release_liveness()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    db = connections["default"].settings_dict
    port = db["PORT"]
    db["PORT"] = closed_port
    try:
        with pytest.raises(psycopg.OperationalError):
            engine.advance(session_id)
    finally:
        db["PORT"] = port
    assert not broker.exists(dispatch.mark_key(session_id))

    assert sweeper.sweep() == [session_id]
    assert queued_triggers(broker) == 1


@pytest.mark.django_db(transaction=True)
def test_a_claim_that_raised_after_its_commit_does_not_strand_the_session(broker, settings):
    """A claim committed (the session shows the slot's name and this live
    process's key) and its answer was lost with the database: the slot
    raised, and no slot drives the session. The sweeper leaves a live
    process's sessions alone, so the slot lets go of it by its name
    (store.disown, engine._drive): then it is a dead owner's, sent at the
    next sweep as urgent work. A claim made since by another slot, under its
    own name, is left alone."""
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    settings.AGENTDESK_SWEEP_INTERVAL_S = 0  # no rejoining pause (an earlier test re-took our lock)
    session_id = message_post(key="ticket:lost-answer", text="Hello").session_id
    broker.flushdb()  # the trigger was taken (and its mark cleared) by the task
    us = ownership.me()
    SessionRuntime.objects.filter(session_id=session_id).update(
        owner=us.name,
        owner_process=us.process,
        fence=1,  # what the lost commit wrote
    )
    try:
        assert sweeper.sweep() == []  # a live process's slot: stranded

        other = ownership.Owner(name="elsewhere:1/1", process=us.process)
        store.disown(session_id, other)  # not its name: nothing changes
        assert SessionRuntime.objects.get(pk=session_id).owner_process == us.process

        store.disown(session_id, us)
        runtime = SessionRuntime.objects.get(pk=session_id)
        assert (runtime.owner, runtime.owner_process) == (us.name, 0)
        assert sweeper.sweep() == [session_id]
        assert broker.llen(trigger_wire.lane(dispatch.URGENT)) == 1
    finally:
        ownership.release_liveness()


def test_a_trigger_the_broker_cannot_take_goes_to_a_slot_here_once_until_its_claim(settings):
    """The broker away (nothing listens on its port, on loopback): a worker
    whose slots share its process runs the trigger on one of them
    (config/slots.py), once per session until its claim, however often
    the sweeper finds it meanwhile; one due later is left to the sweeper,
    which finds it in PostgreSQL when it is due."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    settings.REDIS_URL = settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port}/0"
    live.redis_client.cache_clear()
    handed: list[int] = []
    dispatch.hand_to_slots(handed.append)
    try:
        dispatch.enqueue(41)
        dispatch.enqueue(41, urgent=True)  # the sweeper's next look
        dispatch.enqueue(42, countdown=30)
        assert handed == [41]
        dispatch.clear_mark(41)  # its slot claimed it
        dispatch.enqueue(41)  # work arrived after it let go
        assert handed == [41, 41]

        dispatch.hand_to_slots(None)  # a web process, a prefork worker: the sweeper's, later
        dispatch.enqueue(43)
        assert handed == [41, 41]
    finally:
        dispatch.hand_to_slots(None)
        live.redis_client.cache_clear()
