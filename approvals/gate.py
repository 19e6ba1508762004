"""The one gate: may this action run now, must it wait for a person, or is it
refused? Every rule that answers it is here, in this order:

1. the profile's rule for the tool (capabilities.ToolPolicy.approval, as
   agents.tools.profile.ToolRule): `deny` refuses it, `always` asks a
   person, `never` skips the built-in rules (2), not the ones after;
2. the built-in rules of approvals/policies.py (refunds over the limit or
   unreadable, replies to customers when they are reviewed);
3. an action the profile or the tool marks as a side effect (a browser
   submit) asks a person;
4. in a forked session, every action that changes something asks a person:
   a fork acts on the same helpdesk, payments and customers as its original,
   under a new key (so new idempotency keys); an investigation must not
   refund or reply by accident, and a retry goes ahead once a person says so.

The runtime asks through agents/runtime/hooks.py::gate (a plain tool call at
triage; an inner action of Code Mode or the browser through
ToolContext.steps.gate); an external agent's request through /mcp is asked
the same way (api/external.py). A new rule goes here, and nowhere else.
"""

from __future__ import annotations

from agents.gate import RUN, Action, Verdict
from agents.tools.base import Kind
from approvals.policies import requirement_for


def gate_decide(action: Action) -> Verdict:
    rule = action.profile.rules.get(action.name)
    approval = rule.approval if rule is not None else "default"
    if approval == "deny":
        return Verdict(
            "refuse", "profile_deny", f"Profile {action.profile.name} does not allow {action.name}"
        )
    if approval == "always":
        return Verdict(
            "wait",
            "profile_policy",
            f"Profile {action.profile.name} reviews every {action.name} call",
        )
    if approval != "never" and (requirement := requirement_for(action.name, action.arguments)):
        return Verdict("wait", requirement.policy, requirement.detail)
    if action.side_effect:
        return Verdict("wait", "side_effect", f"{action.name} changes something outside")
    forked_from = action.session_context.get("forked_from")
    if forked_from and action.tool_kind != Kind.READ_ONLY:
        detail = f"This session is a fork of {forked_from}; its side effects are real"
        return Verdict("wait", "forked_session", detail)
    return RUN
