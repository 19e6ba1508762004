"""Transport is not state: a viewer who goes away cancels nothing."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from agents.models import Turn
from agents.runtime import live
from config.asgi import application
from tests.agents.helpers import assert_invariants, deliver_ticket, kinds, wait_turn
from tests.dashboard.conftest import ws_headers
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_closing_the_tab_mid_stream_does_not_cancel_the_turn(sandbox, workers, alice):
    workers.start()
    ticket = sandbox.ticket(
        email="bob.okafor@example.net",
        subject="Where is my order",
        body="Where is order ORD-1003? [[sandbox:slow]]",
        order_id="ORD-1003",
    )
    session = deliver_ticket(ticket)
    turn = Turn.objects.get(session=session)

    headers = ws_headers(alice)

    async def watch_then_leave() -> None:
        communicator = WebsocketCommunicator(
            application, f"/ws/sessions/{session.id}/", headers=headers
        )
        connected, _ = await communicator.connect()
        assert connected
        await communicator.send_json_to({"type": "hello", "after": 0})
        await communicator.receive_json_from(timeout=10)  # it is live
        await communicator.disconnect()  # the tab closes mid-stream

    wait_for(lambda: live.partial_text(session.id, turn.id), what="model text streaming")
    async_to_sync(watch_then_leave)()

    turn = wait_turn(session, timeout=60)
    assert turn.status == "succeeded", workers.logs()
    assert "turn.cancel_requested" not in kinds(session)
    assert_invariants(session)
