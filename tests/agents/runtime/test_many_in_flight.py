"""Many sessions in flight in ONE worker process, at a real model's pace.

The sandbox answers every model call after a set time to first token
(POST /_model_pace), so a triage turn of five model calls takes at least
five times that. A worker that overlapped nothing would need the sum of all
sessions' times; these tests hold it to a small multiple of ONE session's,
and count the worker's Postgres connections while it runs.
"""

from __future__ import annotations

import signal
import threading
import time

import psycopg
import pytest
from django.db import connection

from agents.models import Event, Session, ToolCall, Turn
from tests.agents.helpers import (
    assert_invariants,
    deliver_ticket,
    kinds,
    take_over_liveness,
    wait_turn,
)
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODEL_CALLS_PER_LOOKUP = 5  # customer, order, classify, reply, final text
# Orders with room for many small refunds (sandbox/seed.py), and their customers.
ROOMY_ORDERS = [
    ("ORD-1005", "charlie.nguyen@example.org"),
    ("ORD-1014", "grace.liu@example.com"),
    ("ORD-1012", "farid.haddad@example.org"),
]
LOOKUP_ORDERS = [
    ("ORD-1002", "alice.martin@example.com"),
    ("ORD-1007", "dana.kowalski@example.com"),
    ("ORD-1012", "farid.haddad@example.org"),
    ("ORD-1014", "grace.liu@example.com"),
]


def lookup_ticket(sandbox, index: int) -> dict:
    order, email = LOOKUP_ORDERS[index % len(LOOKUP_ORDERS)]
    return sandbox.ticket(
        email=email,
        subject=f"Where is my order {order}?",
        body=f"Hi, could you tell me where order {order} is? Thanks ({index})",
        order_id=order,
    )


def refund_ticket(sandbox, index: int) -> dict:
    order, email = ROOMY_ORDERS[index % len(ROOMY_ORDERS)]
    return sandbox.ticket(
        email=email,
        subject="Damaged item",
        body=f"The item from order {order} arrived damaged. Please refund $2. ({index})",
        order_id=order,
    )


class ConnectionWatch:
    """Samples, every 20 ms on a connection of its own, how many Postgres
    connections one process holds (its application_name names its pid)."""

    def __init__(self, pid: int) -> None:
        self.name = f"agentdesk pid={pid}"
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        db = connection.settings_dict
        self._conn = psycopg.connect(
            dbname=db["NAME"], user=db["USER"], host=db["HOST"], port=db["PORT"], autocommit=True
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            (count,) = self._conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [self.name]
            ).fetchone()
            self.peak = max(self.peak, count)
            self.samples += 1

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        self._conn.close()
        return self.peak


def _pace(sandbox, ttft_ms: int) -> None:
    sandbox.post("/_model_pace", {"ttft_ms": ttft_ms, "tokens_per_s": 0})


def _finished(sessions: list[Session]) -> list[Turn] | None:
    turns = list(Turn.objects.filter(session__in=sessions, number=1, status__in=Turn.TERMINAL))
    return turns if len(turns) == len(sessions) else None


def test_200_sessions_in_one_worker_overlap_their_model_waits(sandbox, workers, settings):
    """200 lookups at 2 s a model call: one process, all of them at once."""
    pool_size = settings.AGENTDESK_DB_POOL_SIZE
    _pace(sandbox, 2000)
    worker = workers.start("many", AGENTDESK_WORKER_SLOTS="200")
    watch = ConnectionWatch(worker.pid)
    tickets = [lookup_ticket(sandbox, i) for i in range(200)]
    started = time.monotonic()
    sessions = [deliver_ticket(t) for t in tickets]

    turns = wait_for(lambda: _finished(sessions), timeout=240, what="all 200 turns to end")
    makespan = time.monotonic() - started
    peak = watch.stop()

    assert {t.status for t in turns} == {"succeeded"}, workers.logs()
    floor = MODEL_CALLS_PER_LOOKUP * 2.0  # one session alone takes at least this
    # Serially this is 200 x 10 s; overlapped it is a small multiple of one
    # session's time (generous, for a loaded 2-core machine).
    assert makespan < 6 * floor, f"200 sessions took {makespan:.1f}s (floor {floor:.0f}s)"
    # The pool plus the liveness lock, however many sessions were in flight.
    assert watch.samples > 10 and 0 < peak <= pool_size + 1, (peak, pool_size)
    print(f"200 sessions: makespan {makespan:.1f}s, floor {floor:.0f}s, peak connections {peak}")
    for session in sessions[:20]:
        assert_invariants(session)


