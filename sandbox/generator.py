"""`--rate N`: realistic tickets for the demo customers, N per minute.

Deterministic given `--seed`: the same seed yields the same sequence of
tickets. Each ticket goes through the API's own create path, so its webhook
fires like any other.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

from sandbox import store
from sandbox.helpdesk import ticket_open
from sandbox.seed import CUSTOMERS, order_rows
from sandbox.state import Sandbox

log = logging.getLogger("sandbox.generator")

Order = dict[str, Any]


def _orders() -> list[Order]:
    rows = order_rows()
    emails = {c[0]: (c[1], c[2]) for c in CUSTOMERS}
    return [
        {"id": r[0], "total": r[3], "name": emails[r[1]][0].split()[0], "email": emails[r[1]][1]}
        for r in rows
    ]


def _dollars(cents: int) -> str:
    return f"${cents / 100:,.2f}".replace(".00", "")


def _refund_small(rng: random.Random, order: Order) -> tuple[str, str]:
    amount = min(order["total"], rng.choice([1200, 2500, 3900, 4950, 8900]))
    return (
        f"Refund request for {order['id']}",
        f"Hi, part of order {order['id']} arrived damaged. Could I get a refund of {_dollars(amount)}?\n\nThanks, {order['name']}",
    )


def _refund_large(rng: random.Random, order: Order) -> tuple[str, str]:
    return (
        f"Return and refund for {order['id']}",
        f"Hello, I'd like to return order {order['id']} and get my money back ({_dollars(order['total'])}). "
        f"It isn't what I expected.\n\n{order['name']}",
    )


def _shipping(rng: random.Random, order: Order) -> tuple[str, str]:
    days = rng.choice([5, 8, 12])
    return (
        f"Where is my order {order['id']}?",
        f"My order {order['id']} was placed {days} days ago and still hasn't arrived. Can you send me the tracking details?",
    )


def _login(rng: random.Random, order: Order) -> tuple[str, str]:
    return (
        "Can't log in to my account",
        "I reset my password twice but I still can't log in. The page just says my login failed. Please help.",
    )


def _double_charge(rng: random.Random, order: Order) -> tuple[str, str]:
    return (
        "Charged twice!!",
        f"This is unacceptable. I was charged twice for order {order['id']}, {_dollars(order['total'])} taken two times. "
        "I want my money back now.",
    )


TEMPLATES: tuple[Callable[[random.Random, Order], tuple[str, str]], ...] = (
    _refund_small,
    _refund_large,
    _shipping,
    _login,
    _double_charge,
)


def ticket_specs(seed: int) -> Iterator[dict[str, Any]]:
    """An endless, seed-determined stream of ticket fields."""
    rng = random.Random(seed)
    orders = _orders()
    small = [o for o in orders if o["total"] < 10000]
    large = [o for o in orders if o["total"] > 10000]
    while True:
        template = rng.choice(TEMPLATES)
        order = rng.choice(
            large if template is _refund_large else small if template is _refund_small else orders
        )
        subject, body = template(rng, order)
        if rng.random() < 0.2:
            subject, body = (
                f"URGENT: {subject}",
                body + "\n\nThis is urgent, please handle it asap.",
            )
        yield {
            "customer_email": order["email"],
            "subject": subject,
            "body": body,
            "order_id": order["id"],
        }


async def run(sandbox: Sandbox, *, rate: float, seed: int) -> None:
    """Create tickets at `rate` per minute until cancelled."""
    loop = asyncio.get_running_loop()
    interval = 60.0 / rate
    next_at = loop.time()
    for spec in ticket_specs(seed):
        try:
            ticket = await ticket_open(sandbox, **spec)
            log.info("generated ticket %s: %s", ticket["id"], ticket["subject"])
        except (store.NotFound, store.Invalid) as exc:
            # After a /_reset without reseeding the demo orders are gone.
            log.warning("generator skipped a ticket: %s", exc)
        # Scheduled on a fixed grid so a slow create does not lower the rate.
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - loop.time()))
