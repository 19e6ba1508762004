"""One Chromium per worker process, a browser context per active agent session.

Playwright is bound to the thread (and event loop) that started it, while
a worker runs sessions on a pool of threads. So the browser lives on one
dedicated thread of its own with an asyncio loop (Playwright's async API):
a tool, on whatever slot thread it runs, hands a coroutine to that loop
(`Host.run`) and waits for its result. Many sessions' actions interleave on
the loop while each waits on the network.

Contexts are bounded (AGENTDESK_BROWSER_MAX_CONTEXTS). A session takes its
context for one action (a lease); a session without one gets a new context
restored from its stored state, closing the least recently used idle
context when the bound is reached. When every context is in use the action
waits up to AGENTDESK_BROWSER_CONTEXT_WAIT_S, then fails as `Busy` (a
request that never left: the runtime retries it). Nothing is lost by
closing a context: its state is in Postgres after every action.

Every request of every context goes through `guard.Guard` (least privilege).
What it refuses while no action runs (a page's timer) waits in the guard,
or here in `unrecorded` once its context is closed, until the session's
next action or the close of its context records it (actions.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings

from agents.per_process import PerProcess
from capabilities.browser import guard

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_UNRECORDED_KEYS = 1000  # sessions that never come back to this process

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # the worker is the sandbox boundary here (container, user)
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # Debian's chromium is the full browser in its new headless mode: every
    # page gets a browser window whose location bar preloads two WebUI
    # omnibox pop-ups (the classic and the "AI mode" one), each in a
    # renderer process of its own, for a window no one sees. They were two
    # of the three renderers, and 40 of the 75 MiB, of each open context
    # (bench/browser.py). The spare renderer, kept warm for the next page,
    # is 10 MiB for a page opened only when a context is made or restored.
    "--disable-features=Translate,MediaRouter,OptimizationHints,"
    "WebUIOmniboxPopup,WebUIOmniboxAimPopup,SpareRendererForSitePerProcess",
]
VIEWPORT = {"width": 900, "height": 700}


class Busy(Exception):
    """Every context of this process is in use; nothing was done."""


class BrowserMissing(Exception):
    """Chromium is not installed where AGENTDESK_BROWSER_EXECUTABLE says."""


@dataclass
class Slot:
    """One session's context and page on this process."""

    key: str
    version: int  # the stored state's version this context is at
    context: Any
    page: Any
    guard: guard.Guard
    in_use: bool = False
    last_used: float = field(default_factory=time.monotonic)


