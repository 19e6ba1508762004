"""While the database is away the desk answers 503 with a page that says so,
never 500 (issue 26, case 6); when it is back, the desk is back.

A real Daphne reaches the test database through a TCP proxy of the test's
own (bench/chaos/proxy.py): cutting it resets every connection of the web
process and refuses new ones, as a database restart does, while the machine's
PostgreSQL serves everyone else.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest
import requests

from bench.chaos.proxy import Proxy
from tests.dashboard.conftest import cookie_for, daphne
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_desk_answers_503_while_the_database_is_away(stack_env, run_dir, alice):
    url = urlsplit(stack_env["DATABASE_URL"])
    proxy = Proxy((url.hostname or "127.0.0.1", url.port or 5432)).start()
    through = url._replace(netloc=f"{url.username}@127.0.0.1:{proxy.port}")
    env = {
        **stack_env,
        "DATABASE_URL": urlunsplit(through),
        "AGENTDESK_DB_POOL_TIMEOUT_S": "2",  # a request waits this long for a connection
    }
    cookie = cookie_for(alice)
    try:
        with daphne(env, run_dir) as web:

            def sessions_page() -> requests.Response:
                return requests.get(f"{web.url}/", headers={"Cookie": cookie}, timeout=30)

            assert sessions_page().status_code == 200
            proxy.cut()
            away = sessions_page()
            assert away.status_code == 503, away.text[:2000]
            assert "cannot reach its database" in away.text
            assert away.headers["Retry-After"].isdigit()

            proxy.heal()
            wait_for(
                lambda: sessions_page().status_code == 200,
                timeout=30,
                what="the desk to answer again",
            )
    finally:
        proxy.stop()
