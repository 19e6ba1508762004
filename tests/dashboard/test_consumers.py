"""The session consumer against the real ASGI app and Redis channel layer:
replay from a seq, then live events, in order and once each, whatever the
layer loses or repeats."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import transaction

from agents import events
from agents.events import EventSpec, session_group
from agents.models import Event, SessionRuntime
from config.asgi import application
from tests.dashboard import factories
from tests.dashboard.conftest import ws_headers

pytestmark = pytest.mark.django_db(transaction=True)


def _note(session_id: int, n: int) -> None:
    """n events the way the runtime writes them (published after commit)."""
    factories.append(
        session_id,
        *[EventSpec("tool.finished", {"name": f"t{i}", "status": "succeeded"}) for i in range(n)],
    )


def _silent(session_id: int, n: int) -> list[dict]:
    """n events committed but never published: the layer 'lost' them."""
    with transaction.atomic():
        runtime = SessionRuntime.objects.select_for_update().get(pk=session_id)
        rows = []
        for _ in range(n):
            runtime.last_seq += 1
            rows.append(
                Event(
                    session_id=session_id,
                    seq=runtime.last_seq,
                    kind="tool.finished",
                    data={"name": "lost", "status": "succeeded"},
                    created_at=runtime.updated_at,
                )
            )
        Event.objects.bulk_create(rows)
        runtime.save(update_fields=["last_seq"])
    return [events.event_payload(e) for e in rows]


async def _receive_events(communicator, until_seq: int, timeout: float = 10) -> list[int]:
    """Seqs of every event message until `until_seq` is seen."""
    seqs: list[int] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not seqs or seqs[-1] < until_seq:
        message = await communicator.receive_json_from(timeout=max(0.1, deadline - loop.time()))
        if message["type"] == "events":
            seqs += [e["seq"] for e in message["events"]]
            assert message["swaps"][0]["target"] == "session-head"
    return seqs


async def _connect(session_id: int, headers) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        application, f"/ws/sessions/{session_id}/", headers=headers
    )
    connected, code = await communicator.connect(timeout=5)
    assert connected, code
    return communicator


def test_replays_from_the_given_seq_then_goes_live_in_order_once_each(alice):
    call = factories.parked_call()  # events 1..5
    sid = call.session_id
    headers = ws_headers(alice)

    async def scenario():
        ws = await _connect(sid, headers)
        await ws.send_json_to({"type": "hello", "after": 2})
        replayed = await _receive_events(ws, 5)
        stream = await ws.receive_json_from(timeout=5)
        await database_sync_to_async(_note)(sid, 3)  # live: 6, 7, 8
        live = await _receive_events(ws, 8)
        assert await ws.receive_nothing(timeout=0.3)
        await ws.disconnect()
        return replayed, stream, live

    replayed, stream, live = async_to_sync(scenario)()

    assert replayed == [3, 4, 5]
    assert stream["type"] == "stream" and stream["text"] == ""
    assert live == [6, 7, 8]


def test_a_gap_in_what_the_layer_delivers_is_filled_from_postgres(alice):
    call = factories.parked_call()
    sid = call.session_id
    headers = ws_headers(alice)

    async def scenario():
        ws = await _connect(sid, headers)
        await ws.send_json_to({"type": "hello", "after": 5})
        await ws.receive_json_from(timeout=5)  # the stream snapshot
        await database_sync_to_async(_silent)(sid, 2)  # 6, 7: never pushed
        await database_sync_to_async(_note)(sid, 1)  # 8: pushed
        seqs = await _receive_events(ws, 8)
        assert await ws.receive_nothing(timeout=0.3)
        await ws.disconnect()
        return seqs

    assert async_to_sync(scenario)() == [6, 7, 8]


def test_duplicate_and_stale_pushes_are_dropped(alice):
    call = factories.parked_call()
    sid = call.session_id
    headers = ws_headers(alice)

    async def scenario():
        ws = await _connect(sid, headers)
        await ws.send_json_to({"type": "hello", "after": 3})
        first = await _receive_events(ws, 5)
        await ws.receive_json_from(timeout=5)
        layer = get_channel_layer()
        old = await database_sync_to_async(
            lambda: [
                events.event_payload(e) for e in Event.objects.filter(session_id=sid, seq__gte=4)
            ]
        )()
        message = {"type": "session.events", "session_id": sid, "events": old}
        await layer.group_send(session_group(sid), message)  # seq 4, 5 again
        await layer.group_send(session_group(sid), message)
        await database_sync_to_async(_note)(sid, 1)  # then 6, once
        second = await _receive_events(ws, 6)
        assert await ws.receive_nothing(timeout=0.3)
        await ws.disconnect()
        return first + second

    assert async_to_sync(scenario)() == [4, 5, 6]


def test_a_lost_last_event_arrives_on_the_clients_next_sync(alice):
    call = factories.parked_call()
    sid = call.session_id
    headers = ws_headers(alice)

    async def scenario():
        ws = await _connect(sid, headers)
        await ws.send_json_to({"type": "hello", "after": 5})
        await ws.receive_json_from(timeout=5)
        await database_sync_to_async(_silent)(sid, 1)  # 6, the last, lost
        assert await ws.receive_nothing(timeout=0.3)
        await ws.send_json_to({"type": "sync"})
        seqs = await _receive_events(ws, 6)
        await ws.disconnect()
        return seqs

    assert async_to_sync(scenario)() == [6]


def test_pushed_fragments_are_the_pages_partials(alice):
    call = factories.parked_call()
    sid = call.session_id
    headers = ws_headers(alice)

    async def scenario():
        ws = await _connect(sid, headers)
        await ws.send_json_to({"type": "hello", "after": 0})
        message = await ws.receive_json_from(timeout=5)
        await ws.disconnect()
        return message

    message = async_to_sync(scenario)()
    targets = [s["target"] for s in message["swaps"]]
    assert targets[:2] == ["session-head", f"turn-{call.turn_id}"]
    assert targets[2:] == [f"event-{n}" for n in range(1, 6)]
    turn_html = message["swaps"][1]["html"]
    assert (
        f'id="toolcall-{call.id}"' in turn_html and f'id="approval-{call.approval.id}"' in turn_html
    )


def test_the_inbox_socket_adds_new_cards_and_removes_decided_ones(bob, carol):
    from approvals.services import approval_decide

    shown = factories.pending_approval()
    headers = ws_headers(bob)

    async def scenario():
        ws = WebsocketCommunicator(application, "/ws/approvals/", headers=headers)
        assert (await ws.connect(timeout=5))[0]
        await ws.send_json_to({"type": "hello", "shown": [shown.id]})
        assert await ws.receive_nothing(timeout=0.3)  # in step already
        fresh = await database_sync_to_async(factories.pending_approval)()
        added = await ws.receive_json_from(timeout=10)
        await database_sync_to_async(approval_decide)(
            approval_id=shown.id,
            user=carol,
            decision="deny",
            reason="no",
            expected_hash=shown.arguments_hash,
        )
        removed = await ws.receive_json_from(timeout=10)
        await ws.disconnect()
        return fresh, added, removed

    fresh, added, removed = async_to_sync(scenario)()
    assert [c["id"] for c in added["add"]] == [fresh.id]
    assert f'id="approval-{fresh.id}"' in added["add"][0]["html"]
    assert removed["remove"] == [{"id": shown.id, "status": "denied", "by": "carol"}]


def test_viewers_of_one_session_share_one_group_membership_and_each_get_every_event(alice, bob):
    from agents import stream as fanout

    call = factories.parked_call()
    sid = call.session_id
    first_headers, second_headers = ws_headers(alice), ws_headers(bob)

    async def scenario():
        first = await _connect(sid, first_headers)
        second = await _connect(sid, second_headers)
        group = fanout.fanout().groups[session_group(sid)]
        memberships = len(group.inboxes)
        for ws in (first, second):
            await ws.send_json_to({"type": "hello", "after": 5})
            await ws.receive_json_from(timeout=5)
        await database_sync_to_async(_note)(sid, 3)
        seqs = [await _receive_events(ws, 8) for ws in (first, second)]
        await first.disconnect()
        still = session_group(sid) in fanout.fanout().groups
        await second.disconnect()
        left = session_group(sid) in fanout.fanout().groups
        return memberships, seqs, still, left

    memberships, seqs, still, left = async_to_sync(scenario)()
    assert memberships == 2  # two viewers, one membership of the group
    assert seqs == [[6, 7, 8], [6, 7, 8]]
    assert still and not left  # the last viewer to leave leaves the group
