"""The deterministic support-triage policy the Messages-API stand-in plays.

One decision per request: a short text plus at most one tool_use, or a final
end_turn summary. The order of steps is lookup customer, lookup order,
classify, refund, escalate, internal note, reply, finish; each step runs once
per turn and only with tools the request offers. Test directives
(`[[sandbox:...]]` in the turn's text) make the first response of a turn
deliberately bad so clients can test their handling of bad model output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox.messages import carrier, codemode, scripted, wording
from sandbox.messages.rules import (
    EMAIL_RE,
    ESCALATE_RE,
    FOLLOWUP_RE,
    NOTE_RE,
    ORDER_RE,
    REFUND_RE,
    classify,
    remaining_cents,
    requested_amount,
)
from sandbox.messages.transcript import Progress, Turn
from sandbox.responses import random_id

MAX_TOOL_CALLS = 8
PROBE_DIRECTIVES = ("bad_json", "unknown_tool", "schema_violation", "huge_number")
# [[sandbox:max_tokens]] and [[sandbox:pause_turn]]: the first reply of a turn
# stops there (text only); a request that continues from it goes on as usual.
# [[sandbox:refusal]]: every reply of the turn is a refusal;
# [[sandbox:max_tokens_always]]: every reply is cut at max_tokens.
STOP_DIRECTIVES = ("max_tokens", "max_tokens_always", "pause_turn", "refusal")
REFUSAL_TEXT = "I can't help with this request."


@dataclass
class ToolUse:
    name: str
    input: Any
    # Set only for deliberately broken output: the exact (invalid) JSON text.
    raw_json: str | None = None
    id: str = field(default_factory=lambda: random_id("toolu_"))

    def json_text(self) -> str:
        return self.raw_json if self.raw_json is not None else json.dumps(self.input)


@dataclass
class Reply:
    text: str
    tool_use: ToolUse | None = None
    stop: str = ""  # a stop reason other than tool_use / end_turn
    thinking: str = ""  # a thinking block before the text ([[sandbox:thinking]])
    # Cut at max_tokens while thinking: the block without its signature, no text
    # (and no tool call).
    thinking_cut: bool = False

    @property
    def stop_reason(self) -> str:
        return self.stop or ("tool_use" if self.tool_use else "end_turn")


def decide(turn: Turn) -> Reply:
    if (reply := scripted.decide(turn)) is not None:  # [[call:...]] directives
        return reply
    if (reply := codemode.decide(turn)) is not None:  # the request offers run_code
        return reply
    if (stopped := _stop_probe(turn)) is not None:
        return stopped
    probe = _probe(turn)
    if probe is not None and not turn.calls:
        return probe
    calls = turn.calls[1:] if probe is not None else turn.calls
    if (parcel := carrier.decide(turn)) is not None:  # a lost parcel: the carrier portal
        return parcel
    progress = Progress(calls)
    if len(turn.calls) >= MAX_TOOL_CALLS:
        return _finish(turn, progress, stopped_early=True)
    step = _next_step(turn, progress)
    if step is None:
        return _finish(turn, progress)
    return Reply(
        wording.after_failure(turn.calls[-1] if turn.calls else None) + step.text, step.tool_use
    )


def _next_step(turn: Turn, progress: Progress) -> Reply | None:
    for step in STEPS:
        reply = step(turn, progress)
        if reply is not None:
            return reply
    return None


def _find(pattern: re.Pattern[str], turn: Turn) -> str | None:
    """First match in the turn's text, else in the system prompt (ticket context)."""
    match = pattern.search(turn.text) or pattern.search(turn.system)
    return match.group(0) if match else None


def _step_customer(turn: Turn, progress: Progress) -> Reply | None:
    email = _find(EMAIL_RE, turn)
    if not email or not turn.offers("lookup_customer") or progress.done("lookup_customer"):
        return None
    return Reply(
        "Let me look up the customer's account.", ToolUse("lookup_customer", {"email": email})
    )


def _step_order(turn: Turn, progress: Progress) -> Reply | None:
    order_id = _find(ORDER_RE, turn)
    if not order_id or not turn.offers("lookup_order") or progress.done("lookup_order"):
        return None
    return Reply(
        f"Let me pull up order {order_id}.", ToolUse("lookup_order", {"order_id": order_id})
    )


def _step_classify(turn: Turn, progress: Progress) -> Reply | None:
    if not turn.offers("classify_ticket") or progress.done("classify_ticket"):
        return None
    category, priority = classify(turn.text)
    return Reply(
        f"This looks like a {category} question; I'll mark it {priority} priority.",
        ToolUse("classify_ticket", {"category": category, "priority": priority}),
    )


def _step_refund(turn: Turn, progress: Progress) -> Reply | None:
    order = progress.order()
    if not REFUND_RE.search(turn.text) or order is None:
        return None
    if (
        not turn.offers("issue_refund")
        or progress.done("issue_refund")
        or remaining_cents(order) <= 0
    ):
        return None
    amount = requested_amount(turn.text) or remaining_cents(order)
    order_id = order.get("id") or _find(ORDER_RE, turn)
    return Reply(
        f"Order {order_id} qualifies, so I'll issue a refund of {wording.money(amount)}.",
        ToolUse(
            "issue_refund",
            {"order_id": order_id, "amount_cents": amount, "reason": "requested_by_customer"},
        ),
    )


