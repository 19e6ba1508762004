"""Least privilege for a browser context: only the profile's URLs are reached.

Every request a context makes (a navigation, a sub-resource, a form post, a
WebSocket) passes `Guard`; anything not under one of the profile's allowed
URL prefixes (scheme, host and port exactly, then a path prefix) is aborted
before it leaves, and recorded. The desk's own origin is refused even when
listed. Redirects are the subtle part: Chromium follows a redirect without
asking the route handler again, so allowed requests are fetched here with
redirects off, and a 3xx is checked hop by hop: a navigation is handed an
empty page that moves on to the (checked) target as a new navigation, which
comes through here again; a sub-resource's hops are followed and checked
here. Pop-ups are closed, downloads refused (the context accepts none),
service workers blocked (they would see requests this handler does not).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

from django.conf import settings
from django.utils import timezone

log = logging.getLogger(__name__)

MAX_HOPS = 5
MAX_REFUSALS_KEPT = 50
HOP_MARK = "agentdesk-hop"


@dataclass(frozen=True)
class Prefix:
    scheme: str
    host: str
    port: int
    path: str

    @classmethod
    def parse(cls, url: str) -> Prefix:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, (parts.hostname or "").lower(), port, parts.path or "/")

    def admits(self, url: str) -> bool:
        parts = urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return False
        return (
            parts.scheme == self.scheme
            and (parts.hostname or "").lower() == self.host
            and port == self.port
            and resolved_path(parts.path).startswith(self.path)
        )


def resolved_path(path: str) -> str:
    """The path as a browser's URL parser (and Playwright's fetch) resolves
    it: "/carrier/../_carrier" is "/_carrier", and so are "%2e%2e" and
    backslashes. A redirect's Location is checked as written and then
    fetched resolved, so an allowed prefix must be matched on the latter."""
    raw = re.sub(r"%2e", ".", (path or "/").replace("\\", "/"), flags=re.IGNORECASE)
    return urlsplit(urljoin("http://x/", raw)).path or "/"


def expand(url: str) -> str:
    """`${SANDBOX_URL}/carrier/` -> the setting's value (profiles name places
    by setting, so one profile serves every deployment)."""
    for name in ("SANDBOX_URL", "AGENTDESK_BASE_URL"):
        url = url.replace("${" + name + "}", str(getattr(settings, name)).rstrip("/"))
    return url


def allowed(url: str, prefixes: list[Prefix]) -> str | None:
    """None when `url` may be reached, else why not."""
    desk = Prefix.parse(settings.AGENTDESK_BASE_URL)
    if Prefix(desk.scheme, desk.host, desk.port, "/").admits(url):
        return "the desk's own origin"
    if not url.startswith(("http://", "https://", "ws://", "wss://")):
        return "scheme not allowed"
    if any(
        p.admits(url.replace("ws", "http", 1) if url.startswith("ws") else url) for p in prefixes
    ):
        return None
    return "not in the profile's allowed URLs"


@dataclass
class Guard:
    rules: Any  # capabilities.browser.config.BrowserConfig
    refused: list[dict[str, Any]] = field(default_factory=list)
    # Refused while no action of ours ran (a page's timer, a delayed script):
    # recorded as an event of their own, not as what the next action did.
    between: list[dict[str, Any]] = field(default_factory=list)
    acting: bool = False  # an action holds the context (host.py's lease)
    main_page: Any = None

    @property
    def prefixes(self) -> list[Prefix]:
        return [Prefix.parse(expand(u)) for u in self.rules.allow]

    def refuse(self, url: str, kind: str, why: str) -> None:
        log.info("browser refused %s %s: %s", kind, url[:300], why)
        entry = {"url": url[:500], "kind": kind, "reason": why}
        if not self.acting:  # recorded later: say when it happened
            entry["at"] = timezone.now().isoformat(timespec="seconds")
        into = self.refused if self.acting else self.between
        if len(into) < MAX_REFUSALS_KEPT:
            into.append(entry)

    def take_refused(self) -> list[dict[str, Any]]:
        taken, self.refused = self.refused, []
        return taken

    def take_between(self) -> list[dict[str, Any]]:
        taken, self.between = self.between, []
        return taken

    async def install(self, context: Any) -> None:
        await context.route("**/*", self._route)
        await context.route_web_socket("**/*", self._websocket)
        context.on("page", self._page)

    async def _page(self, page: Any) -> None:
        if page is self.main_page or self.main_page is None:
            return
        self.refuse(page.url or "about:blank", "popup", "pop-ups are not allowed")
        try:
            await page.close()
        except Exception:
            pass

    async def _websocket(self, ws: Any) -> None:
        why = allowed(ws.url, self.prefixes)
        if why is not None:
            self.refuse(ws.url, "websocket", why)
            await ws.close(code=1008, reason="refused")
            return
        ws.connect_to_server()

    async def _route(self, route: Any) -> None:
        request = route.request
        kind = "navigation" if request.is_navigation_request() else request.resource_type
        why = allowed(request.url, self.prefixes)
        if why is not None:
            self.refuse(request.url, kind, why)
            await route.abort("blockedbyclient")
            return
        try:
            response = await route.fetch(max_redirects=0)
        except Exception as exc:
            log.info("browser fetch of %s failed: %s", request.url[:300], exc)
            await route.abort("failed")
            return
        hops, target = 0, request.url
        while 300 <= response.status < 400 and (location := response.headers.get("location")):
            target = urljoin(target, location)
            why = allowed(target, self.prefixes)
            if why is not None:
                self.refuse(target, f"redirect ({kind})", why)
                await route.abort("blockedbyclient")
                return
            if request.is_navigation_request():
                await route.fulfill(status=200, headers=_hop_headers(response), body=_hop(target))
                return
            hops += 1
            if hops > MAX_HOPS:
                await route.abort("failed")
                return
            response = await route.fetch(url=target, method="GET", max_redirects=0)
        await route.fulfill(response=response)


def _hop(target: str) -> str:
    # A new navigation, not a redirect: it comes through the route handler.
    return (
        f"<!doctype html><meta name={HOP_MARK}>"
        f"<script>location.replace({json.dumps(target)})</script>"
    )


def _hop_headers(response: Any) -> dict[str, str]:
    headers = {"content-type": "text/html; charset=utf-8", "cache-control": "no-store"}
    cookies = [h["value"] for h in response.headers_array if h["name"].lower() == "set-cookie"]
    if cookies:
        headers["set-cookie"] = "\n".join(cookies)
    return headers
