"""The WebSocket handshake's Origin must be the desk's own scheme, host and port."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from config.asgi import application
from dashboard.origin import origin_allowed
from tests.dashboard import factories
from tests.dashboard.conftest import ws_headers


def _scope(origin: str | None, host: str | None, scheme: str = "ws", **extra) -> dict:
    headers = [(k.encode(), v.encode()) for k, v in extra.items()]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if host is not None:
        headers.append((b"host", host.encode()))
    return {"type": "websocket", "scheme": scheme, "headers": headers}


@pytest.mark.parametrize(
    ("origin", "host", "scheme"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", "ws"),
        ("http://localhost:8000", "localhost:8000", "ws"),
        ("http://127.0.0.1", "127.0.0.1", "ws"),
        ("http://127.0.0.1:80", "127.0.0.1", "ws"),  # default port made explicit
        ("HTTP://LocalHost:8000", "localhost:8000", "ws"),
        ("https://localhost", "localhost", "wss"),
        ("https://localhost:443", "localhost:443", "wss"),
        ("http://[::1]:8000", "[::1]:8000", "ws"),
    ],
)
def test_the_desks_own_origin_is_accepted(origin, host, scheme):
    assert origin_allowed(_scope(origin, host, scheme))


@pytest.mark.parametrize(
    ("origin", "host", "scheme"),
    [
        ("http://127.0.0.1:9999", "127.0.0.1:8000", "ws"),  # another port of the same host
        ("http://localhost:8000", "127.0.0.1:8000", "ws"),  # another host name
        ("http://127.0.0.1", "127.0.0.1:8000", "ws"),  # port 80 is another port
        ("https://127.0.0.1:8000", "127.0.0.1:8000", "ws"),  # another scheme
        ("http://localhost", "localhost", "wss"),  # a plain-http page on a TLS desk
        ("https://localhost", "localhost", "ws"),
        ("http://evil.example:8000", "evil.example:8000", "ws"),  # host not allowed
        ("http://evil.example", "127.0.0.1", "ws"),
        ("null", "127.0.0.1", "ws"),  # sandboxed iframes, file:// pages
        ("file:///tmp/page.html", "127.0.0.1", "ws"),
        ("http://127.0.0.1:99999", "127.0.0.1:99999", "ws"),  # no such port
        ("http://127.0.0.1:8000/path", "127.0.0.1:8000", "ws"),
        (None, "127.0.0.1:8000", "ws"),  # no Origin at all
        ("http://127.0.0.1:8000", None, "ws"),  # no Host
    ],
)
def test_another_port_scheme_or_host_is_refused(origin, host, scheme):
    assert not origin_allowed(_scope(origin, host, scheme))


def test_a_trusted_origin_behind_a_proxy_is_accepted_exactly(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://desk.example.com", "https://*.corp.example"]
    assert origin_allowed(_scope("https://desk.example.com", "127.0.0.1:8000"))
    assert origin_allowed(_scope("https://a.corp.example", "127.0.0.1:8000"))
    assert not origin_allowed(_scope("https://desk.example.com:8443", "127.0.0.1:8000"))
    assert not origin_allowed(_scope("http://desk.example.com", "127.0.0.1:8000"))
    assert not origin_allowed(_scope("https://corp.example.evil", "127.0.0.1:8000"))


def test_tls_ended_at_a_proxy_counts_as_https_when_configured(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    forwarded = {"x-forwarded-proto": "https"}
    assert origin_allowed(_scope("https://localhost", "localhost", "ws", **forwarded))
    assert not origin_allowed(_scope("http://localhost", "localhost", "ws", **forwarded))


async def _connects(path: str, headers) -> bool:
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    await communicator.disconnect()
    return connected


@pytest.mark.django_db(transaction=True)
def test_the_asgi_app_refuses_a_handshake_from_another_port_or_scheme(bob):
    call = factories.parked_call()
    path = f"/ws/sessions/{call.session_id}/"
    desk = "127.0.0.1:8000"

    def tries(origin: str) -> bool:
        return async_to_sync(_connects)(path, ws_headers(bob, origin=origin, host=desk))

    assert tries("http://127.0.0.1:8000")
    assert not tries("http://127.0.0.1:9999")
    assert not tries("http://localhost:8000")
    assert not tries("https://127.0.0.1:8000")
    for route in ("/ws/desk/", "/ws/approvals/"):
        headers = ws_headers(bob, origin="http://127.0.0.1:9999", host=desk)
        assert not async_to_sync(_connects)(route, headers)
