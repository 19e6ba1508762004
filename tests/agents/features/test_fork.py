"""Forking a session from a recorded step: complete steps only, the original
untouched, and the fork runs on a real worker."""

from __future__ import annotations

import pytest

from agents.errors import Forbidden, Invalid
from agents.features.forks import complete_positions, session_fork
from agents.models import Event, Message, Session, SessionRuntime, ToolCall, Turn
from agents.services import message_post
from approvals.models import Approval
from approvals.services import approval_decide
from tests.agents.helpers import assert_invariants, deliver_ticket, wait_turn
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _snapshot(session: Session) -> tuple:
    """Every row of a session that a fork could touch."""
    return (
        list(Message.objects.filter(session=session).values_list("position", "role", "content")),
        list(Event.objects.filter(session=session).values_list("seq", "kind", "data")),
        list(ToolCall.objects.filter(session=session).values_list("id", "status", "input")),
        list(Turn.objects.filter(session=session).values_list("id", "status")),
        SessionRuntime.objects.filter(pk=session.pk).values_list("last_seq", "transcript_len")[0],
        Session.objects.filter(pk=session.pk).values_list("status", "key", "updated_at")[0],
    )


def _tool_use_row(session: Session) -> Message:
    """The first assistant row that asks for a tool."""
    for row in Message.objects.filter(session=session, role="assistant").order_by("position"):
        if any(b.get("type") == "tool_use" for b in row.content):
            return row
    raise AssertionError("no tool_use in the transcript")


def _replies(sandbox, ticket: dict) -> int:
    """Replies to the customer the helpdesk holds on the ticket."""
    return len(sandbox.get(f"/helpdesk/tickets/{ticket['id']}")["replies"])


def _approve_each_side_effect(session: Session, number: int, approver) -> list[str]:
    """Approve every approval the turn asks for, until it ends; their policies."""
    policies: list[str] = []

    def next_step():
        pending = Approval.objects.filter(session=session, status="pending").first()
        turn = Turn.objects.filter(session=session, number=number).first()
        ended = turn is not None and turn.status in Turn.TERMINAL
        return pending or ended

    while True:
        found = wait_for(next_step, timeout=30, what=f"an approval or the end of turn {number}")
        if found is True:
            return policies
        call = ToolCall.objects.get(pk=found.tool_call_id)
        assert call.status == "waiting_for_approval"  # nothing ran before the decision
        policies.append(found.policy)
        approval_decide(approval_id=found.id, user=approver, decision="approve")


def test_complete_positions_never_end_between_a_tool_use_and_its_result():
    rows = [
        (0, [{"type": "text", "text": "hi"}]),
        (1, [{"type": "tool_use", "id": "a"}, {"type": "tool_use", "id": "b"}]),
        (2, [{"type": "tool_result", "tool_use_id": "a"}]),
        (3, [{"type": "tool_result", "tool_use_id": "b"}]),
        (4, [{"type": "text", "text": "done"}]),
    ]
    assert complete_positions(rows) == [1, 4, 5]


def test_fork_from_a_step_copies_complete_steps_and_leaves_the_original_alone_then_runs(
    sandbox, workers, carol, alice
):
    workers.start()
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Where is my order",
        body="Where is order ORD-1001? It has not arrived.",
        order_id="ORD-1001",
    )
    original = deliver_ticket(ticket)
    assert wait_turn(original).status == "succeeded", workers.logs()
    before = _snapshot(original)
    asking = _tool_use_row(original)

    # Fork right after the model asked for a tool: its result is not in the
    # range, so the fork is cut back to before that reply.
    fork = session_fork(session_id=original.id, upto=asking.position + 1, user=carol)

    assert fork.key == f"{original.key}/fork-1"
    rows = list(Message.objects.filter(session=fork).order_by("position"))
    assert [r.position for r in rows] == list(range(asking.position))
    originals = Message.objects.filter(session=original, position__lt=asking.position)
    assert [r.content for r in rows] == [r.content for r in originals.order_by("position")]
    assert _snapshot(original) == before
    # One event says where the fork came from; each copied row is an event too.
    kinds = [e.kind for e in Event.objects.filter(session=fork).order_by("seq")]
    assert kinds == ["session.forked"] + ["transcript.copied"] * len(rows)
    assert_invariants(fork)

    # A fork after the tool's result keeps the call (with the fork's own key).
    later = session_fork(session_id=original.id, upto=asking.position + 2, user=carol)
    assert later.key == f"{original.key}/fork-2"
    call = ToolCall.objects.get(session=later)
    assert call.idempotency_key.startswith(f"{later.key}:")
    assert_invariants(later)

    # The fork runs: a new message advances it on the real worker. What it
    # would change (a reply to the real customer) waits for a person first:
    # a fork acts on the same systems as its original.
    replies_before = _replies(sandbox, ticket)
    message_post(key=later.key, text="Please also check order ORD-1001 again.", user=alice)
    policies = _approve_each_side_effect(later, 2, carol)
    turn = wait_turn(later, 2)
    assert turn.status == "succeeded", workers.logs()
    assert policies and set(policies) == {"forked_session"}
    assert _replies(sandbox, ticket) > replies_before  # it went ahead once approved
    assert Message.objects.filter(session=later, role="assistant").count() > 1
    assert_invariants(later)
    assert _snapshot(original) == before


def test_only_admins_fork_and_an_empty_cut_is_refused(alice, carol, broker):
    session = Session.objects.create(key="ticket:1")
    SessionRuntime.objects.create(session=session)
    with pytest.raises(Forbidden):
        session_fork(session_id=session.id, upto=1, user=alice)
    with pytest.raises(Invalid):
        session_fork(session_id=session.id, upto=1, user=carol)