class Host:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.slots: dict[str, Slot] = {}
        # By session key: refusals of closed contexts, not recorded yet.
        self.unrecorded: dict[str, list[dict[str, Any]]] = {}
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._playwright: Any = None
        self._browser: Any = None
        self._freed: asyncio.Condition | None = None
        self._thread = threading.Thread(target=self._main, name="browser", daemon=True)
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise self._error

    # --- The loop thread -----------------------------------------------------------

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._start())
        except BaseException as exc:  # reported to the first caller
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        from playwright.async_api import async_playwright

        self._freed = asyncio.Condition()
        self._playwright = await async_playwright().start()
        await self._launch()

    async def _launch(self) -> None:
        executable = settings.AGENTDESK_BROWSER_EXECUTABLE
        try:
            self._browser = await self._playwright.chromium.launch(
                executable_path=executable, args=CHROMIUM_ARGS, headless=True
            )
        except Exception as exc:
            raise BrowserMissing(
                f"cannot start Chromium at {executable} ({exc.__class__.__name__}); "
                "install it (Debian: apt-get install -y chromium) or set "
                "AGENTDESK_BROWSER_EXECUTABLE"
            ) from exc

    # --- Called from any thread ------------------------------------------------------

    def run(self, work: Callable[[], Awaitable[T]], timeout: float) -> T:
        future: Future = asyncio.run_coroutine_threadsafe(work(), self.loop)
        return future.result(timeout)

    # --- Leases (on the loop) ------------------------------------------------------

    async def lease(self, key: str, version: int, restore: dict[str, Any] | None, rules) -> Slot:
        """This session's context, made (and restored) when it has none here
        or has moved on elsewhere since (its stored version is newer)."""
        assert self._freed is not None
        deadline = time.monotonic() + settings.AGENTDESK_BROWSER_CONTEXT_WAIT_S
        async with self._freed:
            while True:
                await self._close_idle()
                slot = self.slots.get(key)
                if slot is not None and not slot.in_use:
                    if slot.version == version:
                        slot.in_use, slot.last_used = True, time.monotonic()
                        slot.guard.acting = True
                        return slot
                    await self._close(slot)  # another worker moved it on: restore
                    continue
                if slot is None and len(self.slots) < settings.AGENTDESK_BROWSER_MAX_CONTEXTS:
                    return await self._made(key, version, restore, rules)
                if slot is None and (idle := self._lru_idle()) is not None:
                    await self._close(idle)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Busy(
                        f"all {settings.AGENTDESK_BROWSER_MAX_CONTEXTS} browser contexts of "
                        "this worker are in use"
                    )
                try:
                    await asyncio.wait_for(self._freed.wait(), left)
                except TimeoutError:
                    pass

    async def _made(self, key: str, version: int, restore: dict[str, Any] | None, rules) -> Slot:
        """A new context for `key`, restored from the stored state (under the lock)."""
        assert self._freed is not None
        slot = Slot(key, version, None, None, guard.Guard(rules, acting=True), in_use=True)
        self.slots[key] = slot
        try:
            await self._open(slot, restore)
        except BaseException:
            self.slots.pop(key, None)
            self._freed.notify_all()
            raise
        return slot

    async def give_back(self, slot: Slot, *, version: int, close: bool = False) -> None:
        assert self._freed is not None
        async with self._freed:
            slot.in_use, slot.version, slot.last_used = False, version, time.monotonic()
            slot.guard.acting = False
            if close:
                await self._close(slot)
            self._freed.notify_all()

    async def close(self, key: str) -> list[dict[str, Any]]:
        """Close a session's context if it is idle (the session waits); returns
        what its guard refused that no action recorded, for the caller to."""
        assert self._freed is not None
        async with self._freed:
            slot = self.slots.get(key)
            if slot is not None and not slot.in_use:
                await self._close(slot)
                self._freed.notify_all()
            return self.take_unrecorded(key)

    def take_unrecorded(self, key: str) -> list[dict[str, Any]]:
        return self.unrecorded.pop(key, [])

    def _lru_idle(self) -> Slot | None:
        idle = [s for s in self.slots.values() if not s.in_use]
        return min(idle, key=lambda s: s.last_used) if idle else None

    async def _close_idle(self) -> None:
        limit = time.monotonic() - settings.AGENTDESK_BROWSER_IDLE_S
        for slot in [s for s in self.slots.values() if not s.in_use and s.last_used < limit]:
            await self._close(slot)

    async def _close(self, slot: Slot) -> None:
        self.slots.pop(slot.key, None)
        left = slot.guard.take_refused() + slot.guard.take_between()
        if left:  # kept for the session's next action or close here
            self.unrecorded.setdefault(slot.key, []).extend(left)
            while len(self.unrecorded) > MAX_UNRECORDED_KEYS:
                self.unrecorded.pop(next(iter(self.unrecorded)))
        if slot.context is not None:
            try:
                await slot.context.close()
            except Exception:  # the browser went away: nothing left to close
                log.debug("closing the context of %s failed", slot.key, exc_info=True)

    async def _open(self, slot: Slot, restore: dict[str, Any] | None) -> None:
        if self._browser is None or not self._browser.is_connected():
            log.warning("chromium is gone; starting it again")
            self.slots = {k: s for k, s in self.slots.items() if s is slot}
            await self._launch()
        storage = (restore or {}).get("storage") or None
        slot.context = await self._browser.new_context(
            storage_state=storage,
            accept_downloads=False,
            service_workers="block",
            viewport=VIEWPORT,
            java_script_enabled=True,
        )
        await slot.guard.install(slot.context)
        slot.page = await slot.context.new_page()
        slot.guard.main_page = slot.page
        slot.page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.dismiss()))

    def stop(self, timeout: float = 30) -> None:
        """Close Chromium and Playwright's driver, then the loop (tests, benches:
        a worker's browser goes with its process)."""

        async def down() -> None:
            for slot in list(self.slots.values()):
                await self._close(slot)
            if self._browser is not None:
                await self._browser.close()
            await self._playwright.stop()

        try:
            self.run(down, timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)

    def stats(self) -> dict[str, int]:
        return {"open": len(self.slots), "in_use": sum(s.in_use for s in self.slots.values())}


_host: PerProcess[Host] = PerProcess(Host)


def host() -> Host:
    return _host.get()


def started() -> Host | None:
    return _host.current()
