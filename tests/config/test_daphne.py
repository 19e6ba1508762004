"""Daphne's requests skip Twisted's POST form parsing (config/daphne.py),
and Django still reads every form: the desk's login works with a
multipart body through a real Daphne."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import requests
from daphne.http_protocol import WebRequest

from config.daphne import skip_form_parsing
from tests.dashboard.conftest import daphne

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def web(stack_env, run_dir):
    with daphne(stack_env, run_dir) as started:
        yield started


def _request() -> WebRequest:
    """A WebRequest on a channel that has what its constructor reads."""
    server = SimpleNamespace(protocol_connected=lambda request: None)
    channel = SimpleNamespace(
        getPeer=lambda: None,
        getHost=lambda: None,
        transport=None,
        factory=SimpleNamespace(server=server),
    )
    return WebRequest(channel)


def test_twisted_does_not_parse_post_bodies_in_the_reactor():
    skip_form_parsing()
    skip_form_parsing()  # twice changes nothing
    assert _request()._parsePOSTFormSubmission is False


def test_django_reads_a_multipart_login_through_daphne(web, django_user_model):
    django_user_model.objects.create_user(username="erin", password="erin-pw-2026")
    http = requests.Session()
    page = http.get(f"{web.url}/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    fields = {"username": "erin", "password": "erin-pw-2026", "csrfmiddlewaretoken": token}
    answer = http.post(
        f"{web.url}/login/",
        files={name: (None, value) for name, value in fields.items()},  # multipart/form-data
        headers={"Referer": f"{web.url}/login/"},
        allow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 302, answer.text[:500]
    assert "sessionid" in http.cookies
