"""Signed inbound deliveries with hostile values (issue 27, case 6): a 400
with the reason, an audit row an admin sees (`inbound.refused`, with the
event id the helpdesk can re-send), nothing else written; never a 500."""

from __future__ import annotations

import itertools
import json
import time

import pytest
from django.conf import settings
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agents.audit import AuditEntry
from agents.models import Session
from api.inbound import sign

pytestmark = pytest.mark.django_db


def _deliver(body: bytes):
    signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()))
    return Client().post(
        "/api/inbound/helpdesk",
        body,
        content_type="application/json",
        headers={"Agentdesk-Signature": signature},
    )


def _event(n: int, **ticket) -> dict:
    base = {"id": f"T-{n}", "subject": "Where is it", "customer_email": "a@example.com"}
    return {"id": f"evt_hostile_{n}", "type": "ticket.created", "ticket": {**base, **ticket}}


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


HOSTILE = {
    "nul in a field": json.dumps(_event(1, subject="a\x00b")).encode(),
    "300-character ticket id": json.dumps(_event(2, id="7" * 300)).encode(),
    "nul in the ticket id": json.dumps(_event(3, id="12\x0034")).encode(),
    "NaN": json.dumps(_event(4)).replace('"Where is it"', "NaN").encode(),
    "deep nesting": (json.dumps(_event(5))[:-2] + ', "extra": ' + _nested(5000) + "}}").encode(),
    "a nul in a key": json.dumps(_event(6, **{"k\x00": 1})).encode(),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_signed_delivery_is_a_400_an_admin_sees(case):
    body = HOSTILE[case]
    response = _deliver(body)
    assert response.status_code == 400, response.content
    refused = AuditEntry.objects.get(kind="inbound.refused")
    assert refused.detail["reason"] and refused.detail["bytes"] == len(body)
    if case != "deep nesting":
        assert refused.detail["event_id"].startswith("evt_hostile_")
    assert not Session.objects.exists()


def test_a_long_customer_address_is_cut_not_a_500():
    response = _deliver(json.dumps(_event(7, customer_email="c" * 1000)).encode())
    assert response.status_code == 202


_ids = itertools.count()
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@hypothesis_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ticket_id=st.one_of(st.text(max_size=220), st.integers(), JSON),
    fields=st.dictionaries(st.sampled_from(["subject", "body", "order_id", "x"]), JSON, max_size=3),
    kind=st.sampled_from(["ticket.created", "ticket.replied", "other"]),
)
def test_no_signed_body_gives_a_500(ticket_id, fields, kind):
    event = {"id": f"evt_h{next(_ids)}", "type": kind, "ticket": {"id": ticket_id, **fields}}
    body = json.dumps(event, allow_nan=True).encode()
    response = _deliver(body)
    assert response.status_code in (200, 202, 400), (response.status_code, body[:300])
