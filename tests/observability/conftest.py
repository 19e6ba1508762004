"""Observability fixtures: a Prometheus multiprocess directory shared by the
workers and web started for a test, and a stand-in OTLP/HTTP collector."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.dashboard.conftest import browser, dave, web  # noqa: F401 (fixtures used here too)

TICKET = {
    "email": "bob.okafor@example.net",
    "subject": "Where is it",
    "body": "Where is order ORD-1003?",
    "order_id": "ORD-1003",
}
REFUND = {
    "email": "alice.martin@example.com",
    "subject": "Broken grinder",
    "body": "The grinder from order ORD-1002 arrived broken. Please refund it, $189.",
    "order_id": "ORD-1002",
}


@pytest.fixture
def metrics_dir(tmp_path: Path) -> Path:
    path = tmp_path / "prometheus"
    path.mkdir()
    return path


@pytest.fixture
def stack_env(stack_env: dict[str, str], metrics_dir: Path) -> dict[str, str]:
    """Every process this test starts counts into one multiprocess directory."""
    return {**stack_env, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}


class Collector:
    """A tiny OTLP/HTTP receiver: keeps every POST body sent to /v1/traces."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/v1/traces":
                    collector.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> list:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        found = []
        for body in list(self.bodies):
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    found.extend(scope.spans)
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def otlp_collector() -> Iterator[Collector]:
    collector = Collector()
    yield collector
    collector.close()
