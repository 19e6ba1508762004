"""The demo's lost-parcel ticket: opened in the sandbox, worked with the
carrier_claims profile (the browser on the carrier portal)."""

from __future__ import annotations

import requests

from agents import services
from agents.models import Session

PARCEL_SUBJECT = "Demo: parcel TRK1014 never arrived"
PARCEL_TICKET = {
    "customer_email": "grace.liu@example.com",
    "order_id": "ORD-1014",
    "subject": PARCEL_SUBJECT,
    "body": "My espresso machine (order ORD-1014, tracking TRK1014) never arrived. "
    "Please file a claim with the carrier.\n\nGrace",
}


def parcel_ticket_open(*, sandbox_url: str) -> str:
    """Open the ticket unless the sandbox has it; its session runs carrier_claims."""
    base = sandbox_url.rstrip("/")
    existing = requests.get(f"{base}/helpdesk/tickets?limit=1000", timeout=10).json()["tickets"]
    if any(t["subject"] == PARCEL_SUBJECT for t in existing):
        return "Demo parcel ticket: the sandbox has it already."
    response = requests.post(f"{base}/helpdesk/tickets", json=PARCEL_TICKET, timeout=10)
    response.raise_for_status()
    key = f"ticket:{response.json()['id']}"
    # The helpdesk's webhook may have made the session first (with the default
    # profile): the profile is read at every claim, so the next step already
    # offers the browser, and the lost-parcel flow starts there.
    services.session_get_or_create(key=key, profile="carrier_claims")
    Session.objects.filter(key=key).update(profile="carrier_claims")
    return f"Demo parcel ticket opened: {key} (the carrier portal; an approval appears)"
