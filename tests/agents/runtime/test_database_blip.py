"""A database blip does not pay for the model twice (issue 26, case 6).

A real worker reaches the test database through a TCP proxy of the test's
own (bench/chaos/proxy.py). With 20 sessions mid-turn at 2 s a model call,
the proxy resets every connection of the worker (its pool and its liveness
lock: as when every backend is terminated) and refuses new ones until the
worker has met the cut; then it heals. Records that failed on the lost
connection are made again on a new one while their fence holds, the worker
keeps its liveness key, and so every model call the sandbox answered is
recorded once: none is paid twice.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

import pytest

from agents.models import Event, Session, Turn
from bench.chaos.proxy import Proxy
from tests.agents.helpers import assert_invariants, deliver_ticket
from tests.agents.runtime.test_many_in_flight import lookup_ticket
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SESSIONS = 20


def _finished(sessions: list[Session]) -> list[Turn] | None:
    turns = list(Turn.objects.filter(session__in=sessions, number=1, status__in=Turn.TERMINAL))
    return turns if len(turns) == len(sessions) else None


def test_every_connection_reset_mid_turn_pays_no_model_call_twice(sandbox, workers):
    url = urlsplit(workers.env["DATABASE_URL"])
    proxy = Proxy((url.hostname or "127.0.0.1", url.port or 5432)).start()
    through = urlunsplit(url._replace(netloc=f"{url.username}@127.0.0.1:{proxy.port}"))
    sandbox.post("/_model_pace", {"ttft_ms": 2000, "tokens_per_s": 0})
    try:
        worker = workers.start("blip", DATABASE_URL=through)
        sessions = [deliver_ticket(lookup_ticket(sandbox, i)) for i in range(SESSIONS)]
        wait_for(
            lambda: (
                Event.objects.filter(session__in=sessions, kind="model.replied").count() >= SESSIONS
            ),
            timeout=90,
            what="a model reply per session on record (every session mid-turn)",
        )
        proxy.cut()
        # Healed once the worker has met the cut (a failed connect or record).
        worker.wait_for_log(
            r"error connecting in 'pool|record lost its connection|liveness connection lost",
            timeout=60,
        )
        proxy.heal()

        turns = wait_for(lambda: _finished(sessions), timeout=180, what="every turn to end")
    finally:
        proxy.stop()

    assert {t.status for t in turns} == {"succeeded"}, workers.logs()
    asked = sandbox.stats()["model_requests"]["total"]
    replied = Event.objects.filter(session__in=sessions, kind="model.replied").count()
    failed = Event.objects.filter(session__in=sessions, kind="model.failed").count()
    paid_twice = asked - replied - failed
    print(f"model calls: asked {asked}, recorded {replied}, failed {failed}")
    assert paid_twice <= 0, (asked, replied, failed, worker.log()[-4000:])
    assert not re.search(
        r"Unrecoverable|Traceback \(most recent call last\):\n.*engine", worker.log()
    )
    for session in sessions:
        assert_invariants(session)
