"""MCP servers as capability providers (the official `mcp` SDK, client side).

Configuration (settings.AGENTDESK_MCP_SERVERS, from the environment), per server:

- `transport`: "stdio" (with `command`: argv list, optional `env`, `cwd`) or
  "http" (streamable HTTP, with `url` and optional `headers`).
- `timeout_s`: per call (default AGENTDESK_MCP_TIMEOUT_S); `list_ttl_s`: how
  long a discovered tool list is trusted (default AGENTDESK_MCP_LIST_TTL_S).
- `tools`: per remote tool name, `kind` (read_only, idempotent_by_key,
  not_idempotent: the default, as a server's own hints are not trusted),
  `idempotency` ("meta": the key rides in the request's `_meta` under
  IDEMPOTENCY_META_KEY, the default; "argument:<name>": the key is that
  argument, which the model is then not shown), `timeout_s`, and
  `external_id` (the structured-output field to record as the call's
  external id).

Any string may say ${VAR}: it is read from this process's environment when the
server is contacted. Secrets therefore come from configuration; the model only
ever supplies a tool's arguments.

Each call opens a connection in a short-lived event loop (asyncio.run) and
closes it: nothing survives a fork (Celery prefork children start clean),
nothing is shared between threads, and a server that died between two calls
costs nothing. The price is a connection per call (see the report in the
tests: a few ms over HTTP, a process start over stdio). Everything is bounded
by a timeout, and every failure becomes one of the errors recovery knows
(agents/tools/base.py): not sent (retry), outcome unknown (retry by key or
in_doubt), or a definite error the model reads.

Tool lists are cached in capabilities.McpToolList (shared by every worker),
refreshed when older than the TTL; a refresh that fails keeps the last good
list (the server's tools stay offered, and calling them gives a clear error)
and is not retried for AGENTDESK_MCP_RETRY_LIST_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx2
from django.conf import settings
from django.utils import timezone
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agents.capabilities.names import PROVIDER_RE, safe_tool_name
from agents.tools.base import (
    Kind,
    NotSent,
    OutcomeUnknown,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
)

log = logging.getLogger(__name__)

IDEMPOTENCY_META_KEY = "agentdesk.dev/idempotency-key"
SESSION_META_KEY = "agentdesk.dev/session"
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_OUTPUT_CHARS = 50_000


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
        tools=dict(raw.get("tools") or {}),
    )


def _expand(value: str) -> str:
    return _VAR_RE.sub(lambda m: os.environ.get(m.group(1), ""), value)


# --- One connection --------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _connect(config: ServerConfig) -> AsyncIterator[ClientSession]:
    if config.transport == "stdio":
        params = StdioServerParameters(
            command=_expand(config.command[0]),
            args=[_expand(a) for a in config.command[1:]],
            env={k: _expand(v) for k, v in config.env},
            cwd=config.cwd,
        )
        # The real stderr: Celery swaps sys.stderr for a proxy without a file descriptor.
        transport = stdio_client(params, errlog=sys.__stderr__)
    else:
        client = httpx2.AsyncClient(
            headers={k: _expand(v) for k, v in config.headers},
            timeout=httpx2.Timeout(config.timeout_s),
        )
        transport = streamable_http_client(_expand(config.url), http_client=client)
    async with transport as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            yield session


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _run(coro_fn, timeout_s: float) -> Any:
    """Run one exchange in a fresh event loop, bounded by `timeout_s`."""

    async def bounded():
        return await asyncio.wait_for(coro_fn(), timeout_s)

    return asyncio.run(bounded())


def call(
    config: ServerConfig,
    remote: str,
    arguments: dict[str, Any],
    *,
    meta: dict[str, Any],
    timeout_s: float,
) -> Any:
    """One tools/call. Raises NotSent, OutcomeUnknown or ToolError (base.py)."""
    sent = False

    async def exchange():
        nonlocal sent
        async with _connect(config) as session:
            sent = True  # from here on, the server may act on it
            return await session.call_tool(
                remote, arguments, read_timeout_seconds=timeout_s, meta=meta
            )

    where = f"MCP server {config.name!r}"
    try:
        # The connection gets its own share of time on top of the call's.
        return _run(exchange, timeout_s + config.timeout_s)
    except BaseException as exc:  # noqa: BLE001 (sorted below; nothing escapes unsorted)
        error = _leaf(exc)
        if isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        if isinstance(error, MCPError):
            # An answered JSON-RPC error: unknown tool, invalid params...
            raise ToolError(f"{where} refused {remote}: {error.error.message}") from error
        if isinstance(error, RuntimeError) and "structured content" in str(error):
            raise ToolError(f"{where} answered {remote} with invalid output: {error}") from error
        reason = _describe(error, timeout_s)
        if not sent:
            raise NotSent(f"{where} unreachable: {reason}") from error
        raise OutcomeUnknown(f"{where} stopped answering {remote}: {reason}") from error


def _describe(error: BaseException, timeout_s: float) -> str:
    if isinstance(error, TimeoutError | asyncio.TimeoutError):
        return f"no answer within {timeout_s:g}s"
    return f"{type(error).__name__}: {error}"[:500]


def list_remote_tools(config: ServerConfig) -> list[dict[str, Any]]:
    """Ask the server for its tools (all pages)."""

    async def exchange():
        tools: list[dict[str, Any]] = []
        async with _connect(config) as session:
            cursor = None
            while True:
                page = (
                    await session.list_tools(cursor=cursor)
                    if cursor
                    else await session.list_tools()
                )
                for tool in page.tools:
                    tools.append(
                        {
                            "name": tool.name,
                            "description": tool.description or "",
                            "input_schema": tool.input_schema or {"type": "object"},
                            "output_schema": tool.output_schema,
                        }
                    )
                cursor = page.next_cursor
                if not cursor:
                    return tools

    return _run(exchange, 2 * config.timeout_s)


# --- The shared tool-list cache ------------------------------------------------------------


def tool_list(config: ServerConfig) -> list[dict[str, Any]]:
    """The server's tools: cached, refreshed when stale, last good list on failure."""
    from capabilities.models import McpToolList

    row = McpToolList.objects.filter(server=config.name).first()
    now = timezone.now()
    if row is not None and row.refreshed_at and now - row.refreshed_at < _td(config.list_ttl_s):
        return row.tools
    if (
        row is not None
        and row.failed_at
        and now - row.failed_at < _td(settings.AGENTDESK_MCP_RETRY_LIST_S)
    ):
        return row.tools
    try:
        tools = list_remote_tools(config)
    except BaseException as exc:  # noqa: BLE001 (a dead server must not stop the worker)
        error = _leaf(exc)
        if isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        reason = _describe(error, config.timeout_s)
        log.warning("MCP server %r: listing tools failed: %s", config.name, reason)
        McpToolList.objects.update_or_create(
            server=config.name, defaults={"error": reason, "failed_at": now}
        )
        return row.tools if row is not None else []
    McpToolList.objects.update_or_create(
        server=config.name,
        defaults={"tools": tools, "refreshed_at": now, "error": "", "failed_at": None},
    )
    return tools


