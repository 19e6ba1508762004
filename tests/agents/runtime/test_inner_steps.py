"""A tool that gates inside (Code Mode, the browser): its inner steps are
durable ToolCall rows under the outer call, and a gated inner step parks the
turn on an approval the approvals app builds; a decision runs the tool again,
which resumes from its steps' log. On real worker processes, against the
sandbox (tests/agents/runtime/stepping.py is the tool: escalate, then a
reviewed reply).
"""

from __future__ import annotations

import json
import signal

import pytest

from agents import services
from agents.models import Message, Session, ToolCall
from approvals.models import Approval
from approvals.services import approval_decide
from tests.agents.helpers import assert_invariants, kinds, wait_turn
from tests.agents.runtime.stepping import PROFILE
from tests.processes import start_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

REPLY = "We are on it."


def _worker(workers, name: str = "w1"):
    proc = start_worker(
        name, workers.env, workers.log_dir, "--include", "tests.agents.runtime.stepping"
    )
    workers.procs.append(proc)
    return proc


def _start(sandbox, alice, pause_s: float = 0) -> tuple[Session, str]:
    ticket = sandbox.ticket(email="alice.martin@example.com", subject="Help", body="Help me")
    key = f"ticket:{ticket['id']}"
    args = {"note": "needs a human", "reply": REPLY, "pause_s": pause_s}
    services.session_get_or_create(key=key, profile=PROFILE)
    text = f"[[call:escalate_then_reply {json.dumps(args)}]]"
    services.message_post(key=key, text=text, user=alice)  # alice started it: bob decides
    return Session.objects.get(key=key), str(ticket["id"])


def _pending(session: Session) -> Approval:
    return wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        timeout=30,
        what="a pending approval",
    )


def _activity(sandbox, ticket_id: str) -> tuple[int, list[str]]:
    ticket = sandbox.get(f"/helpdesk/tickets/{ticket_id}")
    return len(ticket["escalations"]), [r["body"] for r in ticket["replies"]]


def _result(session: Session) -> str:
    outer = ToolCall.objects.get(session=session, parent=None)
    return Message.objects.get(session=session, position=outer.result_position).content[0][
        "content"
    ]


def _inner(session: Session) -> list[ToolCall]:
    return list(ToolCall.objects.filter(session=session, parent__isnull=False).order_by("step"))


def test_a_gated_inner_step_waits_and_runs_once_approved(sandbox, workers, alice, bob):
    _worker(workers)
    session, ticket_id = _start(sandbox, alice)

    approval = _pending(session)
    outer = ToolCall.objects.get(session=session, parent=None)
    first, second = _inner(session)
    assert (first.step, first.status, first.name) == (1, "succeeded", "escalate")
    assert bytes(first.snapshot) == b"escalated"
    assert approval.tool_call_id == second.id and second.parent_id == outer.id
    assert second.status == "waiting_for_approval" and second.input == {"body": REPLY}
    assert second.idempotency_key == f"{session.key}:{outer.tool_use_id}:2"
    assert outer.status == "waiting_for_approval"
    assert approval.policy == "side_effect" and approval.arguments == {"body": REPLY}
    assert approval.preview == {"done": ["escalate"], "next": {"body": REPLY}}
    assert _activity(sandbox, ticket_id) == (1, [])  # nothing past the gate yet
    session.refresh_from_db()
    assert session.status == "waiting_for_approval"

    approval_decide(approval_id=approval.id, user=bob, decision="approve")

    assert wait_turn(session).status == "succeeded", workers.logs()
    assert _activity(sandbox, ticket_id) == (1, [REPLY])  # each step once
    assert [s.status for s in _inner(session)] == ["succeeded", "succeeded"]
    assert "Escalated and replied" in _result(session)
    assert kinds(session).count("approval.requested") == 1
    assert_invariants(session)


def test_an_approvers_edit_is_what_the_inner_step_sends(sandbox, workers, alice, bob):
    _worker(workers)
    session, ticket_id = _start(sandbox, alice)
    approval = _pending(session)

    edited = {"body": "Edited by bob."}
    approval_decide(approval_id=approval.id, user=bob, decision="approve", edited_input=edited)

    assert wait_turn(session).status == "succeeded", workers.logs()
    assert _activity(sandbox, ticket_id) == (1, ["Edited by bob."])
    assert _inner(session)[1].input == edited
    assert_invariants(session)


def test_a_denied_inner_step_reaches_the_tool_with_its_reason(sandbox, workers, alice, bob):
    _worker(workers)
    session, ticket_id = _start(sandbox, alice)
    approval = _pending(session)

    approval_decide(
        approval_id=approval.id, user=bob, decision="deny", reason="Not before the refund."
    )

    assert wait_turn(session).status == "succeeded", workers.logs()
    assert _activity(sandbox, ticket_id) == (1, [])
    second = _inner(session)[1]
    assert second.status == "denied"
    assert "Not before the refund." in _result(session)
    assert_invariants(session)


def test_no_completed_inner_step_is_repeated_when_the_worker_dies(sandbox, workers, alice, bob):
    victim = _worker(workers, "victim")
    workers.beat()  # the sweeper notices the dead owner
    session, ticket_id = _start(sandbox, alice, pause_s=5)
    wait_for(
        lambda: ToolCall.objects.filter(session=session, step=1, status="succeeded").exists(),
        what="inner step 1 ended",
    )

    victim.kill(signal.SIGKILL)  # between inner steps 1 and 2
    victim.popen.wait(10)
    _worker(workers, "rescuer")
    approval = _pending(session)
    approval_decide(approval_id=approval.id, user=bob, decision="approve")

    assert wait_turn(session, timeout=40).status == "succeeded", workers.logs()
    assert _activity(sandbox, ticket_id) == (1, [REPLY])  # the escalation was not sent again
    assert "recovery" in kinds(session)
    assert [s.attempts for s in _inner(session)] == [1, 1]
    assert_invariants(session)


def test_an_unanswered_inner_step_expires_and_the_tool_is_told(sandbox, workers, alice):
    workers.env.update(AGENTDESK_APPROVAL_TTL_S="2", AGENTDESK_EXPIRE_INTERVAL_S="0.5")
    _worker(workers)
    workers.beat()
    session, ticket_id = _start(sandbox, alice)

    assert wait_turn(session, timeout=40).status == "succeeded", workers.logs()
    assert Approval.objects.get(session=session).status == "expired"
    assert _inner(session)[1].status == "denied"
    assert "expired" in _result(session)
    assert _activity(sandbox, ticket_id) == (1, [])
    assert_invariants(session)
