"""A profile as the engine runs it: the tools an agent may use and the rules
for each. Whether a call must wait for a person is the gate's answer
(approvals/gate.py), which reads the rules here. Where profiles come from
(code, admin rows, MCP servers, sub-agents) is the capabilities app's
business (capabilities/profiles.py); the engine only reads one through the
runtime's hooks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agents.tools.base import Tool


@dataclass(frozen=True)
class ToolRule:
    """An admin's policy for one tool of one profile (capabilities.ToolPolicy)."""

    # default | always | never | deny: the gate reads it (approvals/gate.py)
    approval: str = "default"
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
