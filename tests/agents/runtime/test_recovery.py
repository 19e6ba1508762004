"""SIGKILL a worker at each dangerous moment of a refund; a new worker recovers.

In every case: exactly one refund exists in the sandbox, the turn finishes,
the recovery is an event in the log, and no step is recorded twice (no model
call is repeated, every tool_use has one tool_result).
"""

from __future__ import annotations

import signal

import pytest

from agents.models import Message, ToolCall
from tests.agents.helpers import (
    assert_invariants,
    deliver_ticket,
    kinds,
    take_over_liveness,
    wait_turn,
)
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SMALL_REFUND = "The mugs from order ORD-1001 arrived chipped. Please refund $20."


def _start(sandbox, workers):
    victim = workers.start("victim")
    workers.beat()  # the sweeper notices the dead owner
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Chipped mugs",
        body=SMALL_REFUND,
        order_id="ORD-1001",
    )
    return victim, deliver_ticket(ticket)


def _refund_call(session, status="running"):
    return ToolCall.objects.filter(session=session, name="issue_refund", status=status).first()


def _kill_and_recover(victim, workers, session):
    victim.kill(signal.SIGKILL)
    victim.popen.wait(10)
    workers.start("rescuer")
    return wait_turn(session, timeout=40)


def _assert_exactly_once(sandbox, session, turn, workers):
    assert turn.status == "succeeded", workers.logs()
    call = ToolCall.objects.get(session=session, name="issue_refund")
    assert [r["key"] for r in sandbox.refunds()] == [call.idempotency_key]
    assert "recovery" in kinds(session)
    assistant_rows = Message.objects.filter(session=session, role="assistant").count()
    assert sandbox.stats()["model_requests"]["total"] == assistant_rows  # no reply asked twice
    assert_invariants(session)
    return call


def test_refund_runs_once_when_worker_dies_after_reply_recorded_before_tool(sandbox, workers):
    # The refund tool first reads the order; hold that read so the worker is
    # killed after the reply (and the call's `running` mark) committed but
    # before anything reached the payment provider.
    sandbox.fault(
        target="helpdesk",
        kind="latency",
        latency_ms=3000,
        count=2,
        match={"path_prefix": "/helpdesk/orders"},
    )
    victim, session = _start(sandbox, workers)
    wait_for(lambda: _refund_call(session), timeout=30, what="the refund call marked running")
    assert sandbox.refunds() == []

    turn = _kill_and_recover(victim, workers, session)

    call = _assert_exactly_once(sandbox, session, turn, workers)
    assert call.attempts == 2


def test_refund_runs_once_when_worker_dies_while_refund_in_flight(sandbox, workers):
    sandbox.fault(
        target="payments",
        kind="latency",
        phase="in_flight",
        latency_ms=1500,
        match={"path_prefix": "/v1/refunds"},
    )
    victim, session = _start(sandbox, workers)
    wait_for(
        lambda: sandbox.stats()["idempotency"]["in_flight"],
        timeout=30,
        what="the refund request in flight at the provider",
    )

    turn = _kill_and_recover(victim, workers, session)

    _assert_exactly_once(sandbox, session, turn, workers)


def test_refund_runs_once_when_worker_dies_after_provider_committed(sandbox, workers):
    sandbox.fault(
        target="payments",
        kind="latency",
        phase="after_commit",
        latency_ms=5000,
        match={"path_prefix": "/v1/refunds"},
    )
    victim, session = _start(sandbox, workers)
    wait_for(lambda: sandbox.refunds(), timeout=30, what="the provider to commit the refund")
    assert _refund_call(session) is not None  # ...while our record of it is not yet written

    turn = _kill_and_recover(victim, workers, session)

    call = _assert_exactly_once(sandbox, session, turn, workers)
    assert call.external_id == sandbox.refunds()[0]["id"]  # the replayed first response


def test_a_stale_owner_whose_connection_was_killed_cannot_record(sandbox, workers):
    """pg_terminate_backend frees the owner process's liveness lock while it
    still works: a second worker takes over (fence + 1) and the first one's
    late record writes nothing. (The refund takes long enough for the
    takeover to come after the first worker's moment of rejoining, in which
    it takes over nothing: ownership.rejoining.)"""
    sandbox.fault(
        target="payments",
        kind="latency",
        phase="in_flight",
        latency_ms=6000,
        match={"path_prefix": "/v1/refunds"},
    )
    _victim, session = _start(sandbox, workers)
    workers.start("second")
    wait_for(
        lambda: sandbox.stats()["idempotency"]["in_flight"],
        timeout=30,
        what="the refund request in flight",
    )
    # Its key drawn by "another process" meanwhile, so the first worker must
    # take a new one (left alone, it takes its own back: ownership.py).
    runtime = session.runtime
    runtime.refresh_from_db()
    assert runtime.owner_process, "no live process held the session"
    take_over_liveness(runtime.owner, runtime.owner_process)

    turn = wait_turn(session, timeout=40)

    _assert_exactly_once(sandbox, session, turn, workers)


def test_a_step_that_keeps_killing_workers_ends_failed_not_looping(sandbox, workers):
    sandbox.fault(
        target="helpdesk",
        kind="latency",
        latency_ms=4000,
        count=10,
        match={"path_prefix": "/helpdesk/orders"},
    )
    workers.env["AGENTDESK_MAX_STEP_ATTEMPTS"] = "1"
    victim, session = _start(sandbox, workers)
    for attempt in (1, 2):
        wait_for(
            lambda: _refund_call(session) or _lookup_running(session),
            timeout=30,
            what="a call in flight",
        )
        victim.kill(signal.SIGKILL)
        victim.popen.wait(10)
        victim = workers.start(f"rescuer{attempt}")
        if attempt == 1:
            wait_for(lambda: "tool.reissued" in kinds(session), timeout=20, what="the reissue")

    turn = wait_turn(session, timeout=30)
    assert turn.status == "failed", workers.logs()
    assert "poison step" in turn.error
    assert_invariants(session)


def _lookup_running(session):
    return ToolCall.objects.filter(session=session, name="lookup_order", status="running").first()
