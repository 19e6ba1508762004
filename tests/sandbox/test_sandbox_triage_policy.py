"""The triage policy end to end: a tiny agent loop runs the model's tool calls
against the sandbox's own helpdesk and payments APIs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import anthropic
import pytest
import stripe

MODEL = "claude-sandbox"


@dataclass
class Run:
    messages: list[dict[str, Any]]
    calls: list[tuple[str, Any, bool]] = field(default_factory=list)  # name, input, is_error
    final_text: str = ""

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def input_of(self, name: str) -> Any:
        return next(args for n, args, _ in self.calls if n == name)


class Tools:
    """Executes triage tools against the sandbox, as Agentdesk's connectors would."""

    def __init__(self, sandbox, ticket_id: int, deny_refunds: str | None = None) -> None:
        self.sandbox = sandbox
        self.ticket_id = ticket_id
        self.deny_refunds = deny_refunds
        self.stripe = stripe.StripeClient(
            "sk_test_sandbox", base_addresses={"api": sandbox.url}, max_network_retries=0
        )

    def run(self, name: str, args: Any, tool_use_id: str) -> tuple[str, bool]:
        if not isinstance(args, dict):
            return "Tool input was not a JSON object.", True
        handler: Callable[[dict[str, Any], str], tuple[str, bool]] | None = getattr(
            self, f"_{name}", None
        )
        if handler is None:
            return f"Unknown tool: {name}", True
        return handler(args, f"ticket:{self.ticket_id}:{tool_use_id}")

    def _answer(self, reply) -> tuple[str, bool]:
        return reply.text, reply.status >= 400

    def _lookup_customer(self, args, key):
        return self._answer(self.sandbox.get(f"/helpdesk/customers?email={quote(args['email'])}"))

    def _lookup_order(self, args, key):
        return self._answer(self.sandbox.get(f"/helpdesk/orders/{args['order_id']}"))

    def _classify_ticket(self, args, key):
        return self._answer(
            self.sandbox.post(f"/helpdesk/tickets/{self.ticket_id}/classification", args)
        )

    def _send_reply(self, args, key):
        return self._answer(
            self.sandbox.post(
                f"/helpdesk/tickets/{self.ticket_id}/replies",
                args,
                headers={"Idempotency-Key": key},
            )
        )

    def _add_internal_note(self, args, key):
        return self._answer(
            self.sandbox.post(
                f"/helpdesk/tickets/{self.ticket_id}/notes", args, headers={"Idempotency-Key": key}
            )
        )

    def _escalate_to_human(self, args, key):
        return self._answer(
            self.sandbox.post(f"/helpdesk/tickets/{self.ticket_id}/escalations", args)
        )

    def _issue_refund(self, args, key):
        if not isinstance(args.get("amount_cents"), int):
            return "amount_cents must be an integer", True
        if self.deny_refunds:
            return f"Denied by approver: {self.deny_refunds}", True
        order = self.sandbox.get(f"/helpdesk/orders/{args['order_id']}").json()
        params = {
            "payment_intent": order["payment_intent"],
            "amount": args["amount_cents"],
            "reason": args["reason"],
            "metadata": {"order_id": order["id"]},
        }
        try:
            refund = self.stripe.v1.refunds.create(params=params, options={"idempotency_key": key})
        except stripe.StripeError as exc:
            return str(exc.user_message), True
        return json.dumps(refund.to_dict()), False


def _block(block: Any) -> dict[str, Any]:
    if block.type == "text":
        return {"type": "text", "text": block.text}
    # A non-object input (bad_json) cannot go back into the transcript as-is.
    tool_input = block.input if isinstance(block.input, dict) else {}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input}


def _ask(client: anthropic.Anthropic, tools_spec, messages, stream: bool):
    request = {"model": MODEL, "max_tokens": 2048, "tools": tools_spec, "messages": messages}
    if not stream:
        return client.messages.create(**request)
    with client.messages.stream(**request) as live:
        return live.get_final_message()


def run_turn(
    client: anthropic.Anthropic,
    tools_spec,
    tools: Tools,
    text: str,
    *,
    history=None,
    max_steps: int = 12,
    stream: bool = False,
) -> Run:
    run = Run(messages=[*(history or []), {"role": "user", "content": text}])
    for _ in range(max_steps):
        message = _ask(client, tools_spec, run.messages, stream)
        content = [_block(b) for b in message.content]
        if message.stop_reason == "end_turn":
            run.messages.append({"role": "assistant", "content": content})
            run.final_text = message.content[0].text
            return run
        use = message.content[-1]
        output, is_error = tools.run(use.name, use.input, use.id)
        run.calls.append((use.name, use.input, is_error))
        run.messages.append({"role": "assistant", "content": content})
        result = {
            "type": "tool_result",
            "tool_use_id": use.id,
            "content": output,
            "is_error": is_error,
        }
        run.messages.append({"role": "user", "content": [result]})
    raise AssertionError(f"no end_turn after {max_steps} steps: {run.names()}")


