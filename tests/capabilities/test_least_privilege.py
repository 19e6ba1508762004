"""Least privilege: a profile offers only its capabilities; anything else is
refused (an error tool_result and an audited `tool.refused` event), never run.
Admins edit profiles and policies in the Django admin, every change recorded."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.gate import Action
from agents.models import Event, ToolCall
from approvals.gate import gate_decide
from capabilities.models import PolicyChange, ToolPolicy
from capabilities.profiles import get_profile
from tests.agents.helpers import assert_invariants, wait_turn
from tests.capabilities.conftest import make_profile, start_session

REFUND = '[[call:issue_refund {"order_id": "ORD-1001", "amount_cents": 500}]]'
LOOKUP = '[[call:lookup_order {"order_id": "ORD-1001"}]]'


@pytest.mark.django_db(transaction=True)
def test_a_tool_outside_the_profile_is_refused_and_audited(sandbox, caps_workers):
    make_profile("narrow", "lookup_order")
    caps_workers()
    session = start_session("ticket:lp-1", "narrow", f"{REFUND} {LOOKUP}")

    turn = wait_turn(session, timeout=60)

    assert turn.status == "succeeded"
    refund = ToolCall.objects.get(session=session, name="issue_refund")
    assert refund.status == "failed" and refund.is_error and refund.attempts == 0
    assert "no tool named 'issue_refund' in profile narrow" in refund.output
    assert sandbox.refunds() == []  # never executed
    refused = Event.objects.get(session=session, kind="tool.refused")
    assert refused.data["name"] == "issue_refund"
    assert refused.data["profile"] == "narrow" and refused.data["reason"] == "not in profile"
    assert ToolCall.objects.get(session=session, name="lookup_order").status == "succeeded"
    assert_invariants(session)


@pytest.mark.django_db(transaction=True)
def test_a_call_over_its_budget_is_refused(sandbox, caps_workers):
    make_profile("thrifty", "lookup_order", lookup_order={"max_calls_per_turn": 1})
    caps_workers()
    session = start_session("ticket:lp-2", "thrifty", f"{LOOKUP} {LOOKUP}")

    wait_turn(session, timeout=60)

    first, second = ToolCall.objects.filter(session=session).order_by("id")
    assert (first.status, second.status) == ("succeeded", "failed")
    assert "call budget" in second.output
    refused = Event.objects.get(session=session, kind="tool.refused")
    assert refused.data["tool_use_id"] == second.tool_use_id


@pytest.mark.django_db(transaction=True)
def test_a_call_over_the_turns_cost_budget_is_refused(sandbox, caps_workers):
    profile = make_profile("metered", "lookup_order", lookup_order={"cost_cents": 3})
    profile.max_cost_cents_per_turn = 5  # one lookup (3) fits, a second (6) does not
    profile.save(update_fields=["max_cost_cents_per_turn"])
    caps_workers()
    session = start_session("ticket:lp-3", "metered", f"{LOOKUP} {LOOKUP}")

    wait_turn(session, timeout=60)

    first, second = ToolCall.objects.filter(session=session).order_by("id")
    assert (first.status, second.status) == ("succeeded", "failed")
    assert second.attempts == 0  # refused, never run
    assert "refused by policy (cost budget: 5 cents per turn)" in second.output
    refused = Event.objects.get(session=session, kind="tool.refused")
    assert refused.data["tool_use_id"] == second.tool_use_id
    assert refused.data["reason"] == "cost budget: 5 cents per turn"
    assert_invariants(session)


@pytest.mark.django_db(transaction=True)
def test_a_tool_the_profile_denies_is_offered_and_every_call_refused(sandbox, caps_workers):
    make_profile("no_refunds", "lookup_order", "issue_refund", issue_refund={"approval": "deny"})
    caps_workers()
    session = start_session("ticket:lp-4", "no_refunds", f"{REFUND} {LOOKUP}")

    wait_turn(session, timeout=60)

    refund = ToolCall.objects.get(session=session, name="issue_refund")
    assert refund.status == "failed" and refund.attempts == 0
    assert "Profile no_refunds does not allow issue_refund" in refund.output
    assert sandbox.refunds() == []  # never executed
    refused = Event.objects.get(session=session, kind="tool.refused")
    assert refused.data["tool_use_id"] == refund.tool_use_id
    assert ToolCall.objects.get(session=session, name="lookup_order").status == "succeeded"
    assert_invariants(session)


@pytest.mark.django_db
def test_a_policy_outside_the_rules_is_refused_by_the_database():
    from django.db import IntegrityError, transaction

    profile = make_profile("strict")
    with pytest.raises(IntegrityError, match="toolpolicy_approval_valid"):
        with transaction.atomic():
            ToolPolicy.objects.create(profile=profile, capability="x", approval="ask")


@pytest.mark.django_db
def test_admin_edits_to_profiles_and_policies_are_recorded(carol):
    from dashboard.roles import ADMIN, assign_role

    assign_role(carol, ADMIN)  # staff, and the role carries the capabilities app's permissions
    client = Client()
    client.force_login(carol)
    form = {
        "name": "triage2",
        "description": "Triage without refunds",
        "system_prompt": "",
        "max_cost_cents_per_turn": "",
        "policies-TOTAL_FORMS": "1",
        "policies-INITIAL_FORMS": "0",
        "policies-MIN_NUM_FORMS": "0",
        "policies-MAX_NUM_FORMS": "1000",
        "policies-0-capability": "lookup_order",
        "policies-0-enabled": "on",
        "policies-0-kind": "",
        "policies-0-approval": "default",
        "policies-0-timeout_s": "",
        "policies-0-max_calls_per_turn": "",
        "policies-0-cost_cents": "0",
        # Who decides its approvals (issue 19): the defaults.
        "policies-0-decider_role": "approver",
        "policies-0-quorum_votes": "2",
        "policies-0-quorum_deny_ends": "on",
        "policies-0-on_expiry": "deny",
    }
    response = client.post("/admin/capabilities/agentprofile/add/", form)
    assert response.status_code == 302, response.content[:3000]
    policy = ToolPolicy.objects.get(profile__name="triage2")
    response = client.post(
        f"/admin/capabilities/toolpolicy/{policy.pk}/change/",
        {
            "profile": policy.profile_id,
            "capability": "lookup_order",
            "enabled": "on",
            "kind": "",
            "approval": "always",
            "timeout_s": "",
            "max_calls_per_turn": "3",
            "cost_cents": "0",
            "decider_role": "approver",
            "quorum_votes": "2",
            "quorum_deny_ends": "on",
            "on_expiry": "deny",
        },
    )
    assert response.status_code == 302, response.content[:3000]

    log = list(PolicyChange.objects.order_by("id"))
    assert [(c.actor, c.target, c.action) for c in log] == [
        ("carol", "profile", "created"),
        ("carol", "lookup_order", "created"),
        ("carol", "lookup_order", "changed"),
    ]
    assert log[-1].changes == {"approval": ["default", "always"], "max_calls_per_turn": [None, 3]}
    profile = get_profile("triage2")  # what the engine now gets
    assert [t.name for t in profile.tools] == ["lookup_order"]
    action = Action(
        kind="tool_call",
        session_key="ticket:1",
        session_context={},
        profile=profile,
        name="lookup_order",
        arguments={"order_id": "ORD-1"},
        tool_kind=profile.tool("lookup_order").kind,
    )
    assert gate_decide(action).policy == "profile_policy"
    assert client.get("/admin/capabilities/policychange/").status_code == 200
