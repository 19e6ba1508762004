"""Helpdesk records: reads (`*_get`, `*_list`) and writes (`*_create`, `*_add`).

Every function takes an open connection so the caller decides the
transaction; writes are meant to run inside `Database.write()`.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from typing import Any

CATEGORIES = ("billing", "shipping", "account", "technical", "other")
PRIORITIES = ("low", "normal", "high", "urgent")


class NotFound(Exception):
    pass


class Invalid(Exception):
    pass


def _now() -> int:
    return int(time.time())


def customer_get(
    conn: sqlite3.Connection, *, customer_id: str | None = None, email: str | None = None
) -> dict[str, Any]:
    if customer_id is not None:
        row = conn.execute("SELECT * FROM customers WHERE id = ?", (customer_id,)).fetchone()
    else:
        row = conn.execute(
            "SELECT * FROM customers WHERE email = ?", ((email or "").strip(),)
        ).fetchone()
    if row is None:
        raise NotFound(
            f"No customer with {'id ' + repr(customer_id) if customer_id else 'email ' + repr(email)}"
        )
    customer = dict(row)
    ids = conn.execute("SELECT id FROM orders WHERE customer_id = ? ORDER BY id", (row["id"],))
    customer["orders"] = [order_get(conn, order_id=r["id"]) for r in ids]
    return customer


def order_get(
    conn: sqlite3.Connection, *, order_id: str | None = None, payment_intent: str | None = None
) -> dict[str, Any]:
    if order_id is not None:
        row = conn.execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone()
    else:
        row = conn.execute(
            "SELECT * FROM orders WHERE payment_intent = ?", (payment_intent,)
        ).fetchone()
    if row is None:
        raise NotFound(f"No order {order_id or payment_intent!r}")
    order = dict(row)
    order["items"] = json.loads(order["items"])
    order["refunded_cents"] = refunded_cents(conn, order["id"])
    return order


def refunded_cents(conn: sqlite3.Connection, order_id: str) -> int:
    row = conn.execute(
        "SELECT COALESCE(SUM(amount), 0) AS total FROM refunds WHERE order_id = ? AND status = 'succeeded'",
        (order_id,),
    ).fetchone()
    return int(row["total"])


def _customer_for_ticket(conn: sqlite3.Connection, email: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM customers WHERE email = ?", (email,)).fetchone()
    if row is not None:
        return row
    # Like a real helpdesk: an unknown sender becomes a new contact.
    customer_id = "cus_" + hashlib.sha1(email.lower().encode()).hexdigest()[:14]
    name = email.split("@")[0].replace(".", " ").title()
    conn.execute(
        "INSERT INTO customers (id, name, email, plan, created) VALUES (?, ?, ?, 'free', ?)",
        (customer_id, name, email, _now()),
    )
    return conn.execute("SELECT * FROM customers WHERE id = ?", (customer_id,)).fetchone()


def ticket_create(
    conn: sqlite3.Connection,
    *,
    customer_email: str,
    subject: str,
    body: str,
    order_id: str | None = None,
) -> dict[str, Any]:
    if "@" not in customer_email or not subject.strip() or not body.strip():
        raise Invalid("customer_email, subject and body are required")
    customer = _customer_for_ticket(conn, customer_email.strip())
    if order_id is not None:
        order_get(conn, order_id=order_id)
    now = _now()
    cursor = conn.execute(
        "INSERT INTO tickets (customer_id, order_id, subject, body, status, created, updated)"
        " VALUES (?, ?, ?, ?, 'open', ?, ?)",
        (customer["id"], order_id, subject, body, now, now),
    )
    return ticket_get(conn, ticket_id=cursor.lastrowid)


def ticket_get(conn: sqlite3.Connection, *, ticket_id: int, detail: bool = False) -> dict[str, Any]:
    row = conn.execute(
        "SELECT t.*, c.email AS customer_email, c.name AS customer_name"
        " FROM tickets t JOIN customers c ON c.id = t.customer_id WHERE t.id = ?",
        (ticket_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"No ticket {ticket_id}")
    ticket = dict(row)
    if detail:
        ticket.update(_ticket_activity(conn, ticket_id))
    return ticket


def _ticket_activity(conn: sqlite3.Connection, ticket_id: int) -> dict[str, list[dict[str, Any]]]:
    messages = conn.execute(
        "SELECT id, ticket_id, kind, body, created FROM ticket_messages WHERE ticket_id = ? ORDER BY id",
        (ticket_id,),
    ).fetchall()
    escalations = conn.execute(
        "SELECT * FROM escalations WHERE ticket_id = ? ORDER BY id", (ticket_id,)
    )
    by_kind: dict[str, list[dict[str, Any]]] = {"reply": [], "note": [], "customer": []}
    for message in messages:
        by_kind[message["kind"]].append(dict(message))
    return {
        "replies": by_kind["reply"],
        "notes": by_kind["note"],
        "customer_messages": by_kind["customer"],
        "escalations": [dict(e) for e in escalations],
    }


def tickets_list(
    conn: sqlite3.Connection, *, status: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    query = "SELECT id FROM tickets"
    params: list[Any] = []
    if status:
        query += " WHERE status = ?"
        params.append(status)
    query += " ORDER BY id LIMIT ?"
    params.append(limit)
    return [ticket_get(conn, ticket_id=r["id"]) for r in conn.execute(query, params).fetchall()]


def message_add(
    conn: sqlite3.Connection, *, ticket_id: int, kind: str, body: str, key: str | None = None
) -> dict[str, Any]:
    if not body.strip():
        raise Invalid("body is required")
    ticket_get(conn, ticket_id=ticket_id)
    now = _now()
    cursor = conn.execute(
        "INSERT INTO ticket_messages (ticket_id, kind, body, idempotency_key, created) VALUES (?, ?, ?, ?, ?)",
        (ticket_id, kind, body, key, now),
    )
    # An agent reply waits on the customer; a customer message reopens the
    # ticket. Escalated tickets stay escalated until a human moves them.
    new_status = {"reply": "pending", "customer": "open"}.get(kind)
    if new_status:
        conn.execute(
            "UPDATE tickets SET status = ?, updated = ? WHERE id = ? AND status != 'escalated'",
            (new_status, now, ticket_id),
        )
    return {
        "id": cursor.lastrowid,
        "ticket_id": ticket_id,
        "kind": kind,
        "body": body,
        "created": now,
    }


def ticket_classify(
    conn: sqlite3.Connection, *, ticket_id: int, category: str, priority: str
) -> dict[str, Any]:
    if category not in CATEGORIES:
        raise Invalid(f"category must be one of {', '.join(CATEGORIES)}")
    if priority not in PRIORITIES:
        raise Invalid(f"priority must be one of {', '.join(PRIORITIES)}")
    ticket_get(conn, ticket_id=ticket_id)
    conn.execute(
        "UPDATE tickets SET category = ?, priority = ?, updated = ? WHERE id = ?",
        (category, priority, _now(), ticket_id),
    )
    return ticket_get(conn, ticket_id=ticket_id)


def escalation_add(conn: sqlite3.Connection, *, ticket_id: int, reason: str) -> dict[str, Any]:
    if not reason.strip():
        raise Invalid("reason is required")
    ticket_get(conn, ticket_id=ticket_id)
    now = _now()
    cursor = conn.execute(
        "INSERT INTO escalations (ticket_id, reason, created) VALUES (?, ?, ?)",
        (ticket_id, reason, now),
    )
    conn.execute(
        "UPDATE tickets SET status = 'escalated', updated = ? WHERE id = ?", (now, ticket_id)
    )
    return {"id": cursor.lastrowid, "ticket_id": ticket_id, "reason": reason, "created": now}
