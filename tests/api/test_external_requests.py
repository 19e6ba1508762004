"""Approval requests from outside agents (issue 27, case 8): a support
token may attach one only to sessions the profile allows (or its own), and
the card and the session say unmistakably that an outside agent asked."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.errors import Forbidden
from api.external import external_approval_request
from tests.dashboard import factories

pytestmark = pytest.mark.django_db


def _ask(user, key: str = ""):
    return external_approval_request(
        user=user, tool_name="refund", arguments={"amount": 5}, reason="why", session_key=key
    )


def test_support_may_not_attach_a_request_to_a_customers_session(alice, carol, settings):
    customer = factories.pending_approval().session  # the agent's own session, with its turn
    with pytest.raises(Forbidden):
        _ask(alice, customer.key)
    assert _ask(carol, customer.key).session_id == customer.id  # an admin may
    settings.AGENTDESK_EXTERNAL_APPROVAL_PROFILES = [customer.profile]
    assert _ask(alice, customer.key).session_id == customer.id  # the profile allows it


def test_support_may_use_a_session_of_its_own(alice):
    first = _ask(alice, "vendor:42")
    again = _ask(alice, "vendor:42")  # only outside requests made it
    assert first.session_id == again.session_id
    assert _ask(alice).session.key == "mcp:alice"


def test_the_card_and_the_session_say_an_outside_agent_asked(alice, bob):
    approval = _ask(alice, "vendor:43")
    desk = Client()
    desk.force_login(bob)
    card = desk.get(f"/approvals/{approval.id}/").content.decode()
    assert "An outside agent asked for this" in card and "alice" in card
    page = desk.get(f"/sessions/{approval.session_id}/").content.decode()
    assert "An outside agent" in page
    # An approval the session's own agent asked for says nothing of the kind.
    own = factories.pending_approval()
    assert "outside agent" not in desk.get(f"/approvals/{own.id}/").content.decode()
