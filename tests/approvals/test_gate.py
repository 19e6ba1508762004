"""The one gate (approvals/gate.py): every rule that makes an action wait, or
refuses it, answered by one function of the action."""

from __future__ import annotations

import pytest

from agents.gate import Action
from agents.tools.base import Kind
from agents.tools.profile import Profile, ToolRule
from approvals.gate import gate_decide
from capabilities.registry import code_profile


def _action(name: str, arguments: dict, *, profile=None, **fields) -> Action:
    profile = profile or code_profile("support_triage")
    tool = profile.tool(name)
    values = dict(
        kind="tool_call",
        session_key="ticket:1",
        session_context={},
        profile=profile,
        name=name,
        arguments=arguments,
        tool_kind=tool.kind if tool else None,
    )
    values.update(fields)
    return Action(**values)


def _with_rule(name: str, approval: str) -> Profile:
    base = code_profile("support_triage")
    return Profile("ruled", base.system, base.tools, {name: ToolRule(approval=approval)})


REFUND = {"order_id": "ORD-1001", "amount_cents": 50_000}
SMALL = {"order_id": "ORD-1001", "amount_cents": 500}


def test_a_refund_over_the_limit_waits_and_a_small_one_runs():
    assert gate_decide(_action("issue_refund", REFUND)).policy == "refund_over_limit"
    assert gate_decide(_action("issue_refund", SMALL)).decision == "run"


@pytest.mark.parametrize(
    "approval, arguments, decision, policy",
    [
        ("always", SMALL, "wait", "profile_policy"),
        ("never", REFUND, "run", ""),
        ("deny", SMALL, "refuse", "profile_deny"),
    ],
)
def test_the_profiles_rule_comes_first(approval, arguments, decision, policy):
    verdict = gate_decide(
        _action("issue_refund", arguments, profile=_with_rule("issue_refund", approval))
    )
    assert (verdict.decision, verdict.policy) == (decision, policy)


def test_a_side_effect_waits():
    action = _action("lookup_order", {"order_id": "ORD-1"}, kind="browser", side_effect=True)
    assert gate_decide(action).policy == "side_effect"


def test_in_a_fork_only_what_reads_runs():
    fork = {"forked_from": "ticket:1"}
    read = _action("lookup_order", {"order_id": "ORD-1"}, session_context=fork)
    assert gate_decide(read).decision == "run"
    write = _action("issue_refund", SMALL, session_context=fork)
    assert gate_decide(write).policy == "forked_session"
    host = _action("anything", {}, kind="host_call", tool_kind=Kind.IDEMPOTENT_BY_KEY)
    assert gate_decide(host).decision == "run"
    never = _action(
        "issue_refund", SMALL, session_context=fork, profile=_with_rule("issue_refund", "never")
    )
    assert gate_decide(never).policy == "forked_session"  # `never` skips the built-in rules only
