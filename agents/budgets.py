"""Budgets: what a model call costs, and whether the next one may be made.

Pure functions over numbers the engine already holds in memory (no query):
the check runs before every model call, so it must cost nothing.

- Cost comes from recorded token usage and the price table
  AGENTDESK_PRICES ({model-name prefix: [USD per million input tokens, USD
  per million output tokens]}). Money is kept in integer micro-dollars:
  1 USD per million tokens is exactly 1 micro-dollar per token.
- Turn limits (steps, tokens, cost, wall-clock) end the turn `failed`: the
  turn is the unit of work, and a runaway turn should stop, not wait.
- Session limits (tokens, cost over all turns) pause the session: it is
  spend the organisation agreed to, so a person decides whether to raise
  it (services.session_raise_budget), and the paused turn then carries on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

TURN, SESSION = "turn", "session"
# A call is only made when the budget leaves room for its estimated input
# AND this much output (max_tokens is clipped to what is left, never below).
MIN_OUTPUT_TOKENS = 256


def prices_for(model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for `model`: the longest
    matching prefix in AGENTDESK_PRICES, else its "*" entry, else None."""
    table: dict[str, list[float]] = settings.AGENTDESK_PRICES
    best = max((p for p in table if p != "*" and model.startswith(p)), key=len, default=None)
    entry = table.get(best) if best is not None else table.get("*")
    return (float(entry[0]), float(entry[1])) if entry else None


def cost_micros(model: str, input_tokens: int, output_tokens: int) -> int:
    """Micro-dollars a call cost; 0 for a model without a price."""
    prices = prices_for(model or settings.AGENTDESK_MODEL)
    if prices is None:
        return 0
    return math.ceil(prices[0] * input_tokens + prices[1] * output_tokens)


def usd(micros: int | None) -> str:
    """Micro-dollars as dollars ("$0.0123"); "" for None (no limit). The one
    formatter: the desk's `usd` filter is this function."""
    return "" if micros is None else f"${micros / 1_000_000:,.4f}"


@dataclass(frozen=True)
class Limits:
    """A session's budgets; None is no limit."""

    max_turn_steps: int
    max_turn_tokens: int | None = None
    max_turn_cost_micros: int | None = None
    max_turn_seconds: int | None = None
    max_total_tokens: int | None = None
    max_total_cost_micros: int | None = None

    @classmethod
    def of(cls, session) -> Limits:
        return cls(
            max_turn_steps=session.max_turn_steps,
            max_turn_tokens=session.max_turn_tokens,
            max_turn_cost_micros=session.max_turn_cost_micros,
            max_turn_seconds=session.max_turn_seconds,
            max_total_tokens=session.max_total_tokens,
            max_total_cost_micros=session.max_total_cost_micros,
        )


@dataclass(frozen=True)
class Spend:
    """What the current turn and the whole session have used so far."""

    turn_steps: int
    turn_tokens: int
    turn_cost_micros: int
    total_tokens: int
    total_cost_micros: int
    turn_started_at: datetime | None


@dataclass(frozen=True)
class Exceeded:
    scope: str  # TURN (the turn fails) or SESSION (the session pauses)
    limit: str  # the Session field, e.g. "max_turn_tokens"
    used: int
    maximum: int
    reason: str  # for people: "budget: 41 steps > 40 per turn"

    def data(self) -> dict:
        action = "paused" if self.scope == SESSION else "failed"
        return {
            "scope": self.scope,
            "limit": self.limit,
            "used": self.used,
            "max": self.maximum,
            "action": action,
            "reason": self.reason,
        }


def check(
    limits: Limits, spend: Spend, now: datetime, next_input_tokens: int = 0
) -> Exceeded | None:
    """The first budget the next model call would break, or None.

    `next_input_tokens` is the estimated input of that call: a token or cost
    budget refuses a call whose input plus MIN_OUTPUT_TOKENS of output would
    cross it, not only one made after the line was crossed. Turn limits are
    checked first: a turn that must end anyway should not pause the session."""
    step = spend.turn_steps + 1
    if step > limits.max_turn_steps:
        return Exceeded(
            TURN,
            "max_turn_steps",
            step,
            limits.max_turn_steps,
            f"budget: {step} steps > {limits.max_turn_steps} per turn",
        )
    if limits.max_turn_seconds and spend.turn_started_at is not None:
        elapsed = int((now - spend.turn_started_at).total_seconds())
        if elapsed >= limits.max_turn_seconds:
            return Exceeded(
                TURN,
                "max_turn_seconds",
                elapsed,
                limits.max_turn_seconds,
                f"budget: turn ran {elapsed} s >= {limits.max_turn_seconds} s",
            )
    price_in, price_out = prices_for(settings.AGENTDESK_MODEL) or (0.0, 0.0)
    next_tokens = next_input_tokens + MIN_OUTPUT_TOKENS
    next_cost = math.ceil(price_in * next_input_tokens + price_out * MIN_OUTPUT_TOKENS)
    for scope, name, used, extra, maximum, unit in (
        (TURN, "max_turn_tokens", spend.turn_tokens, next_tokens, limits.max_turn_tokens, "tok"),
        (TURN, "max_turn_cost_micros", spend.turn_cost_micros, next_cost, limits.max_turn_cost_micros, "usd"),
        (SESSION, "max_total_tokens", spend.total_tokens, next_tokens, limits.max_total_tokens, "tok"),
        (SESSION, "max_total_cost_micros", spend.total_cost_micros, next_cost, limits.max_total_cost_micros, "usd"),
    ):  # fmt: skip
        if maximum is not None and used + extra > maximum:
            return Exceeded(scope, name, used, maximum, _reason(scope, used, extra, maximum, unit))
    return None


def _reason(scope: str, used: int, extra: int, maximum: int, unit: str) -> str:
    show = usd if unit == "usd" else (lambda n: f"{n:,} tokens")
    per = "per turn" if scope == TURN else "for the session"
    if used >= maximum:
        text = f"budget: {show(used)} used >= {show(maximum)} {per}"
    else:
        text = (
            f"budget: {show(used)} used + ~{show(extra)} for the next call > {show(maximum)} {per}"
        )
    if scope == SESSION:
        text += "; paused until an admin raises the budget"
    return text


def output_allowance(limits: Limits, spend: Spend, next_input_tokens: int, default: int) -> int:
    """max_tokens for the next call: the configured value, clipped to what
    the token and cost budgets leave after the call's estimated input."""
    allowance = default
    for maximum, used in (
        (limits.max_turn_tokens, spend.turn_tokens),
        (limits.max_total_tokens, spend.total_tokens),
    ):
        if maximum is not None:
            allowance = min(allowance, maximum - used - next_input_tokens)
    prices = prices_for(settings.AGENTDESK_MODEL)
    if prices and prices[1] > 0:
        for maximum, used in (
            (limits.max_turn_cost_micros, spend.turn_cost_micros),
            (limits.max_total_cost_micros, spend.total_cost_micros),
        ):
            if maximum is not None:
                left = maximum - used - prices[0] * next_input_tokens
                allowance = min(allowance, int(left / prices[1]))
    return max(MIN_OUTPUT_TOKENS, allowance) if default >= MIN_OUTPUT_TOKENS else default