def _step_escalate(turn: Turn, progress: Progress) -> Reply | None:
    if (
        not ESCALATE_RE.search(turn.text)
        or not turn.offers("escalate_to_human")
        or progress.done("escalate_to_human")
    ):
        return None
    reason = (
        "Customer asked to speak to a manager."
        if "manager" in turn.text.lower()
        else "Customer asked for escalation."
    )
    return Reply(
        "This needs a person, so I'm escalating it to the team.",
        ToolUse("escalate_to_human", {"reason": reason}),
    )


def _step_note(turn: Turn, progress: Progress) -> Reply | None:
    if (
        not NOTE_RE.search(turn.text)
        or not turn.offers("add_internal_note")
        or progress.done("add_internal_note")
    ):
        return None
    return Reply(
        "I'll leave an internal note for the team.",
        ToolUse("add_internal_note", {"body": wording.internal_note(turn, progress)}),
    )


def _step_followup(turn: Turn, progress: Progress) -> Reply | None:
    match = FOLLOWUP_RE.search(turn.text)
    if not match or not turn.offers("schedule_followup") or progress.done("schedule_followup"):
        return None
    minutes = int(match.group(1)) * {"minute": 1, "hour": 60, "day": 1440}[match.group(2).lower()]
    note = "Check whether the customer has replied; if not, nudge them."
    return Reply(
        "I'll schedule a follow-up in case the customer does not reply.",
        ToolUse("schedule_followup", {"delay_minutes": minutes, "note": note}),
    )


def _step_reply(turn: Turn, progress: Progress) -> Reply | None:
    if not turn.offers("send_reply") or progress.done("send_reply"):
        return None
    body = wording.customer_reply(turn, progress, wants_refund=bool(REFUND_RE.search(turn.text)))
    return Reply("I'll reply to the customer now.", ToolUse("send_reply", {"body": body}))


STEPS: tuple[Callable[[Turn, Progress], Reply | None], ...] = (
    _step_customer,
    _step_order,
    _step_classify,
    _step_refund,
    _step_escalate,
    _step_note,
    _step_followup,
    _step_reply,
)


def _finish(turn: Turn, progress: Progress, stopped_early: bool = False) -> Reply:
    text = wording.summary(progress, stopped_early=stopped_early)
    if "long_text" in turn.directives:
        text = wording.pad_to(text, 3000)
    return Reply(text)


def _stop_probe(turn: Turn) -> Reply | None:
    directive = next((d for d in turn.directives if d in STOP_DIRECTIVES), None)
    if directive == "refusal":
        return Reply(REFUSAL_TEXT, stop="refusal")
    if directive == "max_tokens_always":
        return Reply("Thanks for writing in. Let me look at your ord", stop="max_tokens")
    if directive is None or turn.calls or turn.continues:
        return None
    if directive == "max_tokens":
        return Reply("Thanks for writing in. Let me look at your ord", stop="max_tokens")
    return Reply("Let me think about this for a moment.", stop="pause_turn")


def _probe(turn: Turn) -> Reply | None:
    """The deliberately bad first response a directive asks for, if any."""
    directive = next((d for d in turn.directives if d in PROBE_DIRECTIVES), None)
    if directive == "unknown_tool":
        return Reply(
            "Let me clear out the ticket queue first.",
            ToolUse("delete_all_tickets", {"confirm": True}),
        )
    if directive == "schema_violation":
        order_id = _find(ORDER_RE, turn) or "ORD-1001"
        return Reply(
            "I'll refund this right away.",
            ToolUse(
                "issue_refund",
                {"order_id": order_id, "amount_cents": "lots", "reason": "requested_by_customer"},
            ),
        )
    if directive == "bad_json":
        return _bad_json_probe(turn)
    if directive == "huge_number":  # valid JSON, but no float holds it (inf in Python)
        order_id = _find(ORDER_RE, turn) or "ORD-1001"
        raw = f'{{"order_id": "{order_id}", "amount_cents": 1e400, "reason": "requested_by_customer"}}'
        return Reply(
            "I'll refund this right away.",
            ToolUse("issue_refund", {"order_id": order_id}, raw_json=raw),
        )
    return None


def _bad_json_probe(turn: Turn) -> Reply | None:
    planned = _next_step(turn, Progress([]))
    if planned is not None and planned.tool_use is not None:
        use = planned.tool_use
        # Valid JSON up to the end, then ",,}": invalid even to a partial parser.
        return Reply(
            planned.text, ToolUse(use.name, use.input, raw_json=json.dumps(use.input)[:-1] + ",,}")
        )
    if turn.tools:
        return Reply("Let me check something.", ToolUse(turn.tools[0], {}, raw_json='{"oops": ,}'))
    return None
