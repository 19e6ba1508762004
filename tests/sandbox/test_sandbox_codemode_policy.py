"""The sandbox's model in Code Mode (sandbox/messages/codemode.py): when the
request offers run_code it answers with programs, not one call per lookup."""

from __future__ import annotations

import json

from sandbox.messages.policy import decide
from sandbox.messages.transcript import parse_turn

SYSTEM = (
    "You are a support agent.\n\nCode Mode: ... host functions:\n"
    "- lookup_customer: Look up a customer.\n- lookup_order: Look up an order.\n"
    "- classify_ticket: Set the category.\n- issue_refund: Refund an order.\n"
    "- send_reply: Send a reply.\n"
)
TOOLS = [{"name": "run_code", "input_schema": {"type": "object"}}]


def turn(text: str, *exchanges: tuple[dict, str, bool]):
    messages = [{"role": "user", "content": text}]
    for i, (tool_input, result, is_error) in enumerate(exchanges):
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "run_code", "input": tool_input}
        answer = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": result}
        answer["is_error"] = is_error
        messages += [
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [answer]},
        ]
    return parse_turn({"system": SYSTEM, "tools": TOOLS, "messages": messages})


def test_a_fenced_program_is_run_as_written_then_its_result_is_quoted_to_the_customer():
    code = "x = lookup_order(order_id='ORD-1001')\nx['status']\n"
    text = f"Run this please:\n```python\n{code}```\nThanks"
    first = decide(turn(text))
    assert first.tool_use.name == "run_code" and first.tool_use.input == {"code": code}

    result = json.dumps({"value": "delivered", "stdout": "", "host_calls": 1})
    second = decide(turn(text, (first.tool_use.input, result, False)))
    reply = second.tool_use.input["code"]
    assert reply.startswith("send_reply(body=") and "delivered" in reply

    third = decide(
        turn(text, (first.tool_use.input, result, False), (second.tool_use.input, "{}", False))
    )
    assert third.tool_use is None and "delivered" in third.text

    failed = decide(turn(text, (first.tool_use.input, "Error: ZeroDivisionError", True)))
    assert "The program failed: Error: ZeroDivisionError" in failed.tool_use.input["code"]


def test_a_ticket_with_several_lookups_is_one_program():
    text = "I'm alice.martin@example.com. Please refund my last three orders, they arrived damaged."
    code = decide(turn(text)).tool_use.input["code"]
    assert "lookup_customer(email='alice.martin@example.com')" in code
    assert "[-3:]" in code and "lookup_order(order_id=order_id)" in code
    assert "issue_refund(" in code and "except PermissionError" in code
    compile(code, "program.py", "exec")  # it is Python


def test_without_run_code_the_classic_policy_answers():
    body = {
        "system": SYSTEM,
        "tools": [{"name": "lookup_order"}],
        "messages": [{"role": "user", "content": "Where is ORD-1001?\n```python\n1\n```"}],
    }
    assert decide(parse_turn(body)).tool_use.name == "lookup_order"
