"""The fixed demo data set: eight customers, fifteen orders.

Fixed ids and timestamps, INSERT OR IGNORE: seeding twice changes nothing,
and every test run and demo sees the same world.
"""

from __future__ import annotations

import json
import sqlite3

from sandbox.db import Database

# 2025-01-06 09:00 UTC; days are added per row so histories look plausible.
BASE_TS = 1736154000
DAY = 86400

CUSTOMERS = [
    # id, name, email, plan, days after BASE_TS
    ("cus_Q7aLmT3kVx9bWz", "Alice Martin", "alice.martin@example.com", "pro", 0),
    ("cus_R2bNkP8dYc4hJs", "Bob Okafor", "bob.okafor@example.net", "free", 3),
    ("cus_S5cHjW1fZe6mKt", "Charlie Nguyen", "charlie.nguyen@example.org", "business", 5),
    ("cus_T9dGiX4gAf2nLu", "Dana Kowalski", "dana.kowalski@example.com", "pro", 8),
    ("cus_U3eFhY7hBg5pMv", "Elena Rossi", "elena.rossi@example.net", "free", 13),
    ("cus_V6fEgZ2iCh8qNw", "Farid Haddad", "farid.haddad@example.org", "business", 21),
    ("cus_W1gDfA5jDi3rPx", "Grace Liu", "grace.liu@example.com", "pro", 34),
    ("cus_X4hCeB9kEj7sQy", "Hiro Tanaka", "hiro.tanaka@example.net", "free", 55),
]

# order number, customer index, status, items (sku, name, qty, unit cents)
ORDERS = [
    (
        1001,
        0,
        "delivered",
        [("MUG-01", "Stoneware mug", 2, 1450), ("BEAN-1K", "House blend beans 1kg", 1, 2900)],
    ),
    (1002, 0, "shipped", [("GRND-PRO", "Burr grinder Pro", 1, 18900)]),
    (1003, 1, "delivered", [("FLTR-100", "Paper filters (100)", 1, 1200)]),
    (
        1004,
        1,
        "processing",
        [("KETL-GN", "Gooseneck kettle", 1, 7900), ("SCL-01", "Brew scale", 1, 4500)],
    ),
    (1005, 2, "delivered", [("ESP-M2", "Espresso machine M2", 1, 89900)]),
    (
        1006,
        2,
        "delivered",
        [("TAMP-58", "58mm tamper", 1, 3900), ("CLTH-3", "Barista cloths (3)", 2, 950)],
    ),
    (1007, 3, "shipped", [("BEAN-DEC", "Decaf beans 500g", 3, 1650)]),
    (
        1008,
        3,
        "delivered",
        [("AERO-1", "AeroPress", 1, 3995), ("FLTR-AP", "AeroPress filters", 2, 650)],
    ),
    (1009, 4, "delivered", [("GIFT-100", "Gift card", 1, 10000)]),
    (
        1010,
        4,
        "processing",
        [("CHMX-8", "Chemex 8-cup", 1, 4950), ("FLTR-CX", "Chemex filters", 1, 1200)],
    ),
    (
        1011,
        5,
        "delivered",
        [("GRND-PRO", "Burr grinder Pro", 1, 18900), ("BEAN-1K", "House blend beans 1kg", 2, 2900)],
    ),
    (1012, 5, "shipped", [("SUB-Y", "Beans subscription (12 months)", 1, 32400)]),
    (1013, 6, "delivered", [("MUG-01", "Stoneware mug", 4, 1450)]),
    (1014, 6, "shipped", [("ESP-M1", "Espresso machine M1", 1, 54900)]),
    (1015, 7, "delivered", [("COLD-1", "Cold brew jar", 1, 2650)]),
]


# The carrier portal (sandbox/carrier.py): one account, and a shipment per
# shipped order. Agentdesk's side knows the password from its own settings
# (AGENTDESK_BROWSER_SECRETS), never from this module.
CARRIER_USERNAME = "acme-support"
CARRIER_PASSWORD = "parcel-desk-2026"
SHIPMENTS = {
    f"TRK{number}": {
        "order": f"ORD-{number}",
        "to": CUSTOMERS[customer_index][1],
        "status": "in transit",
    }
    for number, customer_index, status, _items in ORDERS
    if status == "shipped"
}


def order_rows() -> list[tuple]:
    rows = []
    for number, customer_index, status, items in ORDERS:
        item_dicts = [
            {"sku": sku, "name": name, "quantity": qty, "unit_price_cents": cents}
            for sku, name, qty, cents in items
        ]
        total = sum(i["quantity"] * i["unit_price_cents"] for i in item_dicts)
        created = BASE_TS + (CUSTOMERS[customer_index][4] + 2 + number % 7) * DAY
        rows.append(
            (
                f"ORD-{number}",
                CUSTOMERS[customer_index][0],
                json.dumps(item_dicts),
                total,
                "usd",
                status,
                f"pi_ORD{number}",
                created,
            )
        )
    return rows


def seed_demo(db: Database) -> None:
    with db.write() as conn:
        _insert(conn)


def _insert(conn: sqlite3.Connection) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO customers (id, name, email, plan, created) VALUES (?, ?, ?, ?, ?)",
        [
            (cid, name, email, plan, BASE_TS + days * DAY)
            for cid, name, email, plan, days in CUSTOMERS
        ],
    )
    conn.executemany(
        "INSERT OR IGNORE INTO orders"
        " (id, customer_id, items, total_cents, currency, status, payment_intent, created)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        order_rows(),
    )
