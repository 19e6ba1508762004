"""Capability names: what people read, and what goes over the wire.

People and policies say `server.tool` (an MCP tool) or `subagent.research`
(a delegation). The Messages API only accepts tool names matching
^[a-zA-Z0-9_-]{1,64}$, so on the wire (and in ToolCall.name) the dot is a
double underscore: `server__tool`. Provider names (MCP servers) are
restricted to [a-z0-9_-] without a double underscore, so the first `__` of
a wire name always separates provider from tool. Built-in tools have no
provider part and keep their names.
"""

from __future__ import annotations

import re

WIRE_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
PROVIDER_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]|_(?!_))*$")
SEP = "__"


def wire(capability: str) -> str:
    """`docs.search` -> `docs__search`; `lookup_order` stays."""
    provider, dot, tool = capability.partition(".")
    return f"{provider}{SEP}{tool}" if dot else capability


def display(wire_name: str) -> str:
    """`docs__search` -> `docs.search`; `lookup_order` stays."""
    provider, sep, tool = wire_name.partition(SEP)
    return f"{provider}.{tool}" if sep else wire_name


def safe_tool_name(provider: str, remote: str) -> str | None:
    """The wire name for a provider's tool, or None when it cannot have one
    (then the tool is not offered: a name we cannot send is a tool the model
    cannot call)."""
    cleaned = re.sub(r"[^a-zA-Z0-9_-]", "_", remote)
    name = f"{provider}{SEP}{cleaned}"
    return name if WIRE_RE.match(name) else None
