"""Presence over `ws/presence/` against the real ASGI app, Redis and channel
layer: who views a session or card, gone at once on disconnect, gone after
the TTL when a viewer's process died without saying so, refused for topics
the user may not see, and bad frames answered with an error."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings

from config.asgi import application
from dashboard import presence
from tests.dashboard import factories
from tests.dashboard.conftest import ws_headers

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quick_presence(settings):
    settings.AGENTDESK_PRESENCE_HEARTBEAT_S = 0.3
    settings.AGENTDESK_PRESENCE_TTL_S = 1.0
    redis.Redis.from_url(django_settings.REDIS_URL).flushdb()


async def _open(headers) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(application, "/ws/presence/", headers=headers)
    connected, code = await communicator.connect(timeout=5)
    assert connected, code
    return communicator


async def _until(communicator, topic: str, test, timeout: float = 5.0) -> list[dict]:
    """The viewers of `topic` from the first presence frame that passes `test`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        message = await communicator.receive_json_from(timeout=max(0.05, deadline - loop.time()))
        if message["type"] == "presence" and topic in message["viewers"]:
            found = message["viewers"][topic]
            if test(found):
                return found


def _names(found: list[dict]) -> list[str]:
    return [v["name"] for v in found]


def test_two_viewers_see_each_other_and_a_closed_tab_is_gone_at_once(alice, bob):
    call = factories.parked_call()
    topic = f"session:{call.session_id}"
    card = f"approval:{call.approval.id}"
    as_alice, as_bob = ws_headers(alice), ws_headers(bob)

    async def scenario():
        a = await _open(as_alice)
        await a.send_json_to({"type": "here", "topics": [topic, card]})
        assert _names(await _until(a, topic, lambda v: len(v) == 1)) == ["alice"]
        b = await _open(as_bob)
        await b.send_json_to({"type": "here", "topics": [], "watch": [card]})  # watches only
        seen = await _until(b, card, lambda v: len(v) == 1)
        assert seen == [{"user": alice.pk, "name": "alice", "tabs": 1, "initials": "AL"}]
        await b.send_json_to({"type": "here", "topics": [card]})  # now on the card
        both = await _until(a, card, lambda v: len(v) == 2)
        assert _names(both) == ["alice", "bob"]
        await b.disconnect()
        assert _names(await _until(a, card, lambda v: len(v) == 1)) == ["alice"]
        await a.disconnect()

    async_to_sync(scenario)()


def test_a_viewer_whose_process_died_drops_out_after_the_ttl(alice):
    call = factories.parked_call()
    topic = f"session:{call.session_id}"
    ghost = presence.Viewer("dead-process-tab", 424242, "Ghost Viewer")
    as_alice = ws_headers(alice)

    async def scenario():
        # Another Daphne wrote this, then died: no disconnect, no announcement.
        await presence.here(ghost, [topic])
        a = await _open(as_alice)

        async def heartbeat():  # what presence.js does: alice stays
            while True:
                await a.send_json_to({"type": "here", "topics": [topic]})
                await asyncio.sleep(0.3)

        beating = asyncio.create_task(heartbeat())
        started = time.monotonic()
        assert _names(await _until(a, topic, lambda v: len(v) == 2)) == ["alice", "Ghost Viewer"]
        assert _names(await _until(a, topic, lambda v: len(v) == 1)) == ["alice"]
        assert time.monotonic() - started < 4.0  # TTL 1 s, re-read every 0.3 s
        beating.cancel()
        await a.disconnect()

    async_to_sync(scenario)()


def test_topics_the_user_may_not_see_are_refused_and_bad_frames_get_an_error(alice, dave):
    call = factories.parked_call()
    as_alice, as_dave = ws_headers(alice), ws_headers(dave)

    async def scenario():
        refused = WebsocketCommunicator(application, "/ws/presence/", headers=as_dave)
        connected, code = await refused.connect(timeout=5)
        assert (connected, code) == (False, 4403)  # no desk role: no presence at all

        a = await _open(as_alice)
        await a.send_json_to({"type": "here", "topics": ["approval:987654321"]})
        error = await a.receive_json_from(timeout=5)
        assert error == {"type": "error", "error": "not allowed: approval:987654321"}
        for bad in (
            {"type": "here", "topics": ["session:1; DROP"]},
            {"type": "here", "topics": "session:1"},
            {"type": "here", "topics": [f"session:{i}" for i in range(1, 30)]},
            {"type": "here", "topics": ["session:0"]},
        ):
            await a.send_json_to(bad)
            answer = await a.receive_json_from(timeout=5)
            assert answer["type"] == "error" and "wrong type or is out of range" in answer["error"]
        # The socket still works after the refusals.
        topic = f"session:{call.session_id}"
        await a.send_json_to({"type": "here", "topics": [topic]})
        assert _names(await _until(a, topic, lambda v: len(v) == 1)) == ["alice"]
        await a.disconnect()

    async_to_sync(scenario)()


def test_initials_and_names_come_from_the_account():
    assert presence.initials("Bob Stone") == "BS"
    assert presence.initials("carol") == "CA"
    assert presence.initials("jean-luc.picard@example.com") == "JL"
    assert presence.initials("") == "?"
