"""Cancel is explicit and durable; a client going away cancels nothing."""

from __future__ import annotations

import signal

import pytest

from agents.errors import Conflict
from agents.models import Message, Session, ToolCall, Turn
from agents.runtime import dispatch, live, store
from agents.runtime.ownership import Owner
from agents.runtime.store import steps as inner_steps
from agents.runtime.store.control import STOPPED_READ_ONLY
from agents.services import message_post, turn_cancel
from approvals.models import Approval
from approvals.services import approval_decide
from tests.agents.helpers import (
    assert_invariants,
    call_running,
    deliver_ticket,
    kinds,
    wait_turn,
)
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def streaming_slow_ticket(sandbox):
    """A ticket whose model call streams slowly: its session and turn 1, once text streams."""
    ticket = sandbox.ticket(
        email="bob.okafor@example.net",
        subject="Where is my order",
        body="Where is order ORD-1003? [[sandbox:slow]]",
        order_id="ORD-1003",
    )
    session = deliver_ticket(ticket)
    turn = Turn.objects.get(session=session, number=1)
    wait_for(lambda: live.partial_text(session.id, turn.id), what="model text streaming")
    return session, turn


def test_cancel_during_model_stream_aborts_it(sandbox, workers, alice):
    workers.start()
    session, turn = streaming_slow_ticket(sandbox)

    turn_cancel(session_id=session.id, user=alice)
    turn = wait_turn(session, timeout=10)

    assert turn.status == "canceled", workers.logs()
    assert turn.cancel_requested_by == alice
    assert "turn.cancel_requested" in kinds(session) and "turn.canceled" in kinds(session)
    assert live.partial_text(session.id, turn.id) == ""
    assert_invariants(session)
    # The session takes new turns: the transcript stayed valid.
    message_post(key=session.key, text="Any news on ORD-1003?", user=alice)
    assert wait_turn(session, number=2).status == "succeeded", workers.logs()
    assert_invariants(session)
    # A clean stop, not a dead worker: no claim ever took it for a recovery.
    assert "recovery" not in kinds(session)


def test_cancel_during_approval_wait_cancels_the_approval(sandbox, workers, alice, bob):
    workers.start()
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Broken grinder",
        body="Order ORD-1002 arrived broken, refund $189 please.",
        order_id="ORD-1002",
    )
    session = deliver_ticket(ticket)
    approval = wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        what="a pending approval",
    )
    wait_for(
        lambda: Session.objects.get(pk=session.pk).status == "waiting_for_approval",
        what="the turn parked",
    )

    turn_cancel(session_id=session.id, user=alice)

    turn = wait_turn(session, timeout=5)
    assert turn.status == "canceled"
    approval.refresh_from_db()
    assert approval.status == "canceled"
    call = ToolCall.objects.get(session=session, name="issue_refund")
    assert call.status == "canceled"
    result = Message.objects.get(session=session, position=call.result_position).content[0]
    assert result["is_error"] and "Canceled" in result["content"]
    with pytest.raises(Conflict):
        approval_decide(approval_id=approval.id, user=bob, decision="approve")
    assert sandbox.refunds() == []
    assert_invariants(session)


def test_cancel_of_a_dead_owners_turn_with_one_queued_settles_both(sandbox, workers, alice, broker):
    """Issue 26 (ticket:850 of the chaos campaign): turn 1 runs, turn 2 waits
    behind it, turn 1's worker dies, then a person cancels. Canceling the
    queued turn used to mark the session `canceled` while turn 1 still ran
    under its dead owner; the sweeper looks at running sessions only, so once
    the cancel's own trigger was lost nobody ever settled turn 1."""
    victim = workers.start("victim")
    session, first = streaming_slow_ticket(sandbox)
    second = message_post(key=session.key, text="Also, can I change the address?", user=alice)
    assert Turn.objects.get(pk=second.pk).status == "accepted"  # queued behind turn 1
    victim.kill(signal.SIGKILL)
    victim.popen.wait(10)

    turn_cancel(session_id=session.id, user=alice)
    assert Turn.objects.get(pk=second.pk).status == "canceled"
    assert Turn.objects.get(pk=first.pk).status == "running"  # its owner's to settle
    # The cancel's trigger is lost (Redis is a delivery path): only the sweeper
    # can bring the turn to a worker now.
    for key in broker.scan_iter("celery*"):
        broker.delete(key)
    broker.delete(dispatch.mark_key(session.id))
    workers.start("rescuer")
    workers.beat()

    # Before the fix: the session showed canceled, and turn 1 ran forever.
    turn = wait_turn(session, timeout=30)
    assert turn.status == "canceled", workers.logs()
    assert turn.cancel_requested_by == alice
    assert Session.objects.get(pk=session.pk).status == "canceled"
    assert "recovery" in kinds(session)  # a new slot took the dead owner's turn
    assert kinds(session).count("turn.canceled") == 2
    assert_invariants(session)
    # The session takes new turns: the transcript stayed valid.
    message_post(key=session.key, text="Any news on ORD-1003?", user=alice)
    assert wait_turn(session, number=3).status == "succeeded", workers.logs()
    assert_invariants(session)


