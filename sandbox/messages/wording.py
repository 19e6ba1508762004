"""The words the triage policy says: step preambles, customer replies, summaries."""

from __future__ import annotations

import re

from sandbox.messages.rules import classify
from sandbox.messages.transcript import Progress, ToolCall, Turn

REFUND_ID_RE = re.compile(r"\bre_[A-Za-z0-9]+")
SIGN_OFF = "\n\nBest regards,\nAgentdesk Support"


def money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def _snippet(text: str | None, limit: int = 200) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def after_failure(last: ToolCall | None) -> str:
    """A sentence acknowledging that the previous tool call failed, or ''."""
    if last is None or not last.is_error:
        return ""
    if last.name == "issue_refund":
        return f"The refund did not go through: {_snippet(last.result)}. "
    return f"The {last.name} call failed ({_snippet(last.result)}), so I'll continue without it. "


def _first_name(progress: Progress) -> str | None:
    customer = progress.json("lookup_customer") or {}
    name = str(customer.get("name") or "").strip()
    return name.split()[0] if name else None


def refund_id(call: ToolCall) -> str | None:
    data = call.result_json() or {}
    if isinstance(data.get("id"), str) and data["id"].startswith("re_"):
        return data["id"]
    match = REFUND_ID_RE.search(call.result or "")
    return match.group(0) if match else None


def _refund_sentence(progress: Progress, wants_refund: bool) -> str | None:
    call = progress.last("issue_refund")
    order = progress.order()
    if call is not None and call.is_error:
        order_id = (call.input or {}).get("order_id") if isinstance(call.input, dict) else None
        return f"I'm sorry, but we couldn't issue a refund for order {order_id or 'your order'}: {_snippet(call.result)}"
    if call is not None:
        amount = call.input.get("amount_cents") if isinstance(call.input, dict) else None
        amount_text = money(amount) if isinstance(amount, int) else "the amount"
        return (
            f"I've issued a refund of {amount_text} for order {call.input.get('order_id')}"
            f" (refund {refund_id(call) or 'reference pending'}). It usually appears on your statement"
            " within 5-10 business days."
        )
    if wants_refund and order is not None:
        return f"Order {order.get('id')} has already been refunded in full, so there is nothing left to refund."
    if wants_refund:
        return "I couldn't find the order you mentioned; could you reply with your order number (it looks like ORD-1234)?"
    return None


def _category_sentence(turn: Turn, progress: Progress) -> str:
    category, _ = classify(turn.text)
    order = progress.order()
    if category == "shipping" and order is not None:
        return f"I checked order {order.get('id')}: it is currently {order.get('status')}. We'll keep an eye on it for you."
    if category == "account":
        return "You can reset your password from the sign-in page; if the reset email doesn't arrive, reply here and we'll unlock the account for you."
    if category == "technical":
        return "Sorry about the trouble. I've passed the details to our technical team, who will look into it."
    if category == "billing":
        return "I've reviewed the charges on your account and we'll follow up on anything that looks wrong."
    return "Thanks for getting in touch. We've received your message and will follow up shortly."


def customer_reply(turn: Turn, progress: Progress, *, wants_refund: bool) -> str:
    name = _first_name(progress)
    parts = [f"Hi {name}," if name else "Hi there,", ""]
    parts.append(_refund_sentence(progress, wants_refund) or _category_sentence(turn, progress))
    if progress.done("escalate_to_human"):
        parts.append(
            "I've also passed your request to a senior member of our team, who will get back to you shortly."
        )
    return "\n".join(parts) + SIGN_OFF


def internal_note(turn: Turn, progress: Progress) -> str:
    category, priority = classify(turn.text)
    lines = [f"Triage: {category}, {priority} priority."]
    call = progress.last("issue_refund")
    if call is not None:
        lines.append(
            f"Refund: {'denied — ' + _snippet(call.result) if call.is_error else refund_id(call) or 'issued'}."
        )
    return " ".join(lines)


def _describe(call: ToolCall) -> str:
    args = call.input if isinstance(call.input, dict) else {}
    if call.is_error:
        verb = "refund denied" if call.name == "issue_refund" else f"{call.name} failed"
        return f"{verb} ({_snippet(call.result, 120)})"
    if call.name == "lookup_customer":
        return f"looked up customer {args.get('email')}"
    if call.name == "lookup_order":
        return f"looked up order {args.get('order_id')}"
    if call.name == "classify_ticket":
        return f"classified the ticket as {args.get('category')} / {args.get('priority')}"
    if call.name == "issue_refund":
        amount = args.get("amount_cents")
        return f"issued refund {refund_id(call) or ''} of {money(amount) if isinstance(amount, int) else '?'}".replace(
            "  ", " "
        )
    if call.name == "escalate_to_human":
        return "escalated to a human"
    if call.name == "add_internal_note":
        return "left an internal note"
    if call.name == "send_reply":
        return "replied to the customer"
    return f"called {call.name}"


def summary(progress: Progress, *, stopped_early: bool) -> str:
    if not progress.calls:
        return "Nothing to do for this message."
    done = "; ".join(_describe(c) for c in progress.calls)
    text = f"Done: {done}."
    if stopped_early:
        text += " I stopped after the maximum number of tool calls for one turn."
    return text


_FILLER = (
    "For the record, here is the reasoning behind each step. "
    "I first confirmed who the customer is and which order they are writing about, because every later "
    "decision depends on those two facts. "
    "I then classified the ticket so the queue shows it to the right people at the right priority. "
    "Where money was involved I only acted on the order's recorded total and what had already been refunded, "
    "never on the amount a message claims. "
    "Anything I could not verify is left for a person to check, and the reply tells the customer what happens next. "
)


def pad_to(text: str, length: int) -> str:
    """`text` followed by filler sentences until it is about `length` characters."""
    sentences = re.findall(r"[^.]+\.\s*", _FILLER)
    out = text + "\n\n"
    index = 0
    while len(out) < length:
        out += sentences[index % len(sentences)]
        index += 1
    return out.strip()
