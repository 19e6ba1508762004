"""The "triage loop" workload (v1) of ../shared/bench/workload.md, written for Agentdesk.

Deterministic content for one benchmark run: the ticket that starts it, the
fake model's reply at each step, the fake tools' results. Pure Python, no
Django, no I/O, so the harness, the worker plug-in and the test that checks
these bytes against the shared reference can all import it.

What the page fixes and this module follows: a 600-character ticket, a
200-character text before each tool_use and a 400-character final answer,
tools in the order lookup_customer / lookup_order / issue_refund, 300-char
JSON tool results, the usage formula, and refunds deduplicated on the
idempotency key `run_id:tool_use_id`. What the page leaves out (the word
list, how each piece is seeded, the order of random draws, the layout of
each tool result) has to agree with workload.py byte for byte, so it was
taken from there and is checked by tests/bench/test_workload.py.
"""

from __future__ import annotations

import json
import random
from typing import Any

TOOL_NAMES = ("lookup_customer", "lookup_order", "issue_refund")
TICKET_CHARS = 600
TEXT_CHARS = 200  # assistant text before each tool_use
FINAL_CHARS = 400  # the final answer at step S
RESULT_CHARS = 300  # every tool result, a JSON string

VOCABULARY = tuple(
    """
    account access after again agent amount annual apologize app approve
    billing bank card case charge charged checked confirm contact credit
    customer date days declined delay delivery details device double due
    duplicate email error expected failed fee follow help history invoice
    issue item last late link login missing month monthly needs note
    notice online order paid password payment pending plan please policy
    premium previous price processed product purchase receipt recent
    refund renewal reply request return review sent service shipment
    shipping since status still subscription support team thanks ticket
    today total tracking transaction trial twice update upgrade urgent
    verify waiting warehouse week wrong yesterday
    """.split()
)
assert len(VOCABULARY) == 102


def seeded(*parts: object) -> random.Random:
    """A generator seeded by a string: the same in every process (no hash seed)."""
    return random.Random(":".join(map(str, parts)))


def salad(rng: random.Random, length: int) -> str:
    """Exactly `length` characters of words; a trailing space becomes a full stop."""
    picked: list[str] = []
    total = 0
    while total < length:
        word = rng.choice(VOCABULARY)
        picked.append(word)
        total += len(word) + 1
    text = " ".join(picked)[:length]
    if text.endswith(" "):
        text = text[:-1] + "."
    return text


def run_id(max_steps: int, run_index: int) -> str:
    """The harness's run id, which is also the Agentdesk session key."""
    return f"run-{max_steps}-{run_index:06d}"


def customer_email(run_index: int) -> str:
    return f"customer{run_index:06d}@example.com"


def ticket(run_index: int) -> str:
    opening = f"Ticket #{run_index:06d} from {customer_email(run_index)}: "
    return opening + salad(seeded(run_index, "ticket"), TICKET_CHARS - len(opening))


def tool_for_step(step: int) -> str:
    return TOOL_NAMES[(step - 1) % 3]


def _order_id(run_index: int, step: int) -> str:
    # Each lookup_customer / lookup_order / issue_refund triple is about one
    # order, numbered after the triple's first step, plus one.
    first_of_triple = step - (step - 1) % 3
    return f"ORD-{run_index:06d}-{first_of_triple + 1:03d}"


def fake_model(run_index: int, step: int, max_steps: int) -> dict[str, Any]:
    """The assistant message of `step` (1-based) in a run of `max_steps` steps."""
    rng = seeded(run_index, step, "model")
    final = step >= max_steps
    usage = {"input_tokens": 400 + 150 * (step - 1), "output_tokens": 120 if final else 80}
    if final:
        text = {"type": "text", "text": salad(rng, FINAL_CHARS)}
        return {"role": "assistant", "stop_reason": "end_turn", "usage": usage, "content": [text]}
    name = tool_for_step(step)
    if name == "lookup_customer":
        arguments: dict[str, Any] = {"email": customer_email(run_index)}
    elif name == "lookup_order":
        arguments = {"order_id": _order_id(run_index, step)}
    else:  # the refund draws its amount before the id
        arguments = {
            "order_id": _order_id(run_index, step),
            "amount_cents": rng.randint(500, 50_000),
        }
    tool_use_id = f"toolu_{rng.getrandbits(96):024x}"
    content = [
        {"type": "text", "text": salad(rng, TEXT_CHARS)},
        {"type": "tool_use", "id": tool_use_id, "name": name, "input": arguments},
    ]
    return {"role": "assistant", "stop_reason": "tool_use", "usage": usage, "content": content}


