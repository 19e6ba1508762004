"""history.json streams: an async iterator that Django's ASGI handler sends
as it is made, in pieces, the document whole when joined."""

from __future__ import annotations

import json
import warnings

import pytest
from asgiref.sync import async_to_sync
from channels.testing import ApplicationCommunicator
from django.http import StreamingHttpResponse
from django.test import Client
from django.utils import timezone

from agents.models import Event, SessionRuntime
from dashboard.views.history import CHUNK_CHARS
from tests.dashboard import factories
from tests.dashboard.conftest import cookie_for

EVENTS = 4000


def _long_session():
    owner = factories.session(title="A long one")
    now = timezone.now()
    Event.objects.bulk_create(
        Event(
            session=owner,
            seq=n,
            kind="tool.finished" if n % 2 else "model.replied",
            data={"name": "lookup_order", "output": f"row {n} " + "x" * 200},
            actor="w1",
            created_at=now,
        )
        for n in range(1, EVENTS + 1)
    )
    SessionRuntime.objects.filter(session=owner).update(last_seq=EVENTS)
    return owner


def _get(path: str, cookie: str) -> tuple[int, dict[bytes, bytes], list[bytes]]:
    """One GET through the project's ASGI application (what Daphne runs);
    the body as the messages the app sent."""
    from config.asgi import application

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"cookie", cookie.encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }

    async def run():
        app = ApplicationCommunicator(application, scope)
        await app.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await app.receive_output(30)
        bodies = []
        while True:
            message = await app.receive_output(30)
            bodies.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await app.wait(5)
        return start["status"], {k.lower(): v for k, v in start["headers"]}, bodies

    return async_to_sync(run)()


@pytest.fixture
def closed_after_each_request(monkeypatch):
    """The ASGI handler runs a request's database work on a thread of its own
    and keeps its connection for CONN_MAX_AGE; the test database is dropped
    at the end, so close it when the request ends (CONN_MAX_AGE 0)."""
    from django.db import connections

    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)


@pytest.mark.django_db(transaction=True)  # seen from the request's own thread
def test_the_export_of_a_long_session_streams_from_an_async_iterator(
    carol, closed_after_each_request
):
    owner = _long_session()
    path = f"/sessions/{owner.id}/history.json"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status, headers, bodies = _get(path, cookie_for(carol))

    assert status == 200, b"".join(bodies)[:2000]
    assert headers[b"content-type"] == b"application/json"
    # Django warns when it has to collect a synchronous iterator first.
    assert not [w for w in caught if "synchronous iterators" in str(w.message)]
    document = json.loads(b"".join(bodies))
    assert [e["seq"] for e in document["events"]] == list(range(1, EVENTS + 1))
    assert document["events"][0]["data"]["output"].startswith("row 1 ")
    assert document["session"]["title"] == "A long one"
    # Sent as it was made: many body messages, none near the whole document.
    total = sum(len(b) for b in bodies)
    assert len(bodies) > 10
    assert max(len(b) for b in bodies) < 4 * CHUNK_CHARS < total


@pytest.mark.django_db(transaction=True)
def test_the_response_is_streaming_with_an_async_iterator_and_keeps_its_filter(carol):
    owner = _long_session()
    client = Client()
    client.force_login(carol)

    response = client.get(f"/sessions/{owner.id}/history.json", {"kind": "model"})

    assert isinstance(response, StreamingHttpResponse)
    assert response.is_async
    chunks = async_to_sync(_collect)(response)
    document = json.loads(b"".join(chunks))
    assert {e["kind"] for e in document["events"]} == {"model.replied"}
    assert len(document["events"]) == EVENTS // 2
    assert document["session"]["event_kinds"] == ["model"]


async def _collect(response) -> list[bytes]:
    return [chunk async for chunk in response.streaming_content]
