"""agents/tools/http.py prepares each request itself and reads the
environment once: a proxy set for the process still carries the calls,
NO_PROXY still bypasses it, and no cookie rides from one call to the next.
A real HTTP server on loopback stands in for the proxy and the provider."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.tools import http
from agents.tools.base import NotSent


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append({"target": self.path, "cookie": self.headers.get("Cookie")})
        body = json.dumps({"target": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Set-Cookie", "tracking=ticket-4812; Path=/")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Recorder.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def environment(monkeypatch) -> Iterator[pytest.MonkeyPatch]:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    http._environment.cache_clear()
    yield monkeypatch
    http._environment.cache_clear()


def test_a_proxy_in_the_environment_carries_the_call(server, environment):
    environment.setenv("http_proxy", server)
    body = http.call("GET", "http://helpdesk.invalid/orders/ORD-1002", timeout_s=5)
    # A proxy is sent the absolute URL: the call went through it.
    assert body == {"target": "http://helpdesk.invalid/orders/ORD-1002"}


def test_no_proxy_bypasses_it(server, environment):
    environment.setenv("http_proxy", server)
    environment.setenv("no_proxy", "helpdesk.invalid")
    with pytest.raises(NotSent):  # straight to a host that does not exist
        http.call("GET", "http://helpdesk.invalid/orders/ORD-1002", timeout_s=5)
    assert _Recorder.seen == []


def test_no_cookie_rides_from_one_call_to_the_next(server, environment):
    http.call("GET", f"{server}/customers/1", timeout_s=5)
    http.call("GET", f"{server}/customers/2", timeout_s=5)
    assert [seen["cookie"] for seen in _Recorder.seen] == [None, None]
    assert [seen["target"] for seen in _Recorder.seen] == ["/customers/1", "/customers/2"]


def test_a_refused_connection_or_an_unknown_name_was_never_sent(environment):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(NotSent):
        http.call("GET", f"http://127.0.0.1:{port}/orders/ORD-1002", timeout_s=5)
    with pytest.raises(NotSent):  # safe to send again, whatever the tool's kind
        http.call("POST", "http://helpdesk.invalid/tickets/1/replies", json={}, timeout_s=5)