def tool_use_of(message: dict[str, Any]) -> dict[str, Any] | None:
    return next((b for b in message["content"] if b["type"] == "tool_use"), None)


def tool_result_message(tool_use_id: str, result: str) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": result}
    return {"role": "user", "content": [block]}


def _lookup_customer(rng: random.Random, arguments: dict[str, Any], key: str) -> dict[str, Any]:
    body = {"customer_id": f"cus_{rng.getrandbits(48):012x}"}
    body.update(arguments)
    body["plan"] = rng.choice(["free", "pro", "team"])
    year, month = rng.randint(15, 24), rng.randint(1, 12)
    body["since"] = f"20{year}-{month:02d}-01"
    return body


def _lookup_order(rng: random.Random, arguments: dict[str, Any], key: str) -> dict[str, Any]:
    body = dict(arguments)
    body["status"] = rng.choice(["shipped", "delivered", "lost"])
    body["total_cents"] = rng.randint(500, 90_000)
    body["currency"] = "USD"
    return body


def _issue_refund(rng: random.Random, arguments: dict[str, Any], key: str) -> dict[str, Any]:
    body = dict(arguments)
    body["refund_id"] = f"re_{rng.getrandbits(48):012x}"
    body["status"] = "succeeded"
    body["idempotency_key"] = key
    return body


_BODIES = {
    "lookup_customer": _lookup_customer,
    "lookup_order": _lookup_order,
    "issue_refund": _issue_refund,
}


class FakeTools:
    """The three tools; `issue_refund` plays a payment API that dedups on the key.

    `executions[key]` counts the refunds really executed under each key: a
    harness checks that every key ran exactly once.
    """

    def __init__(self) -> None:
        self.ledger: dict[str, str] = {}
        self.executions: dict[str, int] = {}

    def __call__(self, name: str, args: dict, tool_use_id: str, idempotency_key: str) -> str:
        refund = name == "issue_refund"
        if refund and idempotency_key in self.ledger:
            return self.ledger[idempotency_key]  # the provider replays its first answer
        if name not in _BODIES:
            raise ValueError(f"unknown tool {name!r}")
        rng = seeded(name, json.dumps(args, sort_keys=True), tool_use_id)
        body = _BODIES[name](rng, args, idempotency_key)
        body["notes"] = ""
        room = RESULT_CHARS - len(json.dumps(body))
        body["notes"] = salad(rng, room) if room > 0 else ""
        result = json.dumps(body)
        if refund:
            self.ledger[idempotency_key] = result
            self.executions[idempotency_key] = self.executions.get(idempotency_key, 0) + 1
        return result


def expected_result(max_steps: int) -> dict[str, int]:
    steps = range(1, max_steps + 1)
    return {
        "messages": 2 * max_steps,
        "step": max_steps,
        "input_tokens": sum(400 + 150 * (k - 1) for k in steps),
        "output_tokens": 80 * (max_steps - 1) + 120,
    }


def expected_refunds(max_steps: int) -> int:
    return sum(tool_for_step(k) == "issue_refund" for k in range(1, max_steps))


def run_in_memory(run_index: int, max_steps: int, tools: FakeTools | None = None) -> list[dict]:
    """The whole message list of one run, following the loop of §3 with no storage."""
    tools = tools if tools is not None else FakeTools()
    rid = run_id(max_steps, run_index)
    messages: list[dict[str, Any]] = [{"role": "user", "content": ticket(run_index)}]
    for step in range(1, max_steps + 1):
        reply = fake_model(run_index, step, max_steps)
        messages.append(reply)
        use = tool_use_of(reply)
        if use is not None:
            key = f"{rid}:{use['id']}"
            result = tools(use["name"], use["input"], use["id"], key)
            messages.append(tool_result_message(use["id"], result))
    return messages
