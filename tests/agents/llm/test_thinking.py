"""A model that thinks (Claude Sonnet 5 does by default) streams a thinking
block, then a signature over it; the next request of the turn must send the
block back unchanged, or the API refuses it. The sandbox's
[[sandbox:thinking]] replies that way and checks the signature as the API does
(sandbox/messages/thinking.py)."""

from __future__ import annotations

from html import escape

import pytest
from django.test import Client

from agents.models import Message
from tests.agents.helpers import (
    assert_invariants,
    deliver_ticket,
    model_stops,
    order_ticket,
    wait_turn,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _turn_of(sandbox, workers, directive: str):
    """A ticket whose model replies as `directive` says, run to its end."""
    workers.start()
    session = deliver_ticket(order_ticket(sandbox, directive))
    turn = wait_turn(session)
    assert turn.status == "succeeded", (turn.error, workers.logs())
    # Each thinking block was sent back whole (the sandbox refuses an altered,
    # unsigned or empty one, and a request ending on the assistant: 400).
    assert "error_400" not in sandbox.stats()["model_requests"]["by_outcome"]
    assert_invariants(session)
    return session


def test_a_turn_of_a_thinking_model_keeps_each_thinking_block_whole(sandbox, workers, carol):
    session = _turn_of(sandbox, workers, "thinking")

    replies = Message.objects.filter(session=session, role="assistant").order_by("position")
    thoughts = [b for row in replies for b in row.content if b["type"] == "thinking"]
    assert len(thoughts) == len(replies) >= 3  # one per reply, tool calls between
    assert all(b["thinking"] and b["signature"] for b in thoughts)
    # The desk shows what the model said, not what it thought.
    client = Client()
    client.force_login(carol)
    page = client.get(f"/sessions/{session.id}/").content.decode()
    said = [b["text"] for row in replies for b in row.content if b["type"] == "text" and b["text"]]
    assert said and all(escape(text.split("\n")[0][:40]) in page for text in said)
    assert escape(thoughts[0]["thinking"][:40]) not in page


def test_a_reply_cut_while_thinking_goes_on_without_the_unsigned_block(sandbox, workers):
    """Cut at max_tokens before its signature came, a thinking block cannot be
    sent back (the API refuses it): it is not kept, and the turn goes on."""
    session = _turn_of(sandbox, workers, "thinking_cut")

    stops = model_stops(session)
    assert stops[0] == "max_tokens" and stops[-1] == "end_turn"
    cut = Message.objects.filter(session=session, role="assistant").order_by("position").first()
    assert cut.content == []  # the unsigned thinking was all the cut reply held
