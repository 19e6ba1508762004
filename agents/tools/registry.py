"""Agent profiles: which tools an agent may use, and how it is told to behave.

A profile is the least-privilege boundary: the model is offered only the
profile's tools, and a call to anything else is refused (an error
tool_result and a `tool.refused` event), never executed.

Profiles are declared here in code; an admin may take one over in the
capabilities app (a profile row with per-tool policies, including MCP tools
and sub-agents). `get_profile` is the one way the engine gets a profile; it
asks agents/capabilities/profiles.py, which falls back to the code profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.tools.base import Tool
from agents.tools.support import SUPPORT_TOOLS
from approvals.policies import Requirement, requirement_for

SUPPORT_SYSTEM_PROMPT = (
    "You are a support agent for an online shop. Triage the ticket: look up the "
    "customer and the order, classify the ticket, issue a refund when one is due, "
    "reply to the customer, and escalate to a human when you cannot help. "
    "Explain each step briefly before you take it."
)


@dataclass(frozen=True)
class ToolRule:
    """An admin's policy for one tool of one profile (capabilities.ToolPolicy)."""

    approval: str = "default"  # default | always | never
    max_calls_per_turn: int | None = None
    cost_cents: int = 0


@dataclass(frozen=True)
class Profile:
    name: str
    system: str
    tools: tuple[Tool, ...]
    rules: Mapping[str, ToolRule] = field(default_factory=dict)  # by tool (wire) name
    max_cost_cents_per_turn: int | None = None

    def tool(self, name: str) -> Tool | None:
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None

    def requirement(self, name: str, arguments: dict[str, Any]) -> Requirement | None:
        """Whether a call needs an approver: the tool's rule, else the built-in policies."""
        rule = self.rules.get(name)
        if rule is not None and rule.approval == "always":
            return Requirement("profile_policy", f"Profile {self.name} reviews every {name} call")
        if rule is not None and rule.approval == "never":
            return None
        return requirement_for(name, arguments)

    def over_budget(self, name: str, earlier: list[str]) -> str | None:
        """Why one more call of `name` breaks a budget, given the names of the
        turn's earlier calls (refused ones count: a budget counts requests)."""
        rule = self.rules.get(name)
        if rule is not None and rule.max_calls_per_turn is not None:
            if earlier.count(name) >= rule.max_calls_per_turn:
                return f"call budget: at most {rule.max_calls_per_turn} {name} call(s) per turn"
        if self.max_cost_cents_per_turn is not None and rule is not None and rule.cost_cents:
            spent = sum(self.rules[n].cost_cents for n in earlier if n in self.rules)
            if spent + rule.cost_cents > self.max_cost_cents_per_turn:
                return f"cost budget: {self.max_cost_cents_per_turn} cents per turn"
        return None


_PROFILES: dict[str, Profile] = {
    "support_triage": Profile("support_triage", SUPPORT_SYSTEM_PROMPT, SUPPORT_TOOLS),
}


def register_profile(profile: Profile) -> None:
    """Add a profile (benchmarks and tests plug their own tools in here)."""
    _PROFILES[profile.name] = profile


def code_profile(name: str) -> Profile | None:
    return _PROFILES.get(name)


def code_tools() -> dict[str, Tool]:
    """Every tool a code profile declares: the built-in provider's catalogue."""
    return {tool.name: tool for profile in _PROFILES.values() for tool in profile.tools}


def get_profile(name: str) -> Profile:
    from agents.capabilities.profiles import resolve_profile

    profile = resolve_profile(name)
    if profile is None:
        raise LookupError(f"unknown agent profile {name!r}")
    return profile


def turn_call_names(transcript: list[dict]) -> list[str]:
    """Names of the tools the current turn has asked for so far (for budgets):
    the tool_use blocks after the turn's opening message (a user row with text)."""
    names: list[str] = []
    for row in reversed(transcript):
        blocks = row["content"]
        if row["role"] == "user" and any(b.get("type") == "text" for b in blocks):
            break
        if row["role"] == "assistant":
            names.extend(b["name"] for b in blocks if b.get("type") == "tool_use")
    return names
