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
- `persistent` (default true): keep one session open per worker process
  (mcp_sessions.py); false opens a session for each call and closes it.
- `idle_probe_s` (default 2): a kept session idle for longer is pinged
  before the next call is written on it.

Any string may say ${VAR}: it is read from this process's environment when the
server is contacted. Secrets therefore come from configuration; the model only
ever supplies a tool's arguments.

Sessions stay open per worker process (mcp_sessions.py: one loop thread, one
session per server, reopened after a failure; stdio servers stay running).
Everything is bounded by a timeout, and every failure becomes one of the
errors recovery knows (agents/tools/base.py):
- not sent (safe to retry anywhere): no session could be opened, the ping
  before the call went unanswered, or an HTTP server that restarted said it
  does not know our session (it ran nothing);
- outcome unknown (retried with the same key, or in_doubt): the request was
  written on a live session and then no answer came in time, or the
  connection closed under it;
- a definite error the model reads: the server answered with a JSON-RPC
  error, or with output that breaks the tool's outputSchema.

Tool lists are cached in capabilities.McpToolList (shared by every worker),
refreshed when older than the TTL; a refresh that fails keeps the last good
list (the server's tools stay offered, and calling them gives a clear error)
and is not retried for AGENTDESK_MCP_RETRY_LIST_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from mcp import ClientSession, types
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST, REQUEST_TIMEOUT

from agents.tools.base import (
    Kind,
    NotSent,
    OutcomeUnknown,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
)
from capabilities import mcp_sessions
from capabilities.mcp_config import ServerConfig
from capabilities.models import McpToolList
from capabilities.names import safe_tool_name

log = logging.getLogger(__name__)

IDEMPOTENCY_META_KEY = "agentdesk.dev/idempotency-key"
SESSION_META_KEY = "agentdesk.dev/session"
MAX_OUTPUT_CHARS = 50_000


# --- Calls -------------------------------------------------------------------------------

# On top of a call's own timeout: time to open (or ping) a session first, and
# for the SDK's own deadline to fire before ours.
GRACE_S = 1.0


def call(
    config: ServerConfig,
    remote: str,
    arguments: dict[str, Any],
    *,
    meta: dict[str, Any],
    timeout_s: float,
) -> Any:
    """One tools/call. Raises NotSent, OutcomeUnknown or ToolError (base.py)."""
    pool = mcp_sessions.sessions()
    attempt = mcp_sessions.Attempt()
    exchange = _call(pool, config, remote, arguments, meta, timeout_s, attempt)
    try:
        return pool.run(exchange, _opening_s(config) + timeout_s + GRACE_S)
    except BaseException as exc:  # noqa: BLE001 (sorted below; nothing escapes unsorted)
        raise _sorted(exc, attempt.sent, config, remote, timeout_s) from exc


async def _call(pool, config, remote, arguments, meta, timeout_s, attempt) -> Any:
    if not config.persistent:  # a session for this call alone (the way it was before)
        async with mcp_sessions.connect(config) as session:
            attempt.sent = True  # from here on, the server may act on it
            return await session.call_tool(
                remote, arguments, read_timeout_seconds=timeout_s, meta=meta
            )
    async with pool.session(config) as held:  # entering raises: nothing was written
        mark = held.mark()
        attempt.sent = True
        try:
            # The SDK's read timeout first; ours also covers a write that blocks.
            return await asyncio.wait_for(
                held.session.call_tool(
                    remote, arguments, read_timeout_seconds=timeout_s, meta=meta
                ),
                timeout_s + GRACE_S / 2,
            )
        except BaseException as exc:
            if not _session_survives(exc):
                held.fail(_describe(mcp_sessions.leaf(exc), timeout_s))
            if _lost(mcp_sessions.leaf(exc)) and held.never_connected(mark):
                attempt.sent = False  # our POST found nothing listening: it never left
            raise


def _opening_s(config: ServerConfig) -> float:
    if not config.persistent:
        return config.timeout_s
    return config.timeout_s + mcp_sessions.PROBE_TIMEOUT_S


def _lost(error: BaseException) -> bool:
    """The request went out and no answer will come (the SDK says so with an MCPError)."""
    return isinstance(error, MCPError) and error.code in (REQUEST_TIMEOUT, CONNECTION_CLOSED)


def _forgotten(error: BaseException) -> bool:
    """The request was not taken: an HTTP server that restarted answers 404 to
    our session id (the SDK reports it as INVALID_REQUEST), and a JSON-RPC
    Invalid Request is by definition not executed. It ran nothing."""
    return isinstance(error, MCPError) and error.code == INVALID_REQUEST


def _bad_output(error: BaseException) -> bool:
    """The SDK's check of structured content against the tool's outputSchema
    failed (mcp_sessions.BadOutput)."""
    return isinstance(error, mcp_sessions.BadOutput)


def _session_survives(exc: BaseException) -> bool:
    """An answer, even a refusal, leaves the session good for the next call."""
    error = mcp_sessions.leaf(exc)
    answered = isinstance(error, MCPError) and not _lost(error) and not _forgotten(error)
    return answered or _bad_output(error)


def _sorted(
    exc: BaseException, sent: bool, config: ServerConfig, remote: str, timeout_s: float
) -> BaseException:
    error = mcp_sessions.leaf(exc)
    if isinstance(error, KeyboardInterrupt | SystemExit):
        return error
    where = f"MCP server {config.name!r}"
    reason = _describe(error, timeout_s)
    if not sent or _forgotten(error):  # nothing was written, or nothing ran: safe to retry
        return NotSent(f"{where} unreachable: {reason}")
    if _bad_output(error):
        detail = str(error).splitlines()[0][:500]  # jsonschema adds the schema and instance
        return ToolError(f"{where} answered {remote} with invalid output: {detail}")
    if isinstance(error, MCPError) and not _lost(error):
        # An answered JSON-RPC error: unknown tool, invalid params...
        return ToolError(f"{where} refused {remote}: {error.error.message}")
    return OutcomeUnknown(f"{where} stopped answering {remote}: {reason}")


def _describe(error: BaseException, timeout_s: float) -> str:
    timed_out = isinstance(error, MCPError) and error.code == REQUEST_TIMEOUT
    if timed_out or isinstance(error, TimeoutError | asyncio.TimeoutError):
        return f"no answer within {timeout_s:g}s"
    return f"{type(error).__name__}: {error}"[:500]


def list_remote_tools(config: ServerConfig) -> list[dict[str, Any]]:
    """Ask the server for its tools (all pages)."""
    pool = mcp_sessions.sessions()
    return pool.run(_list(pool, config), _opening_s(config) + 2 * config.timeout_s + GRACE_S)


async def _list(pool, config: ServerConfig) -> list[dict[str, Any]]:
    if not config.persistent:
        async with mcp_sessions.connect(config) as session:
            return await _pages(session)
    async with pool.session(config) as held:
        try:
            return await asyncio.wait_for(_pages(held.session), 2 * config.timeout_s)
        except BaseException as exc:
            if not _session_survives(exc):
                held.fail(_describe(mcp_sessions.leaf(exc), config.timeout_s))
            raise


async def _pages(session: ClientSession) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
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


# --- The shared tool-list cache ------------------------------------------------------------


def tool_list(config: ServerConfig) -> list[dict[str, Any]]:
    """The server's tools: cached, refreshed when stale, last good list on failure."""
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
        error = mcp_sessions.leaf(exc)
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
