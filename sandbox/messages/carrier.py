"""The triage policy's lost-parcel flow: file a claim on the carrier portal.

For a ticket like "my parcel never arrived" whose request offers the browser
tools and whose system prompt names the portal (`http://.../carrier/login`):
open the login page, fill the account (as `${secret:...}` placeholders: the
model never sees the password), log in, find the shipment, open its claim
form, describe the loss, submit it (a person approves), then reply to the
customer with the confirmation number. One browser call per response; a
failed or denied call ends the flow with what went wrong.
"""

from __future__ import annotations

import re

from sandbox.messages.transcript import Turn

LOST_RE = re.compile(
    r"never (?:arrived|came|showed up)|lost (?:parcel|package)|(?:parcel|package) (?:was |got )?lost",
    re.IGNORECASE,
)
TRACKING_RE = re.compile(r"\bTRK\d{4}\b")
PORTAL_RE = re.compile(r"(https?://[^\s\"'<>]+/carrier)/login")
CONFIRMATION_RE = re.compile(r"CLM-\d{4}-[0-9A-F]{4}")
BROWSER = "browser_"


def plan(portal: str, tracking: str) -> list[tuple[str, str, dict]]:
    return [
        ("I'll open the carrier's portal.", "browser_open", {"url": f"{portal}/login"}),
        (
            "Logging in with the shop's carrier account.",
            "browser_fill",
            {
                "fields": {
                    "username": "${secret:carrier_username}",
                    "password": "${secret:carrier_password}",
                }
            },
        ),
        ("", "browser_click", {"target": "Log in"}),
        (
            f"Looking up shipment {tracking}.",
            "browser_open",
            {"url": f"{portal}/shipments?tracking={tracking}"},
        ),
        ("It is listed; I'll open the claim form.", "browser_click", {"target": "File a claim"}),
        (
            "Describing the loss.",
            "browser_fill",
            {
                "field": "description",
                "value": f"The customer reports that parcel {tracking} never arrived.",
            },
        ),
        ("Submitting the claim (a person approves it first).", "browser_submit", {"form": "claim"}),
    ]


def decide(turn: Turn):
    """The next reply of the lost-parcel flow, or None when it does not apply."""
    from sandbox.messages.policy import Reply, ToolUse

    portal = PORTAL_RE.search(turn.system)
    tracking = TRACKING_RE.search(turn.text)
    if not (portal and tracking and LOST_RE.search(turn.text) and turn.offers("browser_open")):
        return None
    steps = plan(portal.group(1), tracking.group(0))
    done = [c for c in turn.calls if c.name.startswith(BROWSER)]
    if done and done[-1].is_error:
        why = (done[-1].result or "").strip().splitlines()[0][:300] if done[-1].result else ""
        return Reply(f"I could not file the claim with the carrier: {why}")
    if len(done) < len(steps):
        text, name, arguments = steps[len(done)]
        return Reply(text or f"Step {len(done) + 1}.", ToolUse(name, arguments))
    result = done[-1].result or ""
    number = CONFIRMATION_RE.search(result)
    confirmation = number.group(0) if number else "(no number shown)"
    if turn.offers("send_reply") and not any(c.name == "send_reply" for c in turn.calls):
        body = (
            f"I'm sorry your parcel {tracking.group(0)} never arrived. I've filed a claim "
            f"with the carrier; its confirmation number is {confirmation}."
        )
        return Reply("I'll let the customer know.", ToolUse("send_reply", {"body": body}))
    return Reply(f"Filed the lost-parcel claim with the carrier: confirmation {confirmation}.")
