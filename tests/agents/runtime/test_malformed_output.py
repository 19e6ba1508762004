"""Malformed model output becomes an error tool_result the model sees."""

from __future__ import annotations

import pytest

from agents.models import Message, ToolCall
from tests.agents.helpers import assert_invariants, deliver_ticket, wait_turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("directive", "expected"),
    [
        ("bad_json", "not a JSON object"),
        ("unknown_tool", "no tool named 'delete_all_tickets'"),
        ("schema_violation", "does not match the schema"),
        # 1e400 is inf to Python: once a crash-looping step (Postgres refused
        # to store the reply), now an error tool result (issue 27).
        ("huge_number", "a number JSON cannot carry (1e400)"),
    ],
)
def test_malformed_tool_use_is_refused_and_the_turn_goes_on(sandbox, workers, directive, expected):
    workers.start()
    ticket = sandbox.ticket(
        email="bob.okafor@example.net",
        subject="Question",
        body=f"Where is order ORD-1003? [[sandbox:{directive}]]",
        order_id="ORD-1003",
    )
    session = deliver_ticket(ticket)
    turn = wait_turn(session)

    assert turn.status == "succeeded", workers.logs()
    first = ToolCall.objects.filter(session=session).order_by("id").first()
    assert first.status == "failed"
    result = Message.objects.get(session=session, position=first.result_position).content[0]
    assert result["is_error"] is True and expected in result["content"]
    assert sandbox.refunds() == []  # nothing ran on bad input
    assert_invariants(session)