def _ticket_text(ticket: dict[str, Any]) -> str:
    return f"From: {ticket['customer_email']}\nSubject: {ticket['subject']}\n\n{ticket['body']}"


@pytest.fixture
def turn(sandbox, anthropic_client, triage_tools):
    def go(
        body: str,
        *,
        deny_refunds: str | None = None,
        email: str = "alice.martin@example.com",
        stream: bool = False,
    ):
        ticket = sandbox.ticket(body, email=email, subject="Help")
        tools = Tools(sandbox, ticket["id"], deny_refunds)
        return ticket, run_turn(
            anthropic_client, triage_tools, tools, _ticket_text(ticket), stream=stream
        )

    return go


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_refund_request_is_looked_up_classified_refunded_and_answered(sandbox, turn, stream):
    ticket, run = turn(
        "Please refund $20 of order ORD-1001, one mug arrived broken.", stream=stream
    )
    assert run.names() == [
        "lookup_customer",
        "lookup_order",
        "classify_ticket",
        "issue_refund",
        "send_reply",
    ]
    assert run.input_of("classify_ticket") == {"category": "billing", "priority": "normal"}
    assert run.input_of("issue_refund") == {
        "order_id": "ORD-1001",
        "amount_cents": 2000,
        "reason": "requested_by_customer",
    }
    refund_id = sandbox.get("/_refunds").json()["refunds"][0]["id"]
    reply_body = run.input_of("send_reply")["body"]
    assert reply_body.startswith("Hi Alice,") and refund_id in reply_body and "$20.00" in reply_body
    assert refund_id in run.final_text
    detail = sandbox.get(f"/helpdesk/tickets/{ticket['id']}").json()
    assert (detail["category"], len(detail["replies"])) == ("billing", 1)
    assert sandbox.stats()["refunds"]["total"] == 1


def test_refund_without_an_amount_refunds_what_is_left(sandbox, turn, stripe_client):
    stripe_client.v1.refunds.create(params={"payment_intent": "pi_ORD1002", "amount": 9000})
    _, run = turn("I was charged twice for ORD-1002. I want my money back!!")
    assert run.input_of("issue_refund")["amount_cents"] == 18900 - 9000
    assert run.input_of("classify_ticket") == {"category": "billing", "priority": "high"}


def test_denied_refund_is_explained_with_the_approvers_reason(sandbox, turn):
    _, run = turn(
        "Refund ORD-1005 asap please",
        email="charlie.nguyen@example.org",
        deny_refunds="over the $500 limit",
    )
    assert run.names()[-2:] == ["issue_refund", "send_reply"]
    assert run.input_of("classify_ticket")["priority"] == "urgent"
    body = run.input_of("send_reply")["body"]
    assert "couldn't issue a refund for order ORD-1005" in body and "over the $500 limit" in body
    assert "refund denied" in run.final_text
    assert sandbox.stats()["refunds"]["total"] == 0


def test_refund_larger_than_the_order_fails_and_the_reply_says_so(sandbox, turn):
    _, run = turn("Please refund $500 for ORD-1003.", email="bob.okafor@example.net")
    assert (
        "issue_refund",
        {"order_id": "ORD-1003", "amount_cents": 50000, "reason": "requested_by_customer"},
        True,
    ) in run.calls
    assert "greater than unrefunded amount" in run.input_of("send_reply")["body"]


def test_manager_request_is_escalated_before_the_reply(sandbox, turn):
    ticket, run = turn("My package for ORD-1002 never arrived. I want to speak to a manager.")
    assert run.names() == [
        "lookup_customer",
        "lookup_order",
        "classify_ticket",
        "escalate_to_human",
        "send_reply",
    ]
    assert run.input_of("classify_ticket")["category"] == "shipping"
    assert "senior member of our team" in run.input_of("send_reply")["body"]
    assert sandbox.get(f"/helpdesk/tickets/{ticket['id']}").json()["status"] == "escalated"


def test_internal_note_when_asked(turn):
    _, run = turn("Login keeps failing with an error. Please add an internal note for the team.")
    assert run.names() == ["lookup_customer", "classify_ticket", "add_internal_note", "send_reply"]
    assert run.input_of("classify_ticket")["category"] == "account"


def test_failed_lookup_is_mentioned_and_the_turn_moves_on(sandbox, turn):
    _, run = turn("Where is ORD-9999?")
    assert ("lookup_order", {"order_id": "ORD-9999"}, True) in run.calls
    assert run.names()[-1] == "send_reply"
    assert "lookup_order failed" in run.final_text


