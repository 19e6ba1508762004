"""What happened in a session, in a few words, for the sessions list.

"Idle" says nothing a person can act on. The list says what the last turn
did instead: replied, refunded $189.00, escalated, waiting on you (approve a
refund of $189.00), in doubt, failed (and why), with its cost. Computed for
a page of rows in two queries however many rows it shows: the last turn of
each session (DISTINCT ON, on the turn_number_unique index) and those turns'
tool calls.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agents import budgets
from agents.models import Session, ToolCall, Turn
from dashboard import presenters

C, T, S = ToolCall.Status, Turn.Status, Session.Status

# Words for a tool call that ran, by tool (a refund says how much). Look-ups
# and classification change nothing outside: not worth a word in the list.
DONE = {
    "send_reply": "replied",
    "escalate_to_human": "escalated",
    "add_internal_note": "noted",
    "schedule_followup": "follow-up scheduled",
}
QUIET_TOOLS = frozenset({"lookup_customer", "lookup_order", "classify_ticket"})
ATTENTION = "attention"  # the outcome's tone: a class on the list's cell


@dataclass(frozen=True)
class Outcome:
    text: str
    tone: str  # "ok", "attention", "failed", "quiet", "busy"
    cost: str  # the last turn's cost, "" when nothing was spent
    turn_number: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", self.text[:1].upper() + self.text[1:])


def money(cents: Any) -> str:
    if type(cents) is not int:
        return ""
    return f"${cents / 100:,.2f}"


def _call_words(call: ToolCall) -> str:
    if call.name == "issue_refund":
        amount = money((call.input or {}).get("amount_cents"))
        return f"refunded {amount}".strip()
    return DONE.get(call.name, f"ran {call.name}")


def describe(session: Session, turn: Turn | None, calls: list[ToolCall]) -> Outcome:
    """One session's outcome from its last turn and that turn's calls."""
    if turn is None:
        return Outcome("no turns yet", "quiet", "")
    cost = _cost(turn)
    number = turn.number
    waiting = [c for c in calls if c.status == C.WAITING]
    if session.status == S.WAITING and waiting:
        asks = "; ".join(_asks(c) for c in waiting)
        return Outcome(f"waiting on you: approve {asks}", ATTENTION, cost, number)
    doubtful = [c for c in calls if c.status == C.IN_DOUBT]
    if session.status == S.IN_DOUBT and doubtful:
        names = ", ".join(c.name for c in doubtful)
        return Outcome(f"in doubt: did {names} happen? check and resolve", ATTENTION, cost, number)
    if session.status == S.PAUSED:
        return Outcome("paused: the session budget is spent", ATTENTION, cost, number)
    if turn.status == T.FAILED:
        lines = (turn.error or "").strip().splitlines()
        error = lines[0][:120] if lines else ""
        return Outcome(f"failed: {error}" if error else "failed", "failed", cost, number)
    if turn.status == T.CANCELED:
        return Outcome("canceled", "quiet", cost, number)
    if turn.status in (T.ACCEPTED, T.RUNNING, T.RESUMING):
        return Outcome("working on it", "busy", cost, number)
    ran = [c for c in calls if c.status == C.SUCCEEDED and c.name not in QUIET_TOOLS]
    words = [_call_words(c) for c in ran]
    denied = [c for c in calls if c.status == C.DENIED]
    words += [f"{c.name.replace('_', ' ')} denied" for c in denied]
    if not words:  # nothing sent out: the model's text (on the session page) is the answer
        words.append("answered")
    words = list(dict.fromkeys(words))  # a tool twice: said once
    return Outcome(", ".join(words), "ok", cost, number)


def _asks(call: ToolCall) -> str:
    if call.name == "issue_refund":
        amount = money((call.input or {}).get("amount_cents"))
        return f"a refund of {amount}" if amount else "a refund"
    return call.name


def _cost(turn: Turn) -> str:
    if turn.cost_micros:
        return budgets.usd(turn.cost_micros)
    estimate = presenters.cost_usd(turn.input_tokens, turn.output_tokens)
    return f"~${estimate}" if estimate else ""


def attach(rows: Iterable[Session]) -> None:
    """Set `row.outcome` on each session of a list page: two queries."""
    rows = list(rows)
    if not rows:
        return
    ids = [s.id for s in rows]
    last = {
        t.session_id: t
        for t in Turn.objects.filter(session_id__in=ids)
        .order_by("session_id", "-number")
        .distinct("session_id")
        .only(
            "id",
            "session_id",
            "number",
            "status",
            "error",
            "input_tokens",
            "output_tokens",
            "cost_micros",
        )
    }
    calls: dict[int, list[ToolCall]] = defaultdict(list)
    if last:
        for call in (
            ToolCall.objects.filter(
                session_id__in=list(last), turn_id__in=[t.id for t in last.values()]
            )
            .only("id", "turn_id", "name", "status", "input")
            .order_by("id")
        ):
            calls[call.turn_id].append(call)
    for row in rows:
        turn = last.get(row.id)
        row.outcome = describe(row, turn, calls[turn.id] if turn else [])
