"""Agent profiles: which tools an agent may use, and how it is told to behave.

A profile is the least-privilege boundary: the model is offered only the
profile's tools, and a call to anything else is refused (an error
tool_result), never executed.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.tools.base import Tool
from agents.tools.support import SUPPORT_TOOLS

SUPPORT_SYSTEM_PROMPT = (
    "You are a support agent for an online shop. Triage the ticket: look up the "
    "customer and the order, classify the ticket, issue a refund when one is due, "
    "reply to the customer, and escalate to a human when you cannot help. "
    "Explain each step briefly before you take it."
)


@dataclass(frozen=True)
class Profile:
    name: str
    system: str
    tools: tuple[Tool, ...]

    def tool(self, name: str) -> Tool | None:
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None


_PROFILES: dict[str, Profile] = {
    "support_triage": Profile("support_triage", SUPPORT_SYSTEM_PROMPT, SUPPORT_TOOLS),
}


def register_profile(profile: Profile) -> None:
    """Add a profile (benchmarks and tests plug their own tools in here)."""
    _PROFILES[profile.name] = profile


def get_profile(name: str) -> Profile:
    try:
        return _PROFILES[name]
    except KeyError:
        raise LookupError(f"unknown agent profile {name!r}") from None
