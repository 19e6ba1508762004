"""Profile resolution: a profile name to the tools it may use, with their policy.

A profile row in the capabilities app (AgentProfile + ToolPolicy) wins over
the code profile of the same name, and lists every capability the profile
may use: a built-in tool (`lookup_order`), an MCP tool (`docs.search`) or a
sub-agent (`subagent.research`). Nothing else is offered, and the engine
refuses anything else (least privilege). A profile without a row is the
code profile, unchanged.

Resolved profiles are kept per process for AGENTDESK_CAPABILITY_CACHE_S, so
a claim costs no query most of the time and a policy change reaches every
worker within that time.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from django.conf import settings

from agents.tools.base import Kind, Tool, ToolContext, ToolError, ToolOutput
from agents.tools.profile import Profile, ToolRule
from capabilities import codemode, mcp, mcp_config, names, subagents
from capabilities.models import AgentProfile, McpToolList
from capabilities.registry import code_profile, code_tools

log = logging.getLogger(__name__)

_cache: dict[str, tuple[float, Profile | None]] = {}
_cache_lock = threading.Lock()


def resolve_profile(name: str) -> Profile | None:
    now = time.monotonic()
    hit = _cache.get(name)
    if hit is not None and hit[0] > now:
        return hit[1]
    profile = _build(name)
    with _cache_lock:
        _cache[name] = (now + settings.AGENTDESK_CAPABILITY_CACHE_S, profile)
    return profile


def get_profile(name: str) -> Profile:
    profile = resolve_profile(name)
    if profile is None:
        raise LookupError(f"unknown agent profile {name!r}")
    return profile


def forget(name: str | None = None) -> None:
    """Drop cached profiles (after a policy change in this process)."""
    with _cache_lock:
        if name is None:
            _cache.clear()
        else:
            _cache.pop(name, None)


def _build(name: str) -> Profile | None:
    code = code_profile(name)
    row = AgentProfile.objects.filter(name=name).prefetch_related("policies").first()
    if row is None:
        return code
    builtin = code_tools()
    servers = mcp_config.servers()
    listed: dict[str, dict[str, Tool]] = {}
    tools: list[Tool] = []
    rules: dict[str, ToolRule] = {}
    code_mode = None
    for policy in row.policies.all():
        if not policy.enabled:
            continue
        if policy.capability == codemode.CAPABILITY:
            code_mode = policy  # applied once the other tools are known
            continue
        tool = _capability(policy, builtin, servers, listed)
        if tool is None:
            log.warning("profile %s: capability %r is not available", name, policy.capability)
            continue
        tools.append(tool)
        rules[tool.name] = ToolRule(policy.approval, policy.max_calls_per_turn, policy.cost_cents)
    system = row.system_prompt or (code.system if code else "")
    profile = Profile(name, system, tuple(tools), rules, row.max_cost_cents_per_turn)
    if code_mode is not None:  # the tools become the program's host functions
        rule = ToolRule(code_mode.approval, code_mode.max_calls_per_turn, code_mode.cost_cents)
        limits = codemode.default_limits(wall_s=code_mode.timeout_s)
        profile = codemode.with_code_mode(profile, limits, rule)
    return profile


def _capability(policy, builtin, servers, listed) -> Tool | None:
    wire_name = names.wire(policy.capability)
    provider, sep, rest = wire_name.partition(names.SEP)
    if not sep:
        tool = builtin.get(wire_name)
        if tool is None:
            return None
        changes = {}
        if policy.kind:
            changes["kind"] = Kind(policy.kind)
        if policy.timeout_s:
            changes["timeout_s"] = policy.timeout_s
        return dataclasses.replace(tool, **changes) if changes else tool
    if provider == subagents.PROVIDER:
        return subagents.delegate_tool(rest)
    config = servers.get(provider)
    if config is None:
        return None
    if provider not in listed:
        listed[provider] = mcp.provider_tools(config, overrides={})
    tool = listed[provider].get(wire_name)
    if tool is not None:
        changes = {}
        if policy.kind or policy.timeout_s:
            # Rebuilt so the call itself uses the admin's timeout.
            overrides = {wire_name: {"kind": policy.kind, "timeout_s": policy.timeout_s}}
            tool = mcp.provider_tools(config, overrides=overrides)[wire_name]
        return tool
    if not listed[provider]:
        # The server never answered a listing: offer the tool anyway, so that
        # calling it says why it cannot run instead of the tool vanishing.
        return _unavailable(wire_name, provider)
    return None  # the server answered, and has no such tool


def _unavailable(wire_name: str, server: str) -> Tool:
    def run(ctx: ToolContext, arguments: dict) -> ToolOutput:
        row = McpToolList.objects.filter(server=server).first()
        why = row.error if row is not None and row.error else "it has not listed its tools"
        raise ToolError(f"MCP server {server!r} is unavailable: {why}")

    return Tool(
        name=wire_name,
        description=f"[{server} MCP] (currently unavailable)",
        input_schema={"type": "object"},
        kind=Kind.NOT_IDEMPOTENT,
        run=run,
    )
