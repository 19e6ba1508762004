"""The triage policy in Code Mode: when the request offers `run_code`.

The model then writes programs instead of making one call per lookup:

- a ticket whose text holds a fenced ```python block is answered with a
  run_code call of exactly that code (tests and demos drive any program this
  way), then with a reply to the customer that quotes the program's value or
  its error (a second program calling send_reply, when the system prompt
  lists it), then a final text;
- any other ticket gets one program that does the lookups and actions the
  classic policy would do one call at a time: the customer, every order the
  ticket names (or the customer's last orders when it names none and asks
  about "my last N orders"), the classification, a refund of what is left
  on each order when a refund is asked for; then the reply, then the text.

The host functions offered are read from the system prompt's listing
(`- name: what it does`), as a model would.
"""

from __future__ import annotations

import json
import re

from sandbox.messages.rules import EMAIL_RE, ORDER_RE, REFUND_RE, classify
from sandbox.messages.transcript import ToolCall, Turn

FENCE_RE = re.compile(r"```python[ \t]*\n(.*?)```", re.S)
LISTED_RE = re.compile(r"^- ([A-Za-z_][A-Za-z0-9_]*): ", re.M)
LAST_N_RE = re.compile(r"last (\d|two|three|four|five) orders", re.I)
WORDS = {"two": 2, "three": 3, "four": 4, "five": 5}
QUOTE_CHARS = 1500


def decide(turn: Turn):
    from sandbox.messages.policy import Reply, ToolUse

    if not turn.offers("run_code"):
        return None
    runs = [c for c in turn.calls if c.name == "run_code"]
    listed = set(LISTED_RE.findall(turn.system))
    if not runs:
        fenced = FENCE_RE.search(turn.text)
        code = fenced.group(1) if fenced else _program(turn, listed)
        text = "I'll run the program from the ticket." if fenced else "I'll do this in one program."
        return Reply(text, ToolUse("run_code", {"code": code}))
    first = runs[0]
    if len(runs) == 1 and "send_reply" in listed:
        body = _quote(first)
        return Reply(
            "I'll send the customer the result.",
            ToolUse("run_code", {"code": f"send_reply(body={json.dumps(body)})"}),
        )
    return Reply(f"Finished. {_quote(first)}")


def _quote(call: ToolCall) -> str:
    result = (call.result or "").strip()
    if call.is_error:
        return f"The program failed: {result[:QUOTE_CHARS]}"
    try:
        value = json.loads(result).get("value")
    except (ValueError, AttributeError):
        value = result
    return f"The program's result: {json.dumps(value)[:QUOTE_CHARS]}"


def _program(turn: Turn, listed: set[str]) -> str:
    """The lookups and actions of the classic policy, as one program."""
    lines: list[str] = ["result = {}"]
    email = _first(EMAIL_RE, turn)
    orders = list(dict.fromkeys(ORDER_RE.findall(turn.text) or ORDER_RE.findall(turn.system)))
    last = LAST_N_RE.search(turn.text)
    if email and "lookup_customer" in listed:
        lines += [
            f"customer = lookup_customer(email={email!r})",
            "result['customer'] = customer.get('name')",
        ]
        if not orders and last:
            count = WORDS.get(last.group(1).lower()) or int(last.group(1))
            lines.append(f"order_ids = [o['id'] for o in customer.get('orders', [])][-{count}:]")
    if orders or "order_ids = " not in "\n".join(lines):
        lines.append(f"order_ids = {orders!r}")
    if "lookup_order" in listed:
        lines += [
            "orders = {}",
            "for order_id in order_ids:",
            "    orders[order_id] = lookup_order(order_id=order_id)",
            "result['orders'] = {k: v.get('status') for k, v in orders.items()}",
        ]
    if "classify_ticket" in listed:
        category, priority = classify(turn.text)
        lines += [
            "try:",
            f"    classify_ticket(category={category!r}, priority={priority!r})",
            "except RuntimeError as failed:",
            "    result['classify'] = str(failed)",
        ]
    if REFUND_RE.search(turn.text) and {"issue_refund", "lookup_order"} <= listed:
        lines += [
            "refunds = []",
            "for order_id, order in orders.items():",
            "    left = order['total_cents'] - (order.get('refunded_cents') or 0)",
            "    if left > 0:",
            "        try:",
            "            refund = issue_refund(order_id=order_id, amount_cents=left,"
            " reason='requested_by_customer')",
            "            refunds.append(refund.get('refund_id'))",
            "        except PermissionError as denied:",
            "            refunds.append(f'not refunded: {denied}')",
            "result['refunds'] = refunds",
        ]
    lines.append("result")
    return "\n".join(lines) + "\n"


def _first(pattern: re.Pattern[str], turn: Turn) -> str | None:
    match = pattern.search(turn.text) or pattern.search(turn.system)
    return match.group(0) if match else None
