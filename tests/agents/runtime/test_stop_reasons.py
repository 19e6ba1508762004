"""The model's stop reasons: only an answer ends a turn as succeeded.

The sandbox's directives make the first reply of a turn stop at max_tokens
or pause_turn, every reply stop at max_tokens, or every reply be a refusal.
"""

from __future__ import annotations

import pytest

from agents.models import Message
from agents.runtime.memory import GO_ON_PROMPT
from tests.agents.helpers import (
    assert_invariants,
    deliver_ticket,
    model_stops,
    order_ticket,
    wait_turn,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("stop", ["max_tokens", "pause_turn"])
def test_a_reply_cut_short_goes_on_from_where_it_stopped(sandbox, workers, stop):
    workers.start()
    session = deliver_ticket(order_ticket(sandbox, stop))

    turn = wait_turn(session)

    assert turn.status == "succeeded", workers.logs()
    assert model_stops(session)[0] == stop and model_stops(session)[-1] == "end_turn"
    # The next call sent the cut reply back and asked the model to go on, in a
    # user message: the default model (claude-sonnet-5), as every Claude since
    # 4.6, refuses a request that ends with the assistant's message (400).
    requests = sandbox.get("/_model_requests", last=50)["requests"]
    assert {r["model"] for r in requests} == {"claude-sonnet-5"}
    assert all(r["messages"][-1]["role"] == "user" for r in requests)
    continued = [r for r in requests if r["messages"][-1]["content"][0].get("text") == GO_ON_PROMPT]
    assert len(continued) == 1
    assert continued[0]["messages"][-2]["role"] == "assistant"  # the cut reply, sent back
    assert "error_400" not in sandbox.stats()["model_requests"]["by_outcome"]
    assert_invariants(session)


def test_a_reply_cut_at_max_tokens_again_and_again_fails_the_turn(sandbox, workers):
    workers.start()
    session = deliver_ticket(order_ticket(sandbox, "max_tokens_always"))

    turn = wait_turn(session)

    assert turn.status == "failed", workers.logs()
    assert "max_tokens 2 times in a row" in turn.error
    assert model_stops(session) == ["max_tokens", "max_tokens"]  # once cut, once more, then no more
    assert_invariants(session)


def test_a_refusal_fails_the_turn_with_the_models_text(sandbox, workers):
    workers.start()
    session = deliver_ticket(order_ticket(sandbox, "refusal"))

    turn = wait_turn(session)

    assert turn.status == "failed", workers.logs()
    assert turn.error == "The model refused: I can't help with this request."
    reply = Message.objects.filter(session=session, role="assistant").get()
    assert reply.content[0]["text"] == "I can't help with this request."  # shown as it came
    assert_invariants(session)
