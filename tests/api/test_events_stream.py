"""The event stream for machines (SSE), against a real Daphne, with a real
worker writing the events."""

from __future__ import annotations

import pytest
import redis
import requests
from django.conf import settings

from agents.events import group_channel, session_group
from agents.models import Event
from api.tokens import token_create
from tests.agents.helpers import deliver_ticket, wait_turn
from tests.api.conftest import sse_frames
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _followers(session_id: int) -> int:
    """Processes subscribed to the session's channel-layer group (Redis pub/sub)."""
    channel = group_channel(session_group(session_id))
    client = redis.Redis.from_url(settings.REDIS_URL)
    return dict(client.pubsub_numsub(channel)).get(channel.encode(), 0)


def _stream(web, token: str, session_id: int, last_id: int | None = None):
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    if last_id is not None:
        headers["Last-Event-ID"] = str(last_id)
    url = f"{web.url}/api/v1/sessions/{session_id}/events"
    response = requests.get(url, headers=headers, stream=True, timeout=(5, 60))
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/event-stream")
    return response


def test_the_stream_resumes_from_last_event_id_with_no_gap_and_no_duplicate(
    sandbox, workers, web, alice
):
    workers.start()
    _, token = token_create(user=alice, name="sse")
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Where is my order?",
        body="Order ORD-1001 has not arrived yet. Where is it? [[sandbox:slow]]",
        order_id="ORD-1001",
    )
    session = deliver_ticket(ticket)

    seen: list[tuple[int, dict]] = []
    first = _stream(web, token, session.id)
    followed = 0
    for seq, event in sse_frames(first):
        seen.append((seq, event))
        if len(seen) == 3:
            followed = _followers(session.id)  # while the stream is open
            break
    first.close()  # the client goes away mid-turn
    assert followed == 1  # Daphne followed the session's group for the stream
    # ...and the stream ends on the server: it leaves the group.
    wait_for(lambda: _followers(session.id) == 0, timeout=15, what="the stream to end")
    last = seen[-1][0]
    # The worker goes on writing while nobody listens.
    wait_for(
        lambda: Event.objects.filter(session=session, seq__gt=last + 2).exists(),
        timeout=60,
        what="events written while disconnected",
    )
    again = _stream(web, token, session.id, last_id=last)
    for seq, event in sse_frames(again):
        seen.append((seq, event))
        if event["kind"] in ("turn.succeeded", "turn.failed"):
            break
    again.close()

    seqs = [seq for seq, _ in seen]
    assert seqs == list(range(1, len(seqs) + 1)), seqs  # no gap, no duplicate
    assert all(seq == event["seq"] for seq, event in seen)
    turn = wait_turn(session, timeout=60)
    stored = list(
        Event.objects.filter(session=session, seq__lte=seqs[-1])
        .order_by("seq")
        .values_list("seq", "kind")
    )
    assert [(seq, e["kind"]) for seq, e in seen] == stored
    assert seen[-1][1]["kind"] == f"turn.{turn.status}"
    assert "Traceback" not in web.proc.log()  # the dropped stream ended cleanly


def test_the_stream_needs_a_token_and_a_visible_session(web, alice, dave):
    url = f"{web.url}/api/v1/sessions/1/events"
    anonymous = requests.get(url, timeout=10)
    assert anonymous.status_code == 401
    assert anonymous.headers["Content-Type"] == "application/problem+json"
    _, token = token_create(user=alice, name="sse")
    missing = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert missing.status_code == 404
    _, nobody = token_create(user=dave, name="sse")
    refused = requests.get(url, headers={"Authorization": f"Bearer {nobody}"}, timeout=10)
    assert refused.status_code == 403
