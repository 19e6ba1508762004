"""A trigger as the runtime writes it to the broker (runtime/trigger_wire.py)
is the message Celery's send_task writes, field for field but the ids: a
Celery or kombu upgrade that changes the shape fails here. Routine triggers
go to the routine lane and urgent ones to the lane served first, with the
mark in the same round trip; a worker consumes them (every test with a
worker does; here, one routine trigger and one with a countdown)."""

from __future__ import annotations

import base64
import json

import pytest
from celery import current_app
from django.conf import settings

from agents.runtime import dispatch, trigger_wire
from tests.processes import wait_for


def _lanes(broker) -> dict[str, list[dict]]:
    out = {}
    for key in broker.scan_iter("celery*"):
        if broker.type(key) == b"list":
            out[key.decode()] = [json.loads(m) for m in broker.lrange(key, 0, -1)]
    return out


def _shape(value):
    """The message with what differs per message (ids, tags, times) blanked."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def test_a_trigger_is_the_message_send_task_writes(broker):
    routine = settings.CELERY_TASK_DEFAULT_PRIORITY
    current_app.send_task(dispatch.ADVANCE, (41,), countdown=30, retry=False, priority=routine)
    ((lane, [theirs]),) = _lanes(broker).items()
    broker.delete(lane)
    dispatch.enqueue(41, countdown=30)
    ((our_lane, [ours]),) = _lanes(broker).items()

    assert our_lane == lane == trigger_wire.lane(routine)
    # send_task adds the configured time limits where the app is finalized
    # (a worker, or this test process after another test): the same limits
    # a worker applies to a message that names none.
    conf = current_app.conf
    limits = theirs["headers"]["timelimit"]
    assert limits in ([None, None], [conf.task_time_limit, conf.task_soft_time_limit])
    theirs["headers"]["timelimit"] = [None, None]
    assert _shape(ours) == _shape(theirs)
    for part in ("headers", "properties"):
        differ = {"id", "root_id", "eta", "correlation_id", "delivery_tag", "reply_to", "origin"}
        assert {k: v for k, v in ours[part].items() if k not in differ} == {
            k: v for k, v in theirs[part].items() if k not in differ
        }
    assert ours["headers"]["root_id"] == ours["headers"]["id"]
    assert ours["properties"]["correlation_id"] == ours["headers"]["id"]
    assert base64.b64decode(ours["body"]) == base64.b64decode(theirs["body"])
    assert ours["headers"]["eta"] and theirs["headers"]["eta"]
    assert {k: v for k, v in ours.items() if k not in ("headers", "properties")} == {
        k: v for k, v in theirs.items() if k not in ("headers", "properties")
    }


def test_routine_and_urgent_triggers_take_their_lanes_with_the_mark_beside(broker):
    dispatch.enqueue(7)
    dispatch.enqueue(8, urgent=True)
    lanes = _lanes(broker)
    routine, urgent = trigger_wire.lane(settings.CELERY_TASK_DEFAULT_PRIORITY), "celery"
    assert routine != urgent  # the lane served first is the urgent one's alone
    assert [json.loads(base64.b64decode(m["body"]))[0] for m in lanes[routine]] == [[7]]
    assert [json.loads(base64.b64decode(m["body"]))[0] for m in lanes[urgent]] == [[8]]
    assert broker.ttl(dispatch.mark_key(7)) > 0  # each with its mark
    assert broker.ttl(dispatch.mark_key(8)) > dispatch.MARK_TTL_S


def test_a_trigger_the_broker_refuses_leaves_no_mark_and_raises_nothing(broker, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nobody there; the marks' Redis is
    dispatch._broker_client.cache_clear()
    try:
        dispatch.enqueue(9)  # logged; the sweeper is the backstop
    finally:
        dispatch._broker_client.cache_clear()
    assert broker.get(dispatch.mark_key(9)) is None  # a mark would hold the sweeper off
    assert not _lanes(broker)


@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_the_triggers_it_is_sent(stack_env, run_dir, broker):
    from agents.models import Session
    from agents.services import message_post
    from tests.processes import start_worker

    first = message_post(key="ticket:wire-1", text="Where is my order ORD-1002?")
    worker = start_worker("wire", stack_env, run_dir)
    try:
        dispatch.enqueue(first.session_id, countdown=1)  # a second trigger, due in a second

        def done() -> bool:
            session = Session.objects.get(pk=first.session_id)
            return session.status == Session.Status.IDLE

        wait_for(done, timeout=60, what="the ticket's turn to end")
        assert not _lanes(broker)  # both triggers taken
        assert "Task agents.advance_session" in worker.log()
    finally:
        worker.stop()
