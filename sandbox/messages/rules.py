"""Keyword rules the triage policy reads a ticket with."""

from __future__ import annotations

import re
from typing import Any

EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
ORDER_RE = re.compile(r"\bORD-\d+\b")
AMOUNT_RE = re.compile(r"\$\s?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d{1,2}))?")
REFUND_RE = re.compile(r"refund|money back|charged twice|double[- ]charged", re.I)
ESCALATE_RE = re.compile(r"escalat|speak to a manager|talk to a manager", re.I)
NOTE_RE = re.compile(r"internal note", re.I)
# "check back in 2 hours", "follow up in 30 minutes" (a test and demo hook).
FOLLOWUP_RE = re.compile(r"(?:check back|follow[- ]up) in (\d{1,4}) (minute|hour|day)s?", re.I)
CATEGORY_RULES = (
    ("billing", re.compile(r"refund|charge|invoice|billing|payment", re.I)),
    ("shipping", re.compile(r"shipping|shipped|delivery|deliver|tracking|package|parcel", re.I)),
    ("account", re.compile(r"password|log ?in|sign ?in|locked out|account", re.I)),
    ("technical", re.compile(r"error|bug|crash|broken", re.I)),
)
URGENT_RE = re.compile(r"urgent|asap", re.I)
ANGRY_RE = re.compile(
    r"angry|furious|unacceptable|ridiculous|outrageous|terrible|worst|scam|!!", re.I
)


def classify(text: str) -> tuple[str, str]:
    """(category, priority) from keywords; the first matching category wins."""
    category = next((name for name, pattern in CATEGORY_RULES if pattern.search(text)), "other")
    if URGENT_RE.search(text):
        priority = "urgent"
    elif ANGRY_RE.search(text):
        priority = "high"
    else:
        priority = "normal"
    return category, priority


def requested_amount(text: str) -> int | None:
    """The first dollar amount in the text ("$120", "$1,200.50"), in cents."""
    match = AMOUNT_RE.search(text)
    if not match:
        return None
    dollars = int(match.group(1).replace(",", ""))
    cents = int((match.group(2) or "0").ljust(2, "0"))
    return dollars * 100 + cents


def remaining_cents(order: dict[str, Any]) -> int:
    return int(order["total_cents"]) - int(order.get("refunded_cents") or 0)
