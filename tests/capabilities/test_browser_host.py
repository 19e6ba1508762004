"""The browser's host (capabilities/browser/host.py) on a real Chromium: what
an open context costs the worker, and that contexts stay apart.

No workers here: the host runs in the test's process, as in a worker's."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time

import psutil
import pytest

from capabilities.browser import host as hosting
from capabilities.browser import page as pages
from capabilities.browser.config import BrowserConfig
from tests.processes import wait_for

pytestmark = pytest.mark.slow


class _Site:
    """A loopback page that sets a cookie named for its path."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                name = self.path.strip("/") or "root"
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("set-cookie", f"{name}=1; Path=/")
                self.end_headers()
                self.wfile.write(b"<!doctype html><title>Claim</title><form><input name=a></form>")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def _renderers(browser_procs: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for proc in browser_procs:
        try:
            if "--type=renderer" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.NoSuchProcess:
            pass
    return found


def test_an_open_context_holds_one_renderer_process_and_its_own_cookies():
    """Chromium's new headless mode gave every page two hidden omnibox
    pop-ups, each a renderer process (75 MiB per context instead of 35):
    host.CHROMIUM_ARGS turns them off. A Chromium that adds another hidden
    page per window fails here, before the memory bound does."""
    site = _Site()
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    host = hosting.Host()
    try:
        config = BrowserConfig(allow=(site.url + "/",))

        async def open_one(key: str):
            slot = await host.lease(key, 0, None, config)
            await pages.go(slot.page, f"{site.url}/{key}", 20_000)
            storage = await slot.context.storage_state()
            await host.give_back(slot, version=1)
            return {c["name"] for c in storage["cookies"]}

        cookies = [host.run(lambda k=k: open_one(k), 60) for k in ("alice", "bob", "carol")]

        # Separate contexts keep cookies apart, whatever the process model.
        assert cookies == [{"alice"}, {"bob"}, {"carol"}]
        counted: list[int] = []

        def one_each() -> bool:
            ours = [p for p in me.children(recursive=True) if p.pid not in before]
            counted.append(len(_renderers(ours)))
            return counted[-1] == 3

        try:  # a page's first renderer may take a moment to exit
            wait_for(one_each, timeout=15, what="one renderer per open context")
        except AssertionError:
            raise AssertionError(f"3 open contexts, {counted[-1]} renderer processes") from None
    finally:
        host.stop()
        site.close()


def test_at_the_bound_a_session_waits_for_a_context_and_is_told_busy_not_crashed(settings):
    settings.AGENTDESK_BROWSER_MAX_CONTEXTS = 1
    settings.AGENTDESK_BROWSER_CONTEXT_WAIT_S = 1.0
    site = _Site()
    host = hosting.Host()
    try:
        config = BrowserConfig(allow=(site.url + "/",))
        alice = host.run(lambda: host.lease("alice", 0, None, config), 30)
        started = time.monotonic()
        with pytest.raises(hosting.Busy, match="all 1 browser contexts"):
            host.run(lambda: host.lease("bob", 0, None, config), 30)
        assert time.monotonic() - started >= 1.0  # it waited first

        settings.AGENTDESK_BROWSER_CONTEXT_WAIT_S = 30.0
        waiting = asyncio.run_coroutine_threadsafe(host.lease("bob", 0, None, config), host.loop)
        assert not waiting.done()  # alice holds the only context
        host.run(lambda: host.give_back(alice, version=1), 30)
        bob = waiting.result(30)  # alice's context, idle now, was closed for bob's
        assert list(host.slots) == ["bob"] and bob.in_use
    finally:
        host.stop()
        site.close()
