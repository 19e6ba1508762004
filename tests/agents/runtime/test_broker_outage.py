"""A Redis outage under load: workers keep driving their sessions and live.

The worker runs against a redis-server of this test's own (never the
machine's), which the test SIGKILLs while dozens of sessions are mid-turn,
keeps away until the worker has tried and failed to reconnect a few times,
then starts again on the same port. The worker (and beat) must not exit (celery 5.7 /
kombu 5.7 died here with "Unrecoverable error: AttributeError ... 'hostname'",
issue 26), must say in its log that it lost and found the broker, must finish
every turn, and must count the outage in /metrics.
"""

from __future__ import annotations

import re
import time

import pytest

from agents.models import Event, Session, SessionRuntime, Turn
from bench.chaos.stack import RedisServer
from tests.agents.helpers import assert_invariants, deliver_ticket
from tests.agents.runtime.test_many_in_flight import lookup_ticket
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SESSIONS = 40


def _finished(sessions: list[Session]) -> list[Turn] | None:
    turns = list(Turn.objects.filter(session__in=sessions, number=1, status__in=Turn.TERMINAL))
    return turns if len(turns) == len(sessions) else None


@pytest.fixture
def private_redis(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


def test_worker_survives_a_redis_outage_under_load(sandbox, workers, private_redis, tmp_path):
    sandbox.post("/_model_pace", {"ttft_ms": 1500, "tokens_per_s": 0})
    beat = workers.beat(REDIS_URL=private_redis.url, CELERY_BROKER_URL=private_redis.url)
    worker = workers.start(
        "outage",
        REDIS_URL=private_redis.url,
        CELERY_BROKER_URL=private_redis.url,
        AGENTDESK_WORKER_SLOTS="100",
        PROMETHEUS_MULTIPROC_DIR=str(_metrics_dir(tmp_path)),
    )
    # Delivered here, enqueued on the test's own broker (which no worker
    # reads): the worker's sweeper finds them runnable and sends the triggers
    # on the private Redis.
    sessions = [deliver_ticket(lookup_ticket(sandbox, i)) for i in range(SESSIONS)]
    wait_for(
        lambda: (
            Session.objects.filter(pk__in=[s.pk for s in sessions], status="running")
            .exclude(runtime__owner="")
            .count()
            >= SESSIONS // 2
        ),
        timeout=60,
        what="half the sessions mid-turn",
    )

    private_redis.stop()  # SIGKILL: the broker and the trigger marks are gone
    # Away until the worker has failed to reconnect four times (about
    # 0 + 1 + 2 + 3 s of its backoff): an outage of several tries.
    wait_for(
        lambda: (
            len(re.findall(r"Cannot connect to redis", worker.log())) >= 4
            or worker.popen.poll() is not None
        ),
        timeout=60,
        what="the worker to retry the broker four times",
    )
    assert worker.popen.poll() is None, f"the worker exited:\n{worker.log()[-6000:]}"
    private_redis.start()

    turns = wait_for(lambda: _finished(sessions), timeout=120, what="every turn to end")
    assert worker.popen.poll() is None, f"the worker exited:\n{worker.log()[-6000:]}"
    assert beat.popen.poll() is None, f"beat exited:\n{beat.log()[-6000:]}"
    assert {t.status for t in turns} == {"succeeded"}
    # The turns may end before the worker is back on the broker: what it
    # could not send went to its own slots (agents/runtime/dispatch.py).
    worker.wait_for_log(r"broker connection back", timeout=60)
    log = worker.log()
    assert "Unrecoverable error" not in log, log[-6000:]
    assert re.search(r"broker connection lost", log), log[-3000:]
    for session in sessions:
        assert_invariants(session)
    figures = _metrics(tmp_path / "prometheus")
    assert figures["agentdesk_broker_disconnects_total"] >= 1, figures
    assert figures["agentdesk_broker_reconnects_total"] >= 1, figures
    assert figures["agentdesk_broker_down"] == 0, figures


def test_a_worker_killed_while_the_broker_is_away_is_taken_over_before_it_is_back(
    sandbox, workers, private_redis
):
    """The live worker's sweeper finds the dead one's sessions in PostgreSQL
    and, with no broker to send their triggers on, runs them on slots of
    its own (agents/runtime/dispatch.py): they are recovered, and their
    turns end, while Redis is still away. (They waited for Redis: a kill
    inside a 12 s outage took 14 s to recover in the chaos campaign.)"""
    sandbox.post("/_model_pace", {"ttft_ms": 1500, "tokens_per_s": 0})
    env = {"REDIS_URL": private_redis.url, "CELERY_BROKER_URL": private_redis.url}
    doomed = workers.start("doomed", AGENTDESK_WORKER_SLOTS="50", **env)
    sessions = [deliver_ticket(lookup_ticket(sandbox, i)) for i in range(12)]
    owned = lambda: list(  # noqa: E731
        SessionRuntime.objects.filter(
            session__in=sessions, owner__contains=f":{doomed.pid}/"
        ).values_list("session_id", flat=True)
    )
    wait_for(lambda: len(owned()) >= 6, timeout=60, what="the doomed worker mid-turn")
    live = workers.start("live", AGENTDESK_WORKER_SLOTS="50", **env)

    private_redis.stop()  # the broker away...
    orphans = owned()
    doomed.kill()  # ...and a worker dies meanwhile
    killed_at = time.monotonic()

    def recovered():
        return all(
            Event.objects.filter(session_id=sid, kind="recovery").exists() for sid in orphans
        )

    wait_for(recovered, timeout=30, what="the dead worker's sessions taken over")
    recovered_s = time.monotonic() - killed_at
    turns = wait_for(lambda: _finished(sessions), timeout=60, what="every turn to end")
    assert not private_redis.up and not private_redis.ping()  # all of it with Redis away
    assert {t.status for t in turns} == {"succeeded"}, recovered_s
    assert re.search(r"broker away: session \d+ goes to a slot of this process", live.log())

    private_redis.start()
    for session in sessions:
        assert_invariants(session)


def _metrics(path) -> dict[str, float]:
    """What /metrics sums from the workers' files (agents/observability/metrics.py)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    return {
        sample.name: sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name.startswith("agentdesk_broker")
    }


def _metrics_dir(tmp_path):
    path = tmp_path / "prometheus"
    path.mkdir()
    return path