def _td(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


# --- Tools the engine runs --------------------------------------------------------------


def provider_tools(
    config: ServerConfig, *, overrides: dict[str, dict[str, Any]] | None = None
) -> dict[str, Tool]:
    """The server's tools as runtime Tools, by wire name (`server__tool`).

    `overrides` (by wire name) carry an admin's policy: kind, timeout_s."""
    found: dict[str, Tool] = {}
    for spec in tool_list(config):
        wire_name = safe_tool_name(config.name, spec["name"])
        if wire_name is None or wire_name in found:
            log.warning("MCP server %r: tool %r has no usable name", config.name, spec["name"])
            continue
        found[wire_name] = _tool(config, spec, wire_name, (overrides or {}).get(wire_name, {}))
    return found


def _tool(config: ServerConfig, spec: dict[str, Any], wire_name: str, policy: dict) -> Tool:
    declared = config.tools.get(spec["name"], {})
    kind = Kind(policy.get("kind") or declared.get("kind") or Kind.NOT_IDEMPOTENT)
    timeout_s = float(policy.get("timeout_s") or declared.get("timeout_s") or config.timeout_s)
    idempotency = declared.get("idempotency", "meta")
    schema = json.loads(json.dumps(spec["input_schema"]))  # our own copy to trim
    key_argument = ""
    if idempotency.startswith("argument:"):
        key_argument = idempotency.split(":", 1)[1]
        schema.get("properties", {}).pop(key_argument, None)
        if key_argument in schema.get("required", []):
            schema["required"] = [r for r in schema["required"] if r != key_argument]

    def run(ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
        sent_arguments = dict(arguments)
        meta: dict[str, Any] = {SESSION_META_KEY: ctx.session_key}
        if idempotency == "meta":
            meta[IDEMPOTENCY_META_KEY] = ctx.idempotency_key
        elif key_argument:
            sent_arguments[key_argument] = ctx.idempotency_key
        result = call(config, spec["name"], sent_arguments, meta=meta, timeout_s=timeout_s)
        return _output(result, declared.get("external_id", ""))

    description = spec["description"] or f"{spec['name']} (MCP server {config.name})"
    return Tool(
        name=wire_name,
        description=f"[{config.name} MCP] {description}"[:1024],
        input_schema=schema,
        kind=kind,
        run=run,
        timeout_s=timeout_s,
    )


def _output(result: Any, external_field: str) -> ToolOutput:
    structured = getattr(result, "structured_content", None)
    texts = []
    for block in getattr(result, "content", None) or []:
        text = getattr(block, "text", None)
        texts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    if structured is not None:
        content = json.dumps(structured, sort_keys=True)
    else:
        content = "\n".join(texts)
    external_id = ""
    if external_field and isinstance(structured, dict):
        external_id = str(structured.get(external_field, ""))[:200]
    if not external_id and external_field and texts:
        with contextlib.suppress(ValueError, TypeError):
            external_id = str(json.loads(texts[0]).get(external_field, ""))[:200]
    return ToolOutput(
        content=content[:MAX_OUTPUT_CHARS],
        is_error=bool(getattr(result, "is_error", False)),
        external_id=external_id,
    )
