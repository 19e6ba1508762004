"""Sub-agents: a delegate call parks the parent, the child session does the
sub-task durably on its own, its answer is the parent's tool result, and
cancelling the parent cancels the child."""

from __future__ import annotations

import json

import pytest

from agents import selectors, services
from agents.models import Event, Session, ToolCall, Turn
from approvals.models import Approval
from capabilities.models import SubagentLink
from tests.agents.helpers import assert_invariants, kinds, wait_turn
from tests.capabilities.conftest import make_profile, start_session
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _delegate(task: str) -> str:
    arguments = json.dumps({"task": task, "label": "research"})
    return f"[[call:subagent__research {arguments}]] Find out, then tell me."


def test_a_subagent_answers_its_parent(mcp_servers, caps_workers):
    mcp_servers.http("docs")
    make_profile("lead", "subagent.research")
    make_profile("research", "docs.search")
    caps_workers()
    task = '[[call:docs__search {"query": "refunds"}]] Look up the refund policy.'
    parent = start_session("ticket:sa-1", "lead", _delegate(task))

    turn = wait_turn(parent, timeout=60)

    assert turn.status == "succeeded"
    link = SubagentLink.objects.get(parent_session=parent)
    child = link.child_session
    assert child.key.startswith("ticket:sa-1/research-") and child.profile == "research"
    assert link.status == "settled"
    assert Turn.objects.get(session=child).status == "succeeded"
    call = ToolCall.objects.get(session=parent, name="subagent__research")
    assert call.status == "succeeded"
    assert "refunds for refunds take 5-10 business days" in call.output  # the child's answer
    assert "subagent.finished" in kinds(parent)
    assert_invariants(parent)
    assert_invariants(child)


def test_cancelling_the_parent_cancels_the_child(mcp_servers, caps_workers, alice):
    mcp_servers.http("docs")
    make_profile("lead", "subagent.research")
    make_profile("research", "docs.create_ticket", **{"docs.create_ticket": {"approval": "always"}})
    caps_workers()
    parent = start_session(
        "ticket:sa-2", "lead", _delegate('[[call:docs__create_ticket {"title": "x"}]] File it.')
    )
    link = wait_for(
        lambda: SubagentLink.objects.filter(parent_session=parent).first(),
        timeout=60,
        what="the child session",
    )
    child = link.child_session
    # The approval row is written with the child's reply; the child's session
    # shows waiting once its turn parks, a commit later.
    wait_for(
        lambda: Session.objects.get(pk=child.pk).status == "waiting_for_approval",
        timeout=60,
        what="the child waiting for an approver",
    )
    assert Approval.objects.filter(session=child, status="pending").exists()
    wait_for(
        lambda: Session.objects.get(pk=parent.pk).status == "waiting_for_subagent",
        timeout=30,
        what="the parent parked on its child",
    )
    # The parent waits on a session, not on a person (issue 16): its own
    # status, for the call, the turn and the session; only the child, whose
    # call waits for an approver, needs a human.
    assert ToolCall.objects.get(session=parent).status == "waiting_for_subagent"
    assert Turn.objects.get(session=parent).status == "waiting_for_subagent"
    assert "waiting_for_subagent" not in selectors.NEEDS_HUMAN
    counts = selectors.session_counts(user=alice)
    assert counts["waiting_for_subagent"] == 1 and counts["waiting_for_approval"] == 1
    needing = [s.key for s in selectors.sessions_list(user=alice)[:1]]
    assert needing == [child.key]  # what needs a human comes first

    services.turn_cancel(session_id=parent.id, user=alice)

    assert wait_turn(parent, timeout=30).status == "canceled"
    assert wait_turn(child, timeout=30).status == "canceled"
    assert Approval.objects.get(session=child).status == "canceled"
    assert SubagentLink.objects.get(pk=link.pk).status == "canceled"
    assert mcp_servers.effects("docs") == []
    assert Event.objects.filter(session=parent, kind="subagent.started").exists()
    assert_invariants(parent)
    assert_invariants(child)


def test_the_desk_shows_the_tree(mcp_servers, caps_workers, carol):
    from django.test import Client

    mcp_servers.http("docs")
    make_profile("lead", "subagent.research")
    make_profile("research", "docs.search")
    caps_workers()
    parent = start_session("ticket:sa-3", "lead", _delegate("Say hello."))
    wait_turn(parent, timeout=60)
    child = SubagentLink.objects.get(parent_session=parent).child_session
    client = Client()
    client.force_login(carol)

    page = client.get(f"/sessions/{parent.id}/").content.decode()
    child_page = client.get(f"/sessions/{child.id}/").content.decode()

    assert f'href="/sessions/{child.id}/"' in page and child.key in page
    assert f'href="/sessions/{parent.id}/"' in child_page and "Works for" in child_page
