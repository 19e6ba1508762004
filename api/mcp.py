"""Agentdesk as an MCP server (streamable HTTP, the official `mcp` SDK),
mounted at /mcp in config/asgi.py: any agent can ask our people for an
approval, post a message to a session and read a session's status.

Authenticated with an API token (`Authorization: Bearer adk_...`), checked
before the SDK sees the request; every tool call is audited (api.ApiAudit,
via "mcp") under the token's user, refusals too. The writes (asking for an
approval, posting a message) count against the token's write limit, the
same window as REST's (api/ratelimit.py), and take REST's rules for text:
no NUL, a session key of 1 to 200 characters (refused beyond, never cut),
a message of at most 100,000 characters, arguments of at most 100,000
characters of JSON. Stateless and JSON answers: any Daphne
process serves any call, and nothing is kept between calls but Postgres.

`request_approval` waits up to `wait_s` for the decision and then answers
with the status so far; `approval_status` goes on waiting for the same
approval (a poll that holds the request open, as long polling does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from asgiref.sync import sync_to_async
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

from agents import selectors, services
from agents.errors import ServiceError
from agents.models import Turn
from agents.tools.arguments import problems
from api import external, ratelimit, tokens
from api.models import ApiAudit
from api.tokens import Principal
from approvals.models import Approval

MAX_WAIT_S = 120.0
POLL_S = 0.5
MAX_KEY = 200  # api.schemas.MessageIn.session_key
MAX_TEXT = 100_000  # api.schemas.MessageIn.text
MAX_ARGUMENTS = 100_000  # characters of JSON: dashboard.inputs.MAX_JSON_CHARS

server = MCPServer(
    "agentdesk",
    instructions=(
        "Ask Agentdesk's people to approve an action before you take it "
        "(request_approval, then approval_status until it is decided), post a "
        "message to an Agentdesk session, or read a session's status."
    ),
)


def _principal(ctx: Context) -> Principal:
    request = ctx.request_context.request
    principal = request.scope.get("agentdesk.principal") if request is not None else None
    if principal is None:  # the ASGI wrapper lets nothing through without one
        raise ToolError("a valid bearer token is required")
    return principal


def _need(principal: Principal, perm: str) -> None:
    if not principal.has_perm(perm):
        raise ToolError(f"this token may not do that (needs {perm})")


def _audit(principal: Principal, tool: str, status: int) -> None:
    ApiAudit.objects.create(
        user=principal.user,
        token=principal.token,
        via="mcp",
        method="CALL",
        path=f"mcp:{tool}",
        status=status,
    )


class _Limited(Exception):
    def __init__(self, wait: int) -> None:
        self.wait = wait


async def _call(
    principal: Principal,
    tool: str,
    perm: str,
    fn,
    *,
    write: bool = False,
    problem: str = "",
    **kwargs: Any,
) -> Any:
    """Permission, the input's rules, the write limit, the service call, the
    audit row (refusals audited too, with the status REST would answer)."""

    def run() -> Any:
        _need(principal, perm)  # the user's permissions are read from Postgres
        if problem:
            raise ServiceError(problem)
        if write and (wait := ratelimit.retry_after(principal.rate_key)):
            raise _Limited(wait)
        return fn(**kwargs)

    try:
        result = await sync_to_async(run)()
    except ToolError:
        await sync_to_async(_audit)(principal, tool, 403)
        raise
    except _Limited as exc:
        await sync_to_async(_audit)(principal, tool, 429)
        raise ToolError(
            f"too many writes with this token; retry after {exc.wait} seconds"
        ) from None
    except ServiceError as exc:
        await sync_to_async(_audit)(principal, tool, exc.status)
        raise ToolError(exc.message) from None
    await sync_to_async(_audit)(principal, tool, 200)
    return result


def _text_problem(name: str, value: Any, *, most: int, required: bool = True) -> str:
    """Why a text argument is refused (REST's rules), or ""."""
    if not isinstance(value, str):
        return f"{name} must be text"
    if "\x00" in value:
        return f"{name} contains a NUL character"
    if len(value) > most:
        return f"{name} is {len(value):,} characters; at most {most:,}"
    if required and not value.strip():
        return f"{name} must not be empty"
    return ""


def _arguments_problem(arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return "arguments must be an object"
    if why := problems(None, arguments, "arguments"):
        return why
    size = len(json.dumps(arguments, ensure_ascii=False))
    if size > MAX_ARGUMENTS:
        return f"arguments are {size:,} characters of JSON; at most {MAX_ARGUMENTS:,}"
    return ""


async def _wait(principal: Principal, approval_id: int, wait_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + max(0.0, min(wait_s, MAX_WAIT_S))
    while True:
        outcome = await sync_to_async(external.approval_outcome)(
            approval_id=approval_id, user=principal.user
        )
        if outcome["status"] != Approval.Status.PENDING or time.monotonic() >= deadline:
            return outcome
        await asyncio.sleep(POLL_S)


@server.tool(
    description="Ask a person in Agentdesk to approve an action before you take it. "
    "Returns the approval's id and its status: waits up to wait_s seconds (at most 120) "
    "for the decision; if still pending, call approval_status with the id. Run the "
    "action only when the status is 'approved', with the returned arguments."
)
async def request_approval(
    tool_name: str,
    arguments: dict[str, Any],
    reason: str,
    ctx: Context,
    session_key: str = "",
    wait_s: float = 30.0,
) -> dict[str, Any]:
    principal = _principal(ctx)
    if principal.user is None:
        raise ToolError("approvals are asked for with a person's token, not the service token")
    problem = (
        _text_problem("tool_name", tool_name, most=128)
        or _text_problem("reason", reason, most=4000)
        or _text_problem("session_key", session_key, most=MAX_KEY, required=False)
        or _arguments_problem(arguments)
    )
    approval = await _call(
        principal,
        "request_approval",
        "agents.operate_session",
        external.external_approval_request,
        write=True,
        problem=problem,
        user=principal.user,
        tool_name=tool_name,
        arguments=arguments,
        reason=reason,
        session_key=session_key,
    )
    return await _wait(principal, approval.id, wait_s)


@server.tool(
    description="The status of an approval you asked for; waits up to wait_s seconds "
    "(at most 120) while it is pending."
)
async def approval_status(approval_id: int, ctx: Context, wait_s: float = 30.0) -> dict[str, Any]:
    principal = _principal(ctx)
    if principal.user is None:
        raise ToolError("the service token asks for no approvals")
    await _call(
        principal,
        "approval_status",
        "agents.operate_session",
        external.approval_outcome,
        approval_id=approval_id,
        user=principal.user,
    )
    return await _wait(principal, approval_id, wait_s)


@server.tool(description="Post a message to the agent of an Agentdesk session (by domain key).")
async def post_message(session_key: str, text: str, ctx: Context) -> dict[str, Any]:
    principal = _principal(ctx)
    problem = _text_problem("session_key", session_key, most=MAX_KEY) or _text_problem(
        "text", text, most=MAX_TEXT
    )
    turn = await _call(
        principal,
        "post_message",
        "agents.post_message",
        services.message_post,
        write=True,
        problem=problem,
        key=session_key,
        text=text,
        trigger=Turn.Trigger.API,
        user=principal.user,
    )
    return {"session": session_key, "session_id": turn.session_id, "turn": turn.number}


def _status(*, user, session_key: str) -> dict[str, Any]:
    session = (
        selectors.sessions_for_user(user=user)
        .select_related("runtime")
        .filter(key=session_key)
        .first()
    )
    if session is None:
        raise ServiceError("no session has this key")
    turn = Turn.objects.filter(session=session).order_by("-number").first()
    return {
        "session_id": session.id,
        "key": session.key,
        "status": session.status,
        "last_seq": session.runtime.last_seq,
        "last_turn": {"number": turn.number, "status": turn.status} if turn else None,
    }


@server.tool(description="The status of an Agentdesk session and of its latest turn.")
async def session_status(session_key: str, ctx: Context) -> dict[str, Any]:
    principal = _principal(ctx)
    return await _call(
        principal,
        "session_status",
        "agents.view_session",
        _status,
        problem=_text_problem("session_key", session_key, most=MAX_KEY),
        user=principal.user,
        session_key=session_key,
    )


class MCPApp:
    """The ASGI app for /mcp: the bearer token first (401 without a valid
    one), then the SDK's streamable-HTTP app. The SDK's session manager runs
    in a task started with the first request (Daphne has no ASGI lifespan)."""

    def __init__(self) -> None:
        # Bearer tokens are not sent by browsers on their own, so the SDK's
        # DNS-rebinding guard (for unauthenticated local servers) is not needed.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.app = server.streamable_http_app(
            streamable_http_path="/mcp",
            json_response=True,
            stateless_http=True,
            transport_security=security,
        )
        self.started: asyncio.Event | None = None

    async def _run_manager(self) -> None:
        async with server.session_manager.run():
            self.started.set()
            await asyncio.Event().wait()  # for the life of the process

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        if self.started is None:
            self.started = asyncio.Event()
            self.task = asyncio.ensure_future(self._run_manager())
        await self.started.wait()
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"").decode("latin-1")
        principal = None
        if given.lower().startswith("bearer "):
            principal = await sync_to_async(tokens.authenticate)(given[7:].strip())
        if principal is None:
            await _unauthorized(send)
            return
        scope = {**scope, "agentdesk.principal": principal}
        with contextlib.suppress(asyncio.CancelledError):
            await self.app(scope, receive, send)


async def _unauthorized(send) -> None:
    body = (
        b'{"type":"urn:agentdesk:problem:unauthenticated","title":"Unauthorized",'
        b'"status":401,"detail":"a valid bearer token is required"}'
    )
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"www-authenticate", b"Bearer"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


mcp_app = MCPApp()
