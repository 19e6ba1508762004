"""One browser action, end to end, on the calling (slot) thread.

load the session's state (decrypt) -> check the budgets -> lease a context
on the browser thread (restored from the state when new here) -> do the
action, read the page, screenshot it, export the storage state -> seal and
write the state with the step's event (one transaction) -> the page as the
model reads it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents.models import ToolCall
from agents.tools.base import NotSent, ToolContext, ToolError
from capabilities.browser import host as hosting
from capabilities.browser import page, state
from capabilities.browser.config import BrowserConfig

READ_CHARS = 1500  # what the desk shows of what was read


@dataclass
class Call:
    id: int
    session_id: int
    turn_id: int
    tool_use_id: str


@dataclass
class Result:
    snap: dict[str, Any]
    shot: str
    storage: dict[str, Any]
    refused: list[dict[str, Any]]
    navigated: bool
    error: str = ""
    extra: Any = None
    filled: dict[str, dict] = field(default_factory=dict)
    # Refused since the session's last action, while none ran (guard.py).
    between: list[dict[str, Any]] = field(default_factory=list)


Work = Callable[[Any], Awaitable[Any]]


def call_of(ctx: ToolContext) -> Call:
    call_id = getattr(ctx, "call_id", None)
    rows = (
        ToolCall.objects.filter(pk=call_id)
        if call_id
        else ToolCall.objects.filter(idempotency_key=ctx.idempotency_key)
    )
    row = rows.values("id", "session_id", "turn_id", "tool_use_id").first()
    if row is None:
        raise ToolError("the browser runs only inside an agent session's tool call")
    return Call(row["id"], row["session_id"], row["turn_id"], row["tool_use_id"])


def begin(config: BrowserConfig, ctx: ToolContext) -> tuple[Call, state.Loaded]:
    call = call_of(ctx)
    loaded = state.for_turn(state.load(call.session_id), call.turn_id)
    if loaded.actions >= config.max_actions_per_turn:
        raise ToolError(f"browser budget: at most {config.max_actions_per_turn} actions per turn")
    if loaded.pages >= config.max_pages_per_turn:
        raise ToolError(f"browser budget: at most {config.max_pages_per_turn} pages per turn")
    spent = (timezone.now() - loaded.turn_started_at).total_seconds()
    if spent > config.max_wall_s_per_turn:
        raise ToolError(f"browser budget: {config.max_wall_s_per_turn:g} s of browsing per turn")
    return call, loaded


def act(
    config: BrowserConfig,
    ctx: ToolContext,
    name: str,
    summary: dict[str, Any],
    work: Work,
    *,
    loaded_call: tuple[Call, state.Loaded] | None = None,
    shot_quality: int = 35,
) -> tuple[Result, Call, state.Loaded]:
    """Run `work(slot)` on this session's context and record the step."""
    call, loaded = loaded_call or begin(config, ctx)
    loaded.actions += 1
    result = in_browser(config, ctx.session_key, loaded, work, shot_quality=shot_quality)
    record(loaded, call, name, summary, result)
    return result, call, loaded


def record(
    loaded: state.Loaded, call: Call, name: str, summary: dict[str, Any], result: Result
) -> None:
    loaded.data["storage"] = result.storage
    state.remember_page(loaded, result.snap["url"], result.navigated)
    for form, fields in result.filled.items():
        loaded.data.setdefault("forms", {}).setdefault(form, {}).update(fields)
    step = {
        "tool_use_id": call.tool_use_id,
        "action": name,
        "target": summary,
        "url": result.snap["url"][:500],
        "title": result.snap["title"][:200],
        "read": result.snap["text"][:READ_CHARS],
        "thumb": result.shot,
        "refused": result.refused,
    }
    if result.error:
        step["error"] = result.error[:300]
    state.save(loaded, step=step, turn_id=call.turn_id, between=result.between)


def in_browser(
    config: BrowserConfig,
    key: str,
    loaded: state.Loaded,
    work: Work,
    *,
    shot_quality: int = 35,
) -> Result:
    return finish(config, start(config, key, loaded, work, shot_quality=shot_quality))


