"""Profiles in code: which tools an agent may use, and how it is told to behave.

A profile is the least-privilege boundary: the model is offered only the
profile's tools, and a call to anything else is refused (an error
tool_result and a `tool.refused` event), never executed.

Profiles are declared here in code; an admin may take one over in the
capabilities app (a profile row with per-tool policies, including MCP tools
and sub-agents): capabilities/profiles.py resolves a name to the profile the
engine runs, falling back to the code profile declared here.
"""

from __future__ import annotations

import dataclasses

from agents.tools.base import Tool
from agents.tools.profile import Profile
from agents.tools.support import SUPPORT_TOOLS

SUPPORT_SYSTEM_PROMPT = (
    "You are a support agent for an online shop. Triage the ticket: look up the "
    "customer and the order, classify the ticket, issue a refund when one is due, "
    "reply to the customer, and escalate to a human when you cannot help. "
    "Explain each step briefly before you take it."
)


_SUPPORT = Profile("support_triage", SUPPORT_SYSTEM_PROMPT, SUPPORT_TOOLS)


def _support_code_mode() -> Profile:
    """The support tools as Code Mode (capabilities/codemode/): the model
    writes one program where it would make one call per lookup."""
    from capabilities.codemode import with_code_mode  # its settings: read once apps load

    return dataclasses.replace(with_code_mode(_SUPPORT), name="support_codemode")


_PROFILES: dict[str, Profile] = {"support_triage": _SUPPORT}
_LAZY = {"support_codemode": _support_code_mode}


def _browser_profiles() -> None:
    from capabilities.browser.profiles import carrier_profile

    _PROFILES["carrier_claims"] = carrier_profile()


_browser_profiles()


def register_profile(profile: Profile) -> None:
    """Add a profile (benchmarks and tests plug their own tools in here)."""
    _PROFILES[profile.name] = profile


def code_profile(name: str) -> Profile | None:
    if name not in _PROFILES and name in _LAZY:
        _PROFILES[name] = _LAZY[name]()
    return _PROFILES.get(name)


def code_tools() -> dict[str, Tool]:
    """Every tool a code profile declares: the built-in provider's catalogue."""
    return {tool.name: tool for profile in _PROFILES.values() for tool in profile.tools}
