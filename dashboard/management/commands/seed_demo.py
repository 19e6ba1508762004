"""`manage.py seed_demo [--tickets N]`: demo users, and demo tickets in the sandbox.

Idempotent: users are created or updated (their password set to the demo
password, so the printed table is always true); the tickets are opened only
when the sandbox does not hold them yet. Tickets go through the sandbox's
helpdesk API like any other, so its signed webhook starts the agent sessions.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from itertools import cycle, islice
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from dashboard.roles import ADMIN, APPROVER, SUPPORT, ensure_roles

DEFAULT_PASSWORD = "agentdesk-demo"
HTTP_TIMEOUT_S = 10.0

# username -> (group, is_staff/is_superuser)
DEMO_USERS = {
    "support": (SUPPORT, False),
    "approver": (APPROVER, False),
    "admin": (ADMIN, True),
}

# Seeded sandbox customers and orders (sandbox/seed.py). Subjects are unlike
# the generator's, so we can tell whether these were opened already.
DEMO_TICKETS: list[dict[str, str]] = [
    {  # a refund above the approval limit ($100): an approval appears
        "customer_email": "alice.martin@example.com",
        "order_id": "ORD-1002",
        "subject": "Demo: grinder return for ORD-1002",
        "body": "Hello, the Burr grinder Pro from order ORD-1002 is not what I expected. "
        "I'd like to return it and get my money back ($189).\n\nAlice",
    },
    {  # a refund below the limit: runs without a human
        "customer_email": "dana.kowalski@example.com",
        "order_id": "ORD-1008",
        "subject": "Demo: torn filters in ORD-1008",
        "body": "Hi, the AeroPress filters in order ORD-1008 arrived torn. "
        "Could I get a refund of $13?\n\nThanks, Dana",
    },
    {  # a shipping question: lookups and a reply, no money
        "customer_email": "dana.kowalski@example.com",
        "order_id": "ORD-1007",
        "subject": "Demo: where is ORD-1007?",
        "body": "My order ORD-1007 shipped a week ago and still hasn't arrived. "
        "Can you send me the tracking details?\n\nDana",
    },
    {  # an account question without an order
        "customer_email": "bob.okafor@example.net",
        "order_id": "",
        "subject": "Demo: locked out of my account",
        "body": "I reset my password twice but I still can't log in. Please help.\n\nBob",
    },
    {  # an escalation to a human
        "customer_email": "charlie.nguyen@example.org",
        "order_id": "ORD-1005",
        "subject": "Demo: espresso machine from ORD-1005 is broken",
        "body": "The espresso machine from order ORD-1005 is broken and leaks water. "
        "I have written twice already; I want to speak to a manager.\n\nCharlie",
    },
]


class Command(BaseCommand):
    help = "Create the demo users and, in the sandbox, a handful of demo tickets."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--tickets", type=int, default=5, help="demo tickets to open (default 5; 0: none)"
        )

    def handle(self, *args: Any, tickets: int, **options: Any) -> None:
        password = os.environ.get("AGENTDESK_DEMO_PASSWORD") or DEFAULT_PASSWORD
        try:
            demo_users_ensure(password=password)
        except ValidationError as exc:
            weak = " ".join(exc.messages)
            raise CommandError(f"AGENTDESK_DEMO_PASSWORD is too weak: {weak}") from None
        self.stdout.write("Demo users (AGENTDESK_DEMO_PASSWORD sets the password):")
        self.stdout.write(f"  {'user':<10} {'password':<16} role")
        for username, (group, _) in DEMO_USERS.items():
            self.stdout.write(f"  {username:<10} {password:<16} {group}")
        if tickets > 0:
            self.stdout.write(demo_tickets_open(sandbox_url=settings.SANDBOX_URL, count=tickets))
            self.stdout.write(demo_code_mode_open(sandbox_url=settings.SANDBOX_URL))
            from capabilities.browser.demo import parcel_ticket_open

            self.stdout.write(parcel_ticket_open(sandbox_url=settings.SANDBOX_URL))


@transaction.atomic
def demo_users_ensure(*, password: str) -> None:
    groups = ensure_roles()
    user_model = get_user_model()
    for username, (group, superuser) in DEMO_USERS.items():
        user, _ = user_model.objects.get_or_create(username=username)
        user.is_staff = user.is_superuser = superuser
        # The same validators as a password change (AUTH_PASSWORD_VALIDATORS):
        # the demo must not teach a password the desk would refuse.
        validate_password(password, user)
        user.set_password(password)
        user.save()
        user.groups.add(groups[group])


def demo_tickets_open(*, sandbox_url: str, count: int) -> str:
    """Open `count` demo tickets unless the sandbox has them already."""
    base = sandbox_url.rstrip("/")
    existing = _http(f"{base}/helpdesk/tickets?limit=1000")["tickets"]
    ours = {spec["subject"] for spec in DEMO_TICKETS}
    if any(ticket["subject"] in ours for ticket in existing):
        return "Demo tickets: the sandbox has them already."
    opened = []
    for number, spec in enumerate(islice(cycle(DEMO_TICKETS), count)):
        body = {key: value for key, value in spec.items() if value}
        if number >= len(DEMO_TICKETS):
            body["subject"] += f" ({number // len(DEMO_TICKETS) + 1})"
        opened.append(_http(f"{base}/helpdesk/tickets", body)["id"])
    return f"Demo tickets opened in the sandbox: {', '.join(map(str, opened))}"


def _http(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST" if data else "GET",
    )
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        raise CommandError(f"sandbox refused {url}: HTTP {exc.code} {exc.read()[:300]!r}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise CommandError(
            f"cannot reach the sandbox at {url} ({exc}); start it, or pass --tickets 0"
        ) from exc


# Code Mode (capabilities/codemode/): several lookups and refunds in one
# program; ORD-1002's refund is above the approval limit, so the program
# pauses on the desk with its source and the calls it made so far.
CODE_MODE_TICKET = {
    "customer_email": "alice.martin@example.com",
    "subject": "Demo (Code Mode): refund my last three orders",
    "body": "Hi, I'm alice.martin@example.com. Everything in my last three orders arrived "
    "damaged. Please refund my last three orders.\n\nAlice",
}


def demo_code_mode_open(*, sandbox_url: str) -> str:
    """Open the Code Mode demo ticket, its session on the support_codemode
    profile. The session is made as soon as the sandbox answers with the
    ticket's id; its webhook, which posts the ticket's text, then finds it
    (should the webhook come first, the ticket is triaged the classic way)."""
    from agents import services

    base = sandbox_url.rstrip("/")
    existing = _http(f"{base}/helpdesk/tickets?limit=1000")["tickets"]
    if any(t["subject"] == CODE_MODE_TICKET["subject"] for t in existing):
        return "Code Mode demo ticket: the sandbox has it already."
    ticket = _http(f"{base}/helpdesk/tickets", CODE_MODE_TICKET)
    session = services.session_get_or_create(
        key=f"ticket:{ticket['id']}", profile="support_codemode", title=ticket["subject"]
    )
    how = (
        "Code Mode" if session.profile == "support_codemode" else "classic (the webhook was first)"
    )
    return f"Code Mode demo ticket opened in the sandbox: {ticket['id']} ({how})"