def test_sigkill_with_100_sessions_mid_call_recovers_every_one_and_refunds_once(sandbox, workers):
    """100 sessions mid-call, a third with a refund held in flight at the
    provider: SIGKILL the one worker, start a fresh one; every turn ends,
    each refund happened exactly once, no step was recorded twice."""
    _pace(sandbox, 1000)
    sandbox.fault(
        target="payments",
        kind="latency",
        phase="in_flight",
        latency_ms=3000,
        count=1000,
        match={"path_prefix": "/v1/refunds"},
    )
    victim = workers.start("victim")
    tickets = [
        refund_ticket(sandbox, i) if i % 3 == 0 else lookup_ticket(sandbox, i) for i in range(100)
    ]
    sessions = [deliver_ticket(t) for t in tickets]
    refunding = sessions[::3]

    def refunds_in_flight():
        return (
            ToolCall.objects.filter(
                session__in=refunding, name="issue_refund", status="running"
            ).count()
            >= len(refunding) // 2
        )

    wait_for(refunds_in_flight, timeout=90, what="half the refunds in flight")
    in_flight = Session.objects.filter(pk__in=[s.pk for s in sessions], status="running").count()
    assert in_flight >= 50, f"only {in_flight} sessions were mid-turn"
    victim.kill(signal.SIGKILL)
    victim.popen.wait(10)
    workers.start("heir")

    turns = wait_for(lambda: _finished(sessions), timeout=180, what="all 100 turns to end")
    assert {t.status for t in turns} == {"succeeded"}, workers.logs()
    recovered = Event.objects.filter(session__in=sessions, kind="recovery").count()
    assert recovered >= in_flight // 2, recovered
    refunds = sandbox.refunds()
    calls = ToolCall.objects.filter(session__in=refunding, name="issue_refund")
    assert len(calls) == len(refunding)
    assert sorted(r["key"] for r in refunds) == sorted(c.idempotency_key for c in calls)
    assert {c.status for c in calls} == {"succeeded"}
    for session in sessions:
        assert_invariants(session)


def test_a_claim_taken_over_while_its_model_call_waits_records_nothing(sandbox, workers):
    """The liveness connection of the owner is killed while its slot waits on
    a 4 s model call: the session is handed to another slot (fence + 1), and
    the first slot's reply, when it comes, hits LostClaim and writes nothing."""
    _pace(sandbox, 4000)
    worker = workers.start("victim")
    session = deliver_ticket(lookup_ticket(sandbox, 0))
    wait_for(  # the request log has it from its arrival, before the reply
        lambda: sandbox.get("/_model_requests", last=1)["requests"],
        timeout=30,
        what="the first model call in flight",
    )
    runtime = session.runtime
    runtime.refresh_from_db()
    first_owner, first_fence, seen = runtime.owner, runtime.fence, runtime.last_seq
    assert first_owner and runtime.owner_process
    # Its key taken by "another process": the worker must draw a new one, and
    # the session is taken over (the worker would take its own key back).
    take_over_liveness(runtime.owner, runtime.owner_process)

    turn = wait_turn(session, timeout=90)
    assert turn.status == "succeeded", workers.logs()
    worker.wait_for_log(r"claim lost, stopping", timeout=30)
    # The stale slot wrote nothing after the takeover: its reply to the call
    # it was waiting on is nowhere, and each position was written once.
    assert not Event.objects.filter(session=session, actor=first_owner, seq__gt=seen).exists()
    runtime.refresh_from_db()
    assert runtime.fence > first_fence
    assert "recovery" in kinds(session)
    assert_invariants(session)


def test_a_hung_model_call_is_cut_at_its_timeout_while_50_others_move(sandbox, workers):
    """One model stream goes silent for a minute; the engine cuts it at
    AGENTDESK_MODEL_TIMEOUT_S (3 s) and retries the step later, while the 50
    other sessions of the same process finish meanwhile."""
    _pace(sandbox, 300)
    workers.start("w1", AGENTDESK_MODEL_TIMEOUT_S="3")
    sandbox.fault(target="messages", kind="stall", latency_ms=60_000, count=1)
    hung = deliver_ticket(lookup_ticket(sandbox, 0))
    wait_for(  # a rule used up leaves the list
        lambda: not sandbox.get("/_faults")["faults"],
        timeout=30,
        what="the stalled model stream",
    )
    stalled_at = time.monotonic()
    others = [deliver_ticket(lookup_ticket(sandbox, i)) for i in range(1, 51)]

    def cut():
        return Event.objects.filter(session=hung, kind="model.failed").first()

    failure = wait_for(cut, timeout=30, what="the hung call to be cut")
    cut_after = time.monotonic() - stalled_at
    assert "no reply within 3s" in failure.data["reason"], failure.data
    assert cut_after < 15, f"cut after {cut_after:.1f}s"
    turns = wait_for(lambda: _finished(others), timeout=120, what="the 50 others to end")
    assert {t.status for t in turns} == {"succeeded"}, workers.logs()
    # The hung session's step was tried again and its turn ends too.
    assert wait_turn(hung, timeout=60).status == "succeeded", workers.logs()
    assert_invariants(hung)
