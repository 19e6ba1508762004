"""The tickets a campaign sends: a seeded plan, made before anything runs.

Customers and orders are the sandbox's demo data (sandbox/seed.py). The
sandbox offers no endpoint to add orders, so refunds are kept small and
spread over the orders with a budget per order: a planned refund fits what
is left of its order unless another plan's refund got there first, and then
the provider refuses it (`amount_too_large`), a failure the model reads, not
a lost effect. A long campaign (thousands of tickets) plans in cents: with
an approval limit below a dollar (CHAOS_APPROVAL_LIMIT_CENTS), the orders
hold a few thousand refunds instead of a few hundred.

Kinds of ticket:
- lookup: "where is my order"; lookups, a classification, a reply.
- refund_small: a refund below the approval limit (runs without a human).
- refund_large: above the limit; the scripted approver approves, approves
  with a smaller amount, denies with a reason, lets it expire, or clicks
  just as it expires (a race that exactly one side must win).
- escalate: asks for a manager; escalate_to_human is NOT idempotent, so an
  unknown outcome must end in_doubt and never be sent twice.
Any ticket may also get a follow-up message while its turn runs (queued as
a second turn), be canceled, stream slowly (`[[sandbox:slow]]`), or have its
webhook delivered twice (the replay must be refused).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sandbox.seed import CUSTOMERS, ORDERS, order_rows

DECISIONS = ("approve", "edit", "deny", "expire", "race")


@dataclass
class Order:
    id: str
    customer_index: int
    total_cents: int
    first_item: str
    planned_cents: int = 0  # refunds the plan expects to land

    @property
    def left_cents(self) -> int:
        return self.total_cents - self.planned_cents


@dataclass
class Ticket:
    index: int
    kind: str
    email: str
    name: str
    order_id: str
    subject: str
    body: str
    amount_cents: int = 0
    decision: str = ""  # for refund_large
    edited_cents: int = 0
    think_s: float = 0.0  # the approver's delay before clicking
    follow_up: str = ""
    follow_up_after_s: float = 0.0
    cancel_after_s: float | None = None
    replay_webhook: bool = False


FOLLOW_UPS = (
    "Any news on this? I haven't heard back yet.",
    "Sorry, I forgot to say: I'm away next week, so email is best.",
    "Just checking the status of my ticket, thanks.",
)


def _orders() -> list[Order]:
    rows = {row[0]: row for row in order_rows()}
    out = []
    for number, customer_index, _status, items in ORDERS:
        order_id = f"ORD-{number}"
        out.append(Order(order_id, customer_index, rows[order_id][3], items[0][1]))
    return out


def dollars(cents: int) -> str:
    """As a customer writes it: "$15", "$0.45"."""
    whole, part = divmod(cents, 100)
    return f"${whole}.{part:02d}" if part else f"${whole}"


class Planner:
    """Plans tickets in order; `plan` again goes on where the last one ended
    (the orders' budgets carried over), for a load that lasts as long as the
    faults do."""

    def __init__(self, seed: int, limit_cents: int) -> None:
        self.rng = random.Random(f"{seed}:workload")
        self.limit = limit_cents
        self.unit = 100 if limit_cents >= 1000 else 1  # whole dollars, or cents
        self.orders = _orders()
        self.planned = 0

    def plan(self, count: int) -> list[Ticket]:
        start, self.planned = self.planned, self.planned + count
        return [self._ticket(i) for i in range(start, self.planned)]

    def _ticket(self, index: int) -> Ticket:
        rng = self.rng
        kind = rng.choices(
            ["lookup", "refund_small", "refund_large", "escalate"], weights=[30, 30, 30, 10]
        )[0]
        ticket = None
        if kind == "refund_small":
            top = self.limit // self.unit
            ticket = self._refund(index, rng.randint(2, top - 5) * self.unit, "")
        elif kind == "refund_large":
            decision = rng.choices(DECISIONS, weights=[35, 20, 20, 15, 10])[0]
            top = self.limit // self.unit
            amount = rng.randint(top + 1, top + 20) * self.unit
            ticket = self._refund(index, amount, decision)
        if ticket is None:  # no order has room left for that refund: ask about it
            kind = "escalate" if kind == "escalate" else "lookup"
            ticket = self._simple(index, kind)
        if rng.random() < 0.2:
            ticket.follow_up = rng.choice(FOLLOW_UPS)
            ticket.follow_up_after_s = rng.uniform(0.0, 2.5)
        if rng.random() < 0.08:
            # Slow streams (>= 3 s a reply) so the cancel lands mid-turn, often
            # mid-stream; a refund above the limit may be canceled mid-approval.
            ticket.cancel_after_s = rng.uniform(1.0, 8.0)
            ticket.body += " [[sandbox:slow]]"
        elif rng.random() < 0.05:
            ticket.body += " [[sandbox:slow]]"
        ticket.replay_webhook = rng.random() < 0.05
        return ticket

    def _customer(self, order: Order) -> tuple[str, str]:
        _cid, name, email, _plan, _days = CUSTOMERS[order.customer_index]
        return email, name

    def _simple(self, index: int, kind: str) -> Ticket:
        order = self.rng.choice(self.orders)
        email, name = self._customer(order)
        if kind == "escalate":
            subject = "I want to speak to a manager"
            body = (
                f"Order {order.id} has been a mess from start to finish. This is "
                "unacceptable, I want to speak to a manager."
            )
        else:
            subject = f"Where is my order {order.id}?"
            body = f"Hi, could you tell me where order {order.id} is? Thanks, {name.split()[0]}"
        return Ticket(index, kind, email, name, order.id, subject, body)

    def _refund(self, index: int, amount: int, decision: str) -> Ticket | None:
        lands = decision in ("", "approve", "edit", "race")
        unit = self.unit
        edited = max(unit, (amount // 2) // unit * unit) if decision == "edit" else 0
        roomy = [o for o in self.orders if o.left_cents >= amount]
        if not roomy:
            return None
        order = self.rng.choice(roomy)
        if lands:
            order.planned_cents += edited or amount
        email, name = self._customer(order)
        body = (
            f"The {order.first_item.lower()} from order {order.id} arrived damaged. "
            f"Please refund {dollars(amount)}."
        )
        kind = "refund_large" if decision else "refund_small"
        ticket = Ticket(index, kind, email, name, order.id, "Damaged item", body, amount)
        ticket.decision = decision
        ticket.edited_cents = edited
        ticket.think_s = self.rng.uniform(0.1, 3.0)
        return ticket