def test_only_offered_tools_are_used(sandbox, anthropic_client):
    tools = [{"name": "send_reply", "description": "", "input_schema": {"type": "object"}}]
    ticket = sandbox.ticket("Refund ORD-1001 please")
    run = run_turn(anthropic_client, tools, Tools(sandbox, ticket["id"]), _ticket_text(ticket))
    assert run.names() == ["send_reply"]


def test_a_new_turn_starts_from_the_last_user_text(sandbox, turn, anthropic_client, triage_tools):
    ticket, first = turn("Where is ORD-1002?")
    tools = Tools(sandbox, ticket["id"])
    second = run_turn(
        anthropic_client,
        triage_tools,
        tools,
        "Staff: thanks, nothing else to do.",
        history=first.messages,
    )
    assert second.names() == ["classify_ticket", "send_reply"]


def test_the_turn_ends_after_at_most_eight_tool_calls(anthropic_client, triage_tools):
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": "alice.martin@example.com ORD-1001 refund please [[sandbox:unknown_tool]]",
        }
    ]
    for i in range(8):
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "lookup_order", "input": {}}
        messages += [
            {"role": "assistant", "content": [use]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{i}",
                        "content": "boom",
                        "is_error": True,
                    }
                ],
            },
        ]
    message = anthropic_client.messages.create(
        model=MODEL, max_tokens=100, tools=triage_tools, messages=messages
    )
    assert (
        message.stop_reason == "end_turn"
        and "maximum number of tool calls" in message.content[0].text
    )


# Test directives: a bad first response, then the turn recovers.


def test_bad_json_directive_breaks_the_streamed_tool_input(anthropic_client, triage_tools):
    messages = [
        {"role": "user", "content": "alice.martin@example.com needs help [[sandbox:bad_json]]"}
    ]
    raw = "".join(
        e.delta.partial_json
        for e in anthropic_client.messages.create(
            model=MODEL, max_tokens=100, tools=triage_tools, messages=messages, stream=True
        )
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    # The SDK's stream helper refuses the broken JSON outright.
    with pytest.raises(ValueError, match="Unable to parse tool parameter JSON"):
        with anthropic_client.messages.stream(
            model=MODEL, max_tokens=100, tools=triage_tools, messages=messages
        ) as stream:
            stream.until_done()


def test_bad_json_directive_then_recovery(sandbox, turn):
    _, run = turn("Refund ORD-1001 please [[sandbox:bad_json]]")
    name, args, is_error = run.calls[0]
    assert name == "lookup_customer" and isinstance(args, str) and is_error
    assert run.names()[1:] == [
        "lookup_customer",
        "lookup_order",
        "classify_ticket",
        "issue_refund",
        "send_reply",
    ]


def test_unknown_tool_directive_then_recovery(turn):
    _, run = turn("Where is ORD-1002? [[sandbox:unknown_tool]]")
    assert run.calls[0] == ("delete_all_tickets", {"confirm": True}, True)
    assert run.names()[1:] == ["lookup_customer", "lookup_order", "classify_ticket", "send_reply"]


def test_schema_violation_directive_then_recovery(sandbox, turn):
    _, run = turn("Refund ORD-1001 please [[sandbox:schema_violation]]")
    assert run.calls[0] == (
        "issue_refund",
        {"order_id": "ORD-1001", "amount_cents": "lots", "reason": "requested_by_customer"},
        True,
    )
    assert run.names()[-2:] == ["issue_refund", "send_reply"]
    assert sandbox.stats()["refunds"]["total"] == 1


def test_slow_directive_streams_text_in_many_paced_chunks(anthropic_client, triage_tools):
    messages = [{"role": "user", "content": "alice.martin@example.com hi [[sandbox:slow]]"}]
    stamps = []
    with anthropic_client.messages.stream(
        model=MODEL, max_tokens=100, tools=triage_tools, messages=messages
    ) as stream:
        for _ in stream.text_stream:
            stamps.append(time.monotonic())
    assert len(stamps) >= 20
    assert stamps[-1] - stamps[0] >= 19 * 0.15 * 0.9


def test_slow_stream_can_be_cancelled_mid_way(sandbox, anthropic_client, triage_tools, wait):
    messages = [{"role": "user", "content": "alice.martin@example.com hi [[sandbox:slow]]"}]
    with anthropic_client.messages.stream(
        model=MODEL, max_tokens=100, tools=triage_tools, messages=messages
    ) as stream:
        next(iter(stream.text_stream))
    wait(
        lambda: sandbox.stats()["model_requests"]["by_outcome"].get("stream_aborted") == 1,
        what="the abort to be seen",
    )


def test_long_text_directive_gives_a_long_final_text(anthropic_client):
    message = anthropic_client.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": "hi [[sandbox:long_text]]"}],
    )
    assert message.stop_reason == "end_turn" and 2900 <= len(message.content[0].text) <= 3300
