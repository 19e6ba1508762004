"""The event publisher when Redis is away: the batch is dropped with a
warning (viewers catch up from Postgres by seq), the thread lives on, and a
step never waits for it."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import threading
import time

from agents import events
from agents.observability.outages import Outage
from tests.processes import wait_for


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends


def test_a_batch_redis_refuses_is_dropped_with_a_warning_and_the_thread_goes_on(
    settings, caplog, monkeypatch
):
    settings.REDIS_URL = f"redis://127.0.0.1:{_closed_port()}/0"
    caplog.set_level(logging.WARNING, logger="agents.events")
    outage = Outage(logging.getLogger("agents.events"), "live events not published")
    monkeypatch.setattr(events, "_unpublished", outage)
    publisher = events._Publisher()
    event = {"seq": 1, "kind": "turn.started", "turn_id": 1, "data": {}, "actor": "t"}

    started = time.monotonic()
    publisher.submit("session.events", 1, [event])
    assert time.monotonic() - started < 0.05  # submitting never touches Redis

    said = lambda: [r for r in caplog.records if "not published" in r.getMessage()]  # noqa: E731
    wait_for(said, timeout=10, what="the publisher's warning")
    publisher.submit("session.events", 1, [{**event, "seq": 2}])
    wait_for(
        lambda: outage._dropped >= 2, timeout=10, what="a second batch tried after the first failed"
    )
    assert publisher.thread.is_alive() and publisher.queue.empty()
    assert len(said()) == 1  # said once for the outage, not once a batch


def test_an_outage_is_said_when_it_begins_and_when_it_ends(caplog):
    caplog.set_level(logging.WARNING, logger="agents.events")
    outage = Outage(logging.getLogger("agents.events"), "live events not published")
    outage.ok()  # nothing wrong: nothing said
    for _ in range(3):
        try:
            raise ConnectionError("refused")
        except ConnectionError:
            outage.failed()
    outage.ok()
    outage.ok()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "live events not published: Redis away; said once until it is back"
    assert "ConnectionError: refused" in caplog.records[0].exc_text  # the first traceback
    assert re.fullmatch(
        r"live events not published for \d+\.\ds \(3 dropped\); Redis is back", lines[1]
    )
    assert len(lines) == 2


def _subscribed(settings, session_id: int):
    """A listener on the session's group, and a function that waits until n
    events arrived and returns their seqs in arrival order."""
    import redis
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    listener = redis.Redis.from_url(settings.REDIS_URL).pubsub()
    listener.subscribe(events.group_channel(events.session_group(session_id)))
    listener.get_message(timeout=5)  # the subscribe confirmation
    seqs: list[int] = []

    def received(n: int) -> list[int]:
        def arrived() -> bool:
            message = listener.get_message(timeout=0.1)
            if message and message["type"] == "message":
                seqs.extend(e["seq"] for e in layer.deserialize(message["data"])["events"])
            return len(seqs) >= n

        wait_for(arrived, timeout=10, what=f"{n} events")
        listener.close()
        return seqs

    return received


EVENT = {"kind": "tool.finished", "turn_id": 1, "data": {}, "actor": "t"}


def test_batches_reach_subscribers_on_a_connection_with_replies_off(settings):
    """The publisher never reads Redis's replies (it turns them off): batch
    after batch still arrives, in order."""
    received = _subscribed(settings, 424242)
    publisher = events._Publisher()
    for seq in range(1, 6):
        publisher.submit("session.events", 424242, [{**EVENT, "seq": seq}])
        wait_for(lambda: publisher.queue.empty(), timeout=5, what="the batch to leave")

    assert received(5) == [1, 2, 3, 4, 5]


def test_payloads_built_on_the_publisher_thread_keep_their_place_in_the_order(settings):
    """The step loop hands over a function that builds its payload; the
    publisher calls it on its own thread, and batches stay in submit order."""
    received = _subscribed(settings, 434343)
    publisher = events._Publisher()
    built_on: list[str] = []

    def build() -> list[dict]:
        built_on.append(threading.current_thread().name)
        return [{**EVENT, "seq": 2}, {**EVENT, "seq": 3}]

    publisher.submit("session.events", 434343, [{**EVENT, "seq": 1}])
    publisher.submit("session.events", 434343, build)
    publisher.submit("session.events", 434343, [{**EVENT, "seq": 4}])

    assert received(4) == [1, 2, 3, 4]
    assert built_on == ["event-publisher"]


def test_a_payload_that_cannot_be_built_is_logged_and_the_publisher_goes_on(settings, caplog):
    """A bug in a payload builder (it runs on the publisher's thread) loses
    that push, with the error logged; later batches still go out."""
    caplog.set_level(logging.ERROR, logger="agents.events")
    received = _subscribed(settings, 454545)
    publisher = events._Publisher()

    def broken() -> list[dict]:
        raise KeyError("seq")

    publisher.submit("session.events", 454545, broken)
    wait_for(lambda: publisher.queue.empty(), timeout=5, what="the broken item taken")
    publisher.submit("session.events", 454545, [{**EVENT, "seq": 7}])

    assert received(1) == [7]
    assert publisher.thread.is_alive()
    assert any("could not build an event payload" in r.getMessage() for r in caplog.records)


def test_the_channel_layer_reads_what_the_publisher_writes(settings):
    """The publisher writes channels_redis's wire format itself, for its CPU
    cost (agents/events.py, bench/publish_api.py): the layer's own receive,
    as a consumer uses it, must read that, or an upgrade of channels_redis
    has broken the desk's live pushes."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    group = events.session_group(464646)
    publisher = events._Publisher()

    async def round_trip() -> dict:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        try:
            receiving = asyncio.ensure_future(layer.receive(channel))
            deadline = time.monotonic() + 10
            while not receiving.done() and time.monotonic() < deadline:
                # Until the subscription is live a PUBLISH reaches nobody: send again.
                publisher.submit("session.events", 464646, [{**EVENT, "seq": 1}])
                await asyncio.wait({receiving}, timeout=0.2)
            return receiving.result()
        finally:
            await layer.group_discard(group, channel)

    message = async_to_sync(round_trip)()

    assert message["type"] == "session.events" and message["session_id"] == 464646
    assert message["events"][0]["seq"] == 1
