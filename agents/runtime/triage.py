"""Triage: the first status of each call a model reply asks for, decided
before anything runs and recorded with the reply (store.record_reply):

- refused: bad input (malformed, or not the tool's schema), not in the
  profile (least privilege), over a budget, or refused by the gate; audited
  as `tool.refused` where a policy refused it;
- waiting for approval: the gate said a person must decide first
  (approvals/gate.py holds the rules; the runtime asks through hooks.gate);
- pending, the first of them `running` at once (marked in the same commit).

A tool that gates inside (Code Mode, the browser) is not gated here: it asks
for each of its inner actions while it runs (agents/gate.py).
"""

from __future__ import annotations

from typing import Any

from agents.gate import Action, Verdict
from agents.llm.base import ModelReply
from agents.models import ToolCall
from agents.runtime import hooks
from agents.runtime.state import Claimed
from agents.tools.base import Tool
from agents.tools.profile import Profile, turn_call_names

S = ToolCall.Status


def triage_calls(
    claimed: Claimed, profile: Profile, reply: ModelReply
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(the calls as recorded, the approvals they ask for, the refusals)."""
    calls, approvals, refusals = [], [], []
    earlier = turn_call_names(claimed.transcript) if profile.rules else []
    for block in reply.tool_uses:
        name = block["name"]
        tool = profile.tool(name)
        arguments = block.get("input", {})
        if tool is not None and block["id"] not in reply.malformed_inputs:
            # what the policy, the approver and the tool see
            arguments = tool.normalize(arguments)
        status, output = _first_status(
            claimed, profile, reply, block, tool, arguments, earlier, approvals, refusals
        )
        calls.append(
            {
                "tool_use_id": block["id"],
                "idempotency_key": f"{claimed.key}:{block['id']}",
                "name": name,
                "kind": tool.kind.value if tool else "",
                "status": status,
                "input": arguments,
                "output": output,
                "attempts": 0,
            }
        )
        earlier.append(name)  # refused ones count: a budget counts requests
    if calls and calls[0]["status"] == S.PENDING:
        calls[0]["status"], calls[0]["attempts"] = S.RUNNING, 1
    return calls, approvals, refusals


def _first_status(
    claimed: Claimed,
    profile: Profile,
    reply: ModelReply,
    block: dict[str, Any],
    tool: Tool | None,
    arguments: Any,
    earlier: list[str],
    approvals: list[dict[str, Any]],
    refusals: list[dict[str, Any]],
) -> tuple[str, str]:
    """(status, the output the model reads when it never runs); the
    approval it asks for and the refusal to audit go on the lists. (Long for
    a reason: the ladder of refusals is read best in its order, in one place.)"""
    name = block["name"]
    if block["id"] in reply.malformed_inputs:
        return S.FAILED, f"Error: {reply.malformed_inputs[block['id']]}"
    if tool is None:  # least privilege: never run, always on record
        refusals.append(_refusal(block, profile, "not in profile"))
        offered = ", ".join(t.name for t in profile.tools)
        return S.FAILED, (
            f"Error: no tool named {name!r} in profile {profile.name}; available: {offered}"
        )
    if problem := tool.validate(arguments):
        return S.FAILED, f"Error: input does not match the schema: {problem}"
    if over := profile.over_budget(name, earlier):
        refusals.append(_refusal(block, profile, over))
        return S.FAILED, f"Error: refused by policy ({over})"
    verdict = _gate(claimed, profile, tool, arguments)
    if verdict.refused:
        refusals.append(_refusal(block, profile, verdict.detail))
        return S.FAILED, f"Error: refused by policy ({verdict.detail})"
    if verdict.waits:
        approvals.append(
            {
                "tool_use_id": block["id"],
                "policy": verdict.policy,
                "detail": verdict.detail,
                "tool_name": name,
                "arguments": arguments,
                "reasoning": reply.text[:4000],
            }
        )
        return S.WAITING, ""
    return S.PENDING, ""


def _gate(claimed: Claimed, profile: Profile, tool: Tool, arguments: dict[str, Any]) -> Verdict:
    """The gate's verdict on a plain tool call. A tool that gates inside
    asks for each of its inner actions itself while it runs: its call runs."""
    if tool.gated_inside:
        return Verdict("run")
    action = Action(
        kind="tool_call",
        session_key=claimed.key,
        session_context=claimed.context,
        profile=profile,
        name=tool.name,
        arguments=arguments,
        tool_kind=tool.kind,
    )
    return hooks.gate(action)


def _refusal(block: dict[str, Any], profile: Profile, reason: str) -> dict[str, Any]:
    return {
        "tool_use_id": block["id"],
        "name": block["name"],
        "profile": profile.name,
        "reason": reason,
    }
