"""MCP server configuration (settings.AGENTDESK_MCP_SERVERS; every key is
described in capabilities/mcp.py), read apart from the client so that the
kept sessions (mcp_sessions.py) and the calls (mcp.py) both use it without
importing each other.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Any

from django.conf import settings

from capabilities.names import PROVIDER_RE

log = logging.getLogger(__name__)
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    name: str
    transport: str
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 15.0
    list_ttl_s: float = 300.0
    persistent: bool = True
    idle_probe_s: float = 2.0
    tools: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict, hash=False)


def servers() -> dict[str, ServerConfig]:
    """The configured servers; a malformed entry is logged and left out."""
    found: dict[str, ServerConfig] = {}
    for name, raw in (settings.AGENTDESK_MCP_SERVERS or {}).items():
        try:
            found[name] = _config(name, raw)
        except (TypeError, ValueError, KeyError) as exc:
            log.error("MCP server %r is misconfigured, left out: %s", name, exc)
    return found


def _config(name: str, raw: dict[str, Any]) -> ServerConfig:
    if not PROVIDER_RE.match(name) or len(name) > 30:
        raise ValueError("a server name is [a-z0-9_-], at most 30 characters, no '__'")
    transport = raw.get("transport", "stdio")
    if transport not in ("stdio", "http"):
        raise ValueError(f"unknown transport {transport!r}")
    if transport == "stdio" and not raw.get("command"):
        raise ValueError("a stdio server needs a command")
    if transport == "http" and not raw.get("url"):
        raise ValueError("an http server needs a url")
    return ServerConfig(
        name=name,
        transport=transport,
        command=tuple(raw.get("command") or ()),
        env=tuple((raw.get("env") or {}).items()),
        cwd=raw.get("cwd"),
        url=raw.get("url", ""),
        headers=tuple((raw.get("headers") or {}).items()),
        timeout_s=float(raw.get("timeout_s", settings.AGENTDESK_MCP_TIMEOUT_S)),
        list_ttl_s=float(raw.get("list_ttl_s", settings.AGENTDESK_MCP_LIST_TTL_S)),
        persistent=bool(raw.get("persistent", True)),
        idle_probe_s=float(raw.get("idle_probe_s", 2.0)),
        tools=dict(raw.get("tools") or {}),
    )


def expand(value: str) -> str:
    return _VAR_RE.sub(lambda m: os.environ.get(m.group(1), ""), value)
