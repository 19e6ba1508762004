"""A provider's 409 "idempotency key in use" is a refusal, like a 429: the
first request with our key is still running there, this one did nothing. It
is NotSent (retried, whatever the tool's kind), never an unknown outcome that
sends the call to a human (issue 16); sent again once the first is done, it
gets the first one's answer, and the side effect happens once."""

from __future__ import annotations

import threading

import pytest

from agents.tools.base import NotSent, OutcomeUnknown, ToolContext
from capabilities.connectors import ISSUE_REFUND, SEND_REPLY
from tests.processes import wait_for


def _in_flight(sandbox) -> list[str]:
    return sandbox.stats()["idempotency"]["in_flight"]


def _race(sandbox, tool, ctx: ToolContext, args: dict):
    """Run the call once with its key held open at the provider, and once
    more while it is: (the first's output, what the second raised)."""
    first: list = []
    thread = threading.Thread(target=lambda: first.append(tool.run(ctx, args)))
    thread.start()
    try:
        wait_for(lambda: _in_flight(sandbox), timeout=10, what="the first request's key in flight")
        with pytest.raises((NotSent, OutcomeUnknown)) as raised:
            tool.run(ctx, args)
    finally:
        thread.join(15)
    assert first, "the first request did not finish"
    return first[0], raised.value


def test_a_refund_whose_key_is_in_use_is_not_sent(sandbox):
    sandbox.fault(
        target="payments",
        kind="latency",
        phase="in_flight",
        latency_ms=1500,
        match={"path_prefix": "/v1/refunds"},
    )
    ctx = ToolContext("ticket:4090", "ticket:4090:toolu_key_in_use", 1)
    args = {"order_id": "ORD-1001", "amount_cents": 500}

    first, second = _race(sandbox, ISSUE_REFUND, ctx, args)

    assert isinstance(second, NotSent) and "409" in str(second)
    again = ISSUE_REFUND.run(ctx, args)  # the retry: the first one's answer
    assert again.external_id == first.external_id
    assert sandbox.stats()["refunds"]["by_idempotency_key"] == {ctx.idempotency_key: 1}


def test_a_reply_whose_key_is_in_use_is_not_sent(sandbox):
    ticket = sandbox.ticket(email="dana.kowalski@example.com", subject="Late", body="Where is it?")
    sandbox.fault(
        target="helpdesk",
        kind="latency",
        phase="in_flight",
        latency_ms=1500,
        match={"path_prefix": f"/helpdesk/tickets/{ticket['id']}/replies"},
    )
    ctx = ToolContext(f"ticket:{ticket['id']}", f"ticket:{ticket['id']}:toolu_reply", 1)
    replies_before = sandbox.stats()["replies"]

    first, second = _race(sandbox, SEND_REPLY, ctx, {"body": "On its way."})

    assert isinstance(second, NotSent) and "409" in str(second)
    again = SEND_REPLY.run(ctx, {"body": "On its way."})
    assert again.external_id == first.external_id
    assert sandbox.stats()["replies"] == replies_before + 1


def test_another_409_is_still_an_unknown_outcome(sandbox):
    """A 409 that is not about our key in flight says nothing about what
    happened: it stays an unknown outcome."""
    ticket = sandbox.ticket(email="dana.kowalski@example.com", subject="Late", body="Where is it?")
    path = f"/helpdesk/tickets/{ticket['id']}/replies"
    sandbox.fault(target="helpdesk", kind="status", status=409, match={"path_prefix": path})
    ctx = ToolContext(f"ticket:{ticket['id']}", f"ticket:{ticket['id']}:toolu_conflict", 1)

    with pytest.raises(OutcomeUnknown, match="409"):
        SEND_REPLY.run(ctx, {"body": "On its way."})
