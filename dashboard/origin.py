"""The WebSocket handshake's Origin must be the desk itself: scheme, host and port.

Channels' AllowedHostsOriginValidator compares only the Origin's host with
ALLOWED_HOSTS, so a page served from any other port of an allowed host
(`http://127.0.0.1:9999`, a developer's other app on `localhost:3000`) or
over the other scheme could open a socket with the approver's cookie and read
their live pushes. Browsers send cookies to every port of a host, so the port
is what separates those pages from ours.

An Origin is accepted when it is exactly the origin the handshake was made
to (the Host header, with the connection's scheme: ws -> http, wss -> https,
or https behind a proxy that sets SECURE_PROXY_SSL_HEADER), and that host is
in ALLOWED_HOSTS; or when it is listed in CSRF_TRUSTED_ORIGINS (a proxy that
rewrites Host), with the same `*.` subdomain wildcard Django's CSRF allows.
Default ports are made explicit on both sides (http://h == http://h:80).
Anything else, or a handshake without Origin or Host, is refused before the
consumer runs (the handshake gets 403).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]


def parse_origin(value: str) -> Origin | None:
    """(scheme, host, port) of an origin like `https://desk.example:8443`, or None."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin1")
    return None


def _scheme(scope: dict[str, Any]) -> str:
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        # Django's spelling, HTTP_X_FORWARDED_PROTO, is the header x-forwarded-proto.
        name = proxy[0].removeprefix("HTTP_").replace("_", "-").lower().encode()
        if _header(scope, name) == proxy[1]:
            return "https"
    return "https" if scope.get("scheme") == "wss" else "http"


def own_origin(scope: dict[str, Any]) -> Origin | None:
    """The origin the handshake was addressed to, when its host is allowed."""
    host = _header(scope, b"host")
    if not host:
        return None
    domain, port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    scheme = _scheme(scope)
    # urlsplit gives an IPv6 origin's host without brackets; Host keeps them.
    return scheme, domain.lower().strip("[]"), int(port) if port else DEFAULT_PORTS[scheme]


def _trusted(origin: Origin) -> bool:
    scheme, host, port = origin
    for entry in getattr(settings, "CSRF_TRUSTED_ORIGINS", []):
        wildcard = "://*." in entry
        trusted = parse_origin(entry.replace("://*.", "://", 1) if wildcard else entry)
        if trusted is None or trusted[0] != scheme or trusted[2] != port:
            continue
        if host == trusted[1] or (wildcard and host.endswith("." + trusted[1])):
            return True
    return False


def origin_allowed(scope: dict[str, Any]) -> bool:
    raw = _header(scope, b"origin")
    origin = parse_origin(raw) if raw else None
    if origin is None:
        return False
    return origin == own_origin(scope) or _trusted(origin)


class SameOriginValidator:
    """ASGI middleware for the websocket router: refuse a foreign origin."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
