"""Code Mode: the model writes one program against typed connectors.

A profile that turns Code Mode on (a `run_code` capability: a policy row, or
`with_code_mode` for a code profile) offers the model one tool, `run_code`.
Every other tool of the profile becomes a function of the program
(stubs.py: a Python signature from its JSON schema); the system prompt lists
them by name, one line each, and `describe(name)` gives a full signature on
demand. The program is type-checked against the stubs before it starts and
runs in Monty, in a pool of subprocesses (pool.py). Each host call is a
durable inner step of the run_code call, gated by the one gate and recorded
with the program's snapshot (program.py), so a program survives a dead
worker and pauses for an approval without repeating what already ran.

The tool rules of the profile (approval, calls per turn, cost) apply to the
host calls by their own names; `run_code` itself needs no approval.
"""

from __future__ import annotations

import dataclasses
import functools

from django.conf import settings

from agents.tools.base import Kind, Tool
from agents.tools.profile import Profile, ToolRule
from capabilities.codemode import stubs
from capabilities.codemode.pool import Limits
from capabilities.codemode.program import CodeMode, run

CAPABILITY = "run_code"
MAX_PROGRAM_CHARS = 100_000

INPUT_SCHEMA = {
    "type": "object",
    "properties": {"code": {"type": "string", "minLength": 1, "maxLength": MAX_PROGRAM_CHARS}},
    "required": ["code"],
    "additionalProperties": False,
}

DESCRIPTION = (
    "Run a Python program (a subset of Python 3: no imports of your own, no files, no "
    "network) whose globals are the host functions listed in the system prompt; call "
    "describe(name) in a program for a function's full signature. Each host function "
    "returns its JSON result as Python values; a failed call raises RuntimeError, a "
    "refused or denied one PermissionError (with the reason). The program's last "
    "expression is its value; the result is that value, what it printed and how many "
    "host calls it made. Do several lookups and actions in one program."
)

PROMPT = (
    "\n\nCode Mode: you act by writing Python programs for the run_code tool. A program "
    "may call these host functions (describe(name) gives the full signature):\n"
)


def default_limits(wall_s: float | None = None) -> Limits:
    return Limits(
        interpreter_s=settings.AGENTDESK_CODEMODE_INTERPRETER_S,
        wall_s=wall_s or settings.AGENTDESK_CODEMODE_WALL_S,
        memory_mb=settings.AGENTDESK_CODEMODE_MEMORY_MB,
        host_calls=settings.AGENTDESK_CODEMODE_HOST_CALLS,
    )


def connectors(tools: tuple[Tool, ...]) -> list[Tool]:
    """The tools a program may call: all but run_code itself and delegations
    (a sub-agent parks the whole turn; a program cannot wait on one)."""
    return [t for t in tools if t.name != CAPABILITY and not t.name.startswith("subagent__")]


def run_code_tool(profile: Profile, limits: Limits | None = None) -> Tool:
    limits = limits or default_limits()
    functions = [stubs.function_for(t) for t in connectors(profile.tools)]
    spec = CodeMode(
        profile=profile,
        functions={f.name: f for f in functions},
        stubs=stubs.stubs_for(functions),
        limits=limits,
    )
    longest = max((t.timeout_s for t in connectors(profile.tools)), default=10.0)
    return Tool(
        name=CAPABILITY,
        description=DESCRIPTION,
        input_schema=INPUT_SCHEMA,
        # Sending it again is safe: the execution log answers every host call
        # already made, and each host call has its own key.
        kind=Kind.IDEMPOTENT_BY_KEY,
        run=functools.partial(run, spec),
        # The engine's cut comes after the program's own wall limit and the
        # longest host call that may start just before it.
        timeout_s=limits.wall_s + longest + 5,
        # Not gated at triage: each host call is asked of the gate by name
        # while the program runs (program.py), and a run its dead worker left
        # running is run again: the execution log says what already ran.
        gated_inside=True,
    )


def with_code_mode(
    profile: Profile, limits: Limits | None = None, rule: ToolRule | None = None
) -> Profile:
    """The profile as Code Mode: run_code is the one tool the model sees; the
    profile's tools are its host functions, their rules kept by name."""
    tool = run_code_tool(profile, limits)
    functions = [stubs.function_for(t) for t in connectors(profile.tools)]
    rules = dict(profile.rules)
    if rule is not None:
        rules[CAPABILITY] = rule
    return dataclasses.replace(
        profile,
        system=profile.system + PROMPT + stubs.listing(functions),
        tools=(tool,),
        rules=rules,
    )