def start(
    config: BrowserConfig, key: str, loaded: state.Loaded, work: Work, *, shot_quality: int = 35
) -> concurrent.futures.Future:
    """The action, begun on the browser's loop; `finish` waits for it."""
    try:
        host = hosting.host()
    except hosting.BrowserMissing as exc:
        raise ToolError(str(exc)) from exc
    coro = _leased(host, config, key, loaded, work, shot_quality)
    return asyncio.run_coroutine_threadsafe(coro, host.loop)


def finish(config: BrowserConfig, future: concurrent.futures.Future) -> Result:
    wait = settings.AGENTDESK_BROWSER_CONTEXT_WAIT_S
    try:
        return future.result(timeout=config.action_timeout_s * 3 + wait)
    except hosting.Busy as exc:
        raise NotSent(str(exc)) from exc


async def _leased(host, config, key, loaded, work, shot_quality) -> Result:
    slot = await host.lease(key, loaded.version, loaded.data, config)
    between = host.take_unrecorded(key) + slot.guard.take_between()
    ms = config.action_timeout_s * 1000
    keep = False
    try:
        if slot.page.url == "about:blank" and loaded.data.get("url"):
            await page.go(slot.page, loaded.data["url"], ms)  # restored: back where it was
            await page.refill(slot, loaded.data.get("forms") or {})
        before, error, extra = slot.page.url, "", None
        try:
            extra = await work(slot)
        except ToolError as exc:
            error = str(exc)
        refused = slot.guard.take_refused()
        if slot.page.url.startswith("chrome-error://") and before.startswith("http"):
            # A refused navigation leaves Chromium's error page: back to where we were.
            await page.go(slot.page, before, ms)
            error = error or "the page tried to go where this profile does not allow"
        snap = await page.snapshot(slot.page)
        result = Result(
            snap=snap,
            shot=await page.screenshot(slot.page, quality=shot_quality),
            storage=await slot.context.storage_state(),
            refused=refused + slot.guard.take_refused(),
            navigated=snap["url"] != before,
            error=error,
            extra=extra,
            between=between,
        )
        if isinstance(extra, dict) and "filled" in extra:
            result.filled = extra["filled"]
        keep = True
        return result
    finally:
        # The stored version moves on by one when the caller saves; a context
        # whose action broke is closed (the next one restores from Postgres).
        await host.give_back(slot, version=loaded.version + 1, close=not keep)


def output(result: Result) -> tuple[str, bool]:
    text = page.describe(result.snap)
    if result.refused:
        refused = "; ".join(f"{r['kind']} {r['url']} ({r['reason']})" for r in result.refused)
        text = f"Refused by policy and recorded: {refused}\n{text}"
    if result.error:
        return f"Error: {result.error}\n{text}", True
    return text, False


def close_for(session_key: str, *, session_id: int, turn_id: int | None) -> None:
    """The session waits (on a person, a follow-up): close its context here,
    and record what its page had refused since its last action."""
    host = hosting.started()
    if host is None:
        return
    try:
        refused = host.run(lambda: host.close(session_key), timeout=10)
    except Exception:  # closing is an optimisation; the idle reaper is the net
        return
    if refused:
        state.record_refused(session_id, turn_id, refused)


def handshake() -> tuple[concurrent.futures.Future, concurrent.futures.Future]:
    """Two futures for a pause inside a browser action: the loop says what it
    found (`ready`), the slot thread writes to Postgres and says go (`go`)."""
    return concurrent.futures.Future(), concurrent.futures.Future()


async def wait_go(go: concurrent.futures.Future) -> Any:
    return await asyncio.wrap_future(go)


def turn_ended(claimed: Any) -> None:
    """The runtime's turn_ended hook: close the session's context here, if any."""
    if hosting.started() is not None:
        close_for(claimed.key, session_id=claimed.session_id, turn_id=claimed.turn_id)
