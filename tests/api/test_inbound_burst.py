"""A burst is a batch: tickets that arrive at once through the webhook are
each claimed once and answered once, however many wait in the queue."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.conf import settings

from agents.models import Session, SessionRuntime, Turn
from api.inbound import sign
from tests.agents.helpers import assert_invariants
from tests.agents.runtime.test_many_in_flight import lookup_ticket
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BURST = 40


def _webhook(ticket: dict) -> tuple[bytes, dict[str, str]]:
    event = {"id": f"evt_burst_{ticket['id']}", "type": "ticket.created"}
    event.update(created=int(time.time()), ticket=ticket, message={"body": ticket["body"]})
    body = json.dumps(event).encode()
    signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()))
    return body, {"Content-Type": "application/json", "Agentdesk-Signature": signature}


def test_a_burst_of_tickets_is_claimed_once_and_answered_once_each(sandbox, web, workers):
    """40 tickets posted by 16 senders at once (each delivery twice, as a
    sender that lost our answer retries), all queued before a worker starts:
    one session and one turn per ticket, each session claimed once (the
    whole turn in one task: no duplicate trigger was claimed, none swept
    again), and one reply per ticket at the helpdesk."""
    tickets = [lookup_ticket(sandbox, i) for i in range(BURST)]

    deliveries = [_webhook(ticket) for ticket in tickets]

    def deliver(delivery: tuple[bytes, dict[str, str]]) -> int:
        body, headers = delivery
        url = f"{web.url}/api/inbound/helpdesk"
        return requests.post(url, data=body, headers=headers, timeout=60).status_code

    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(deliver, deliveries + deliveries))
    assert statuses == [202] * (2 * BURST)
    keys = [f"ticket:{t['id']}" for t in tickets]
    assert Session.objects.filter(key__in=keys).count() == BURST
    assert Turn.objects.filter(session__key__in=keys).count() == BURST

    workers.start("w1")
    workers.start("w2")
    wait_for(
        lambda: Turn.objects.filter(session__key__in=keys, status="succeeded").count() == BURST,
        timeout=180,
        what=f"the {BURST} turns to succeed",
    )
    fences = list(
        SessionRuntime.objects.filter(session__key__in=keys).values_list("fence", flat=True)
    )
    assert fences == [1] * BURST, f"claims per session: {sorted(fences)}"
    for ticket in tickets:
        detail = sandbox.get(f"/helpdesk/tickets/{ticket['id']}")
        assert len(detail["replies"]) == 1, (ticket["id"], detail["replies"])
    for session in Session.objects.filter(key__in=keys):
        assert_invariants(session)
