"""A strict Content-Security-Policy: no inline script, no foreign origins.

Ticket and model text is untrusted; escaping stops it becoming markup, and
this header stops anything that slipped through from running.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
    "object-src 'none'"
)


# What every response carries, pages and static files alike. Pages also get
# these from SecurityMiddleware / XFrameOptionsMiddleware; /static/ is served
# by Daphne through ASGIStaticFilesHandler, outside Django's middleware, so
# StaticSecurityHeaders (config/asgi.py) adds the same set there.
HEADERS = {
    "Content-Security-Policy": POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}


class StaticSecurityHeaders:
    """ASGI wrapper: add any of HEADERS a response lacks (static files)."""

    def __init__(self, application: Any) -> None:
        self.application = application
        self.extra = [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "http":
            return await self.application(scope, receive, send)

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                missing = [(k, v) for k, v in self.extra if k not in present]
                if missing:
                    message = {**message, "headers": [*message.get("headers", []), *missing]}
            await send(message)

        return await self.application(scope, receive, with_headers)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", POLICY)
        response.setdefault("X-Content-Type-Options", "nosniff")
        response.setdefault("Referrer-Policy", "same-origin")
        return response
