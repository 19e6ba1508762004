"""No form field of the admin and account pages makes a request fail
(issue 27): webhooks, tokens, login, with generated values. Webhook URLs are
drawn from literals and strings without "//", so nothing is resolved
beyond this machine."""

from __future__ import annotations

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.roles import ADMIN, assign_role
from tests.dashboard.test_input_bounds import hostile_text

pytestmark = pytest.mark.django_db

URLS = st.one_of(
    hostile_text.filter(lambda s: "//" not in s),
    st.sampled_from(
        [
            "http://127.0.0.1:9/x",
            "http://[::1]/",
            "http://2130706433/",
            "http://user:pw@127.0.0.1/",
            "https://93.184.215.14/\x00",
            "http://127.0.0.1:99999/",
            "http://[::ffff:127.0.0.1",
            "http://0x7f.1/",
        ]
    ),
)
FORMS = {
    "/integrations/webhooks/": {
        "url": URLS,
        "event_types": hostile_text,
        "description": hostile_text,
    },
    "/integrations/webhooks/1/active": {"active": hostile_text},
    "/integrations/deliveries/1/resend": {"x": hostile_text},
    "/account/tokens/": {"name": hostile_text, "action": hostile_text},
    "/account/tokens/1/revoke": {"x": hostile_text},
    "/login/": {"username": hostile_text, "password": hostile_text},
}


@pytest.fixture
def admin(carol, settings) -> Client:
    settings.AGENTDESK_EGRESS_ALLOW = []
    assign_role(carol, ADMIN)
    client = Client(REMOTE_ADDR="10.9.9.9")
    client.force_login(carol)
    return client


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), path=st.sampled_from(sorted(FORMS)))
def test_property_no_form_field_makes_a_form_fail(admin, data, path):
    fields = data.draw(st.fixed_dictionaries({}, optional=FORMS[path]))
    response = admin.post(path, fields)
    assert response.status_code < 500, (path, fields, response.status_code)