def test_cancel_with_nothing_running_is_a_conflict(sandbox, alice):
    turn = message_post(key="ticket:999001", text="hello")
    turn_cancel(session_id=turn.session_id, user=alice)  # queued turn: canceled at once
    assert Turn.objects.get(pk=turn.pk).status == "canceled"
    with pytest.raises(Conflict):
        turn_cancel(session_id=turn.session_id, user=alice)


def test_a_lookup_running_when_a_cancel_ends_its_turn_is_canceled_not_in_doubt(
    sandbox, workers, alice
):
    """Issue 26 (the chaos campaign's ticket:175): a read-only call found
    running by the claim that honours a cancel went `in_doubt`, with no
    output, and a person was asked whether a lookup had happened. It
    changed nothing either way: canceled, and the desk says so."""
    victim = workers.start("victim")
    held = sandbox.fault(
        target="helpdesk",
        kind="hold",
        count=1,
        latency_ms=60_000,
        match={"path_prefix": "/helpdesk/orders"},
    )
    session = deliver_ticket(
        sandbox.ticket(
            email="alice.martin@example.com",
            subject="Where is my order ORD-1002?",
            body="Hi, could you tell me where order ORD-1002 is? Thanks",
            order_id="ORD-1002",
        )
    )
    lookup = wait_for(
        lambda: ToolCall.objects.filter(
            session=session, name="lookup_order", status="running"
        ).first(),
        timeout=60,
        what="the order lookup in flight",
    )
    wait_for(
        lambda: any(
            r["id"] == held["id"] and r["holding"] for r in sandbox.get("/_faults")["faults"]
        ),
        what="the lookup held at the helpdesk",
    )
    victim.kill(signal.SIGKILL)  # its slot is gone mid-lookup
    victim.popen.wait(10)
    turn_cancel(session_id=session.id, user=alice)  # honoured by the next claim
    workers.start("rescuer")

    turn = wait_turn(session, timeout=30)

    assert turn.status == "canceled", workers.logs()
    lookup.refresh_from_db()
    assert lookup.status == "canceled" and lookup.output == STOPPED_READ_ONLY
    result = Message.objects.get(session=session, position=lookup.result_position).content[0]
    assert result["is_error"] and "nothing was changed" in result["content"]
    assert "tool.in_doubt" not in kinds(session)
    assert Session.objects.get(pk=session.pk).status == "canceled"  # nobody is asked
    assert_invariants(session)


def test_inner_steps_cut_off_by_the_end_of_their_turn_are_in_doubt_unless_they_only_read(broker):
    """A call that gates inside (Code Mode, the browser) ran three inner
    steps when its turn ended: the one that only reads is canceled; one that
    may have changed something, or whose kind is not known, is in doubt."""
    owner = Owner(name="test-worker:1/1", process=0)
    session, claimed = call_running(
        "ticket:inner-cut", owner, name="run_code", kind="not_idempotent"
    )
    (call,) = claimed.calls
    inner_steps.begin(claimed, call, 1, "lookup_order", {"order_id": "ORD-1"}, "read_only")
    inner_steps.begin(claimed, call, 2, "escalate_to_human", {"reason": "x"}, "not_idempotent")
    inner_steps.begin(claimed, call, 3, "fetch", {"url": "x"}, "")

    store.cancel_turn(claimed)

    steps = {
        c.step: (c.status, c.output)
        for c in ToolCall.objects.filter(session=session, parent_id=call.id)
    }
    assert steps == {
        1: ("canceled", STOPPED_READ_ONLY),
        2: ("in_doubt", ""),
        3: ("in_doubt", ""),
    }
    outer = ToolCall.objects.get(pk=call.id)
    assert outer.status == "in_doubt"
    assert outer.output == "The turn ended; the outcome of this call is unknown."
