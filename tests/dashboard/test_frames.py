"""Every WebSocket frame is validated (kind, size, schema) and answered with
an error frame; an oversized frame or a flood closes that socket, and other
viewers keep their events."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from agents.events import EventSpec
from config.asgi import application
from dashboard import frames
from tests.dashboard import factories
from tests.dashboard.conftest import ws_headers

pytestmark = pytest.mark.django_db(transaction=True)


async def _open(path: str, headers) -> WebsocketCommunicator:
    ws = WebsocketCommunicator(application, path, headers=headers)
    assert (await ws.connect(timeout=5))[0]
    return ws


async def _error(ws) -> str:
    message = await ws.receive_json_from(timeout=5)
    assert message["type"] == "error", message
    return message["error"]


def test_unexpected_frames_get_an_error_frame_and_the_socket_stays_usable(alice):
    call = factories.parked_call()
    headers = ws_headers(alice)

    async def scenario():
        ws = await _open(f"/ws/sessions/{call.session_id}/", headers)
        errors = []
        for text in ["not json", "[1, 2]", '"hello"', "NaN", "[" * 5000, "{}"]:
            await ws.send_to(text_data=text)
            errors.append(await _error(ws))
        await ws.send_to(bytes_data=b"\x00\x01")
        errors.append(await _error(ws))
        for frame in [
            {"type": "launch_missiles"},
            {"type": "hello", "after": "5"},
            {"type": "hello", "after": -1},
            {"type": "hello", "after": True},
            {"type": "hello", "after": 2**70},
            {"type": "hello", "after": 0, "extra": 1},
            {"type": 7},
        ]:
            await ws.send_json_to(frame)
            errors.append(await _error(ws))
        await ws.send_json_to({"type": "hello", "after": 0})  # still open, still works
        events = await ws.receive_json_from(timeout=5)
        await ws.disconnect()
        return errors, events

    errors, events = async_to_sync(scenario)()
    assert errors[:5] == ["a frame must be a JSON object"] * 5
    assert errors[5] == 'a frame needs a "type"'
    assert errors[6] == "binary frames are not accepted"
    assert errors[7].startswith("unknown action 'launch_missiles'; this socket takes:")
    assert all("hello: after has the wrong type" in e for e in errors[8:12])
    assert "unexpected field 'extra'" in errors[12]
    assert errors[13].startswith("unknown action 'int'")
    assert events["type"] == "events" and events["events"][0]["seq"] == 1


def test_the_inbox_refuses_a_wrong_shown_list(bob):
    headers = ws_headers(bob)

    async def scenario():
        ws = await _open("/ws/approvals/", headers)
        await ws.send_json_to({"type": "hello", "shown": ["1"]})
        first = await _error(ws)
        await ws.send_json_to({"type": "hello", "shown": list(range(1, 2000))})
        second = await _error(ws)
        await ws.disconnect()
        return first, second

    first, second = async_to_sync(scenario)()
    assert "shown has the wrong type" in first and "shown has the wrong type" in second


def test_a_one_mib_frame_and_a_flood_close_the_socket_while_another_viewer_keeps_events(alice, bob):
    call = factories.parked_call()
    sid = call.session_id
    path = f"/ws/sessions/{sid}/"
    big_headers, flood_headers, calm_headers = ws_headers(alice), ws_headers(alice), ws_headers(bob)

    async def scenario():
        calm = await _open(path, calm_headers)
        await calm.send_json_to({"type": "hello", "after": 0})
        await calm.receive_json_from(timeout=5)  # the replay
        big = await _open(path, big_headers)
        await big.send_to(text_data=json.dumps({"type": "sync", "pad": "x" * 2**20}))
        big_error = await _error(big)
        big_close = await big.receive_output(timeout=5)
        flood = await _open(path, flood_headers)
        for _ in range(frames.FRAME_BURST * 3):
            await flood.send_json_to({"type": "sync"})
        flood_out = []
        while True:
            out = await flood.receive_output(timeout=5)
            flood_out.append(out)
            if out["type"] == "websocket.close":
                break
        await database_sync_to_async(factories.append)(
            sid, EventSpec("tool.finished", {"name": "after", "status": "succeeded"})
        )
        live = await calm.receive_json_from(timeout=10)
        while live["type"] != "events" or live["events"][-1]["data"].get("name") != "after":
            live = await calm.receive_json_from(timeout=10)  # the hello's stream snapshot
        await calm.disconnect()
        return big_error, big_close, flood_out, live

    big_error, big_close, flood_out, live = async_to_sync(scenario)()
    assert big_error.startswith("frame over") and big_close["code"] == 4009
    assert flood_out[-1] == {"type": "websocket.close", "code": 4008}
    errors = [json.loads(o["text"])["error"] for o in flood_out if o.get("text")]
    assert "too many frames: this socket is closed" in errors
    assert live["type"] == "events" and live["events"][-1]["data"]["name"] == "after"


def test_the_bucket_refills_at_its_rate():
    bucket = frames.Bucket(rate=1.0, burst=2)
    assert bucket.take() and bucket.take()
    assert not bucket.take()  # empty: a third frame at once is refused
    bucket.at -= 1.0  # a second passes: one token back
    assert bucket.take() and not bucket.take()
