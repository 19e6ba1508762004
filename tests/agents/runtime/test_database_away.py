"""A trigger that meets the database away is sent again, not dropped (issue 26).

A real worker reaches the test database through a TCP proxy of the test's
own (bench/chaos/proxy.py), with its sweeper silenced (an hour between
sweeps), so nothing but the trigger itself can bring a session back. The
proxy cuts every connection of the worker and refuses new ones; tickets
arrive meanwhile (their triggers go to Redis, which stays up), and the
worker's tasks for them fail to reach the database: taking its liveness
lock again, or claiming. Each sends its trigger again a moment later
(runtime/away.py). Once the proxy heals, every ticket is answered. Before
away.py, those triggers were dropped and the sessions waited for the
sweeper to call them lost (10 s to 2 minutes): here, for ever.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest

from agents.models import Session, Turn
from bench.chaos.proxy import Proxy
from tests.agents.helpers import assert_invariants, deliver_ticket
from tests.agents.runtime.test_many_in_flight import lookup_ticket
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TICKETS = 4


def _finished(sessions: list[Session]) -> list[Turn] | None:
    turns = list(Turn.objects.filter(session__in=sessions, number=1, status__in=Turn.TERMINAL))
    return turns if len(turns) == len(sessions) else None


def test_triggers_that_arrive_while_the_database_is_away_are_answered_once_it_is_back(
    sandbox, workers
):
    url = urlsplit(workers.env["DATABASE_URL"])
    proxy = Proxy((url.hostname or "127.0.0.1", url.port or 5432)).start()
    through = urlunsplit(url._replace(netloc=f"{url.username}@127.0.0.1:{proxy.port}"))
    try:
        worker = workers.start("away", DATABASE_URL=through, AGENTDESK_SWEEP_INTERVAL_S="3600")
        first = deliver_ticket(lookup_ticket(sandbox, 0))
        wait_for(lambda: _finished([first]), timeout=60, what="a first ticket answered")

        proxy.cut()
        sessions = [deliver_ticket(lookup_ticket(sandbox, i)) for i in range(1, TICKETS + 1)]
        for session in sessions:  # every one of them met the database away, at least once
            worker.wait_for_log(
                rf"session {session.id}: the database is away .*; trigger sent again in",
                timeout=60,
            )
        assert not _finished(sessions)
        proxy.heal()

        turns = wait_for(lambda: _finished(sessions), timeout=90, what="every ticket answered")
    finally:
        proxy.stop()

    assert {t.status for t in turns} == {"succeeded"}, worker.log()[-4000:]
    for session in sessions:
        assert_invariants(session)
