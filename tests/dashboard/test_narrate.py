"""manage.py narrate: `make run`'s readable lines, from the event log."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Event
from dashboard.management.commands.narrate import Command
from tests.dashboard import factories

pytestmark = pytest.mark.django_db


def _narrator() -> Command:
    command = Command(stdout=io.StringIO())
    command.url = "http://desk"
    command.sessions = {}
    return command


def test_a_parked_refund_is_told_with_its_approval_page():
    call = factories.parked_call()
    narrator = _narrator()
    told = {}
    narrator.poll(timezone.now() - timedelta(minutes=1), told)
    lines = narrator.stdout.getvalue().splitlines()
    key = call.session.key
    approval = call.approval
    assert f"{key}: waits for approval: issue_refund" in "\n".join(lines)
    assert any(line.endswith(f"http://desk/approvals/{approval.id}/") for line in lines)
    # A second poll tells nothing twice.
    narrator.poll(timezone.now() - timedelta(minutes=1), told)
    assert narrator.stdout.getvalue().splitlines() == lines


def test_a_ticket_arrives_and_its_turn_ends_with_figures():
    owner = factories.session(title="Broken grinder")
    made = factories.turn(owner)
    narrator = _narrator()
    events = {e.kind: e for e in Event.objects.filter(session=owner)}
    assert narrator.line(events["turn.succeeded"]).startswith(
        f"{owner.key}: Turn {made.number} succeeded ("
    )
    accepted = Event(session=owner, seq=99, kind="turn.accepted")
    accepted.data = {"number": 1, "trigger": "customer_message"}
    assert narrator.line(accepted) == (
        f'{owner.key} arrived: "Broken grinder" from {owner.customer}'
        f"  http://desk/sessions/{owner.id}/"
    )
