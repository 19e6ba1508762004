"""Fixtures that run the real sandbox (`python -m sandbox`) on a free port.

Every test talks to it over real HTTP, with the real stripe and anthropic
SDKs where Agentdesk uses them. One sandbox serves the whole session and is
reset before each test; tests that need other CLI flags start their own.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anthropic
import pytest
import stripe

REPO_ROOT = Path(__file__).resolve().parents[2]
# The tests import `sandbox` (webhooks.sign, the generator's ticket specs);
# make the repo root importable however pytest was started.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
LISTENING_RE = re.compile(r"sandbox: listening on (http://\S+)")
TRIAGE_TOOLS = [
    "lookup_customer",
    "lookup_order",
    "classify_ticket",
    "issue_refund",
    "send_reply",
    "add_internal_note",
    "escalate_to_human",
]


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


class SandboxProcess:
    def __init__(self, workdir: Path, *args: str) -> None:
        self.workdir = workdir
        self.args = args
        self.log_path = workdir / "sandbox.log"
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SandboxProcess:
        command = [
            sys.executable,
            "-m",
            "sandbox",
            "--port",
            "0",
            "--data",
            str(self.workdir / "sandbox.sqlite"),
            *self.args,
        ]
        # Output goes to a file, not a pipe: a pipe nobody drains would block the server.
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT
            )
        match = wait_until(self._listening, timeout=20, what="the sandbox to listen")
        self.url = match.group(1)
        return self

    def _listening(self) -> re.Match[str] | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"sandbox exited early:\n{self.log()}")
        return LISTENING_RE.search(self.log())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 10,
    ) -> Reply:
        parts = urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            all_headers = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=payload, headers=all_headers)
            response = conn.getresponse()
            return Reply(
                response.status,
                {k.lower(): v for k, v in response.getheaders()},
                response.read().decode(),
            )
        finally:
            conn.close()

    def get(self, path: str, **kwargs: Any) -> Reply:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Reply:
        return self.request("POST", path, body if body is not None else {}, **kwargs)

    def stats(self) -> dict[str, Any]:
        return self.get("/_stats").json()

    def fault(self, **spec: Any) -> None:
        reply = self.post("/_faults", spec)
        assert reply.status == 201, reply.text

    def ticket(
        self, body: str, email: str = "alice.martin@example.com", subject: str = "Help"
    ) -> dict[str, Any]:
        reply = self.post(
            "/helpdesk/tickets", {"customer_email": email, "subject": subject, "body": body}
        )
        assert reply.status == 201, reply.text
        return reply.json()


@pytest.fixture
def wait() -> Callable[..., Any]:
    return wait_until


@pytest.fixture(scope="session")
def sandbox_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    server = SandboxProcess(tmp_path_factory.mktemp("sandbox"), "--seed-demo").start()
    yield server
    server.stop()


@pytest.fixture
def sandbox(sandbox_server: SandboxProcess) -> SandboxProcess:
    """The shared sandbox, wiped and reseeded, with no faults armed."""
    reply = sandbox_server.post("/_reset", {"seed_demo": True})
    assert reply.status == 200, reply.text
    return sandbox_server


@pytest.fixture
def start_sandbox(tmp_path: Path) -> Iterator[Callable[..., SandboxProcess]]:
    """Start an extra sandbox with its own flags (webhooks, generator)."""
    started: list[SandboxProcess] = []

    def start(*args: str) -> SandboxProcess:
        workdir = tmp_path / f"sandbox{len(started)}"
        workdir.mkdir()
        started.append(SandboxProcess(workdir, *args).start())
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def stripe_client(sandbox: SandboxProcess) -> stripe.StripeClient:
    # The SDK appends /v1/... to base_addresses["api"]; no retries so each
    # test sees exactly what the sandbox answered.
    return stripe.StripeClient(
        "sk_test_sandbox", base_addresses={"api": sandbox.url}, max_network_retries=0
    )


@pytest.fixture
def anthropic_client(sandbox: SandboxProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="sk-ant-sandbox", base_url=sandbox.url, max_retries=0, timeout=20
    )


@pytest.fixture
def triage_tools() -> list[dict[str, Any]]:
    return [
        {"name": name, "description": name, "input_schema": {"type": "object"}}
        for name in TRIAGE_TOOLS
    ]


@dataclass
class WebhookReceiver:
    url: str
    fail_first: int = 0
    calls: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    attempts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Keep-alive mode (HTTP/1.1, as a real receiver): connections seen, and
    # those it closed after IDLE_S without a request (a keep-alive timeout).
    connections: int = 0
    idle_closed: int = 0


@pytest.fixture
def webhook_receiver() -> Iterator[WebhookReceiver]:
    """A tiny HTTP server recording webhook POSTs; answers 500 to the first `fail_first`."""
    yield from _receiver(keep_alive=False)


@pytest.fixture
def keep_alive_receiver() -> Iterator[WebhookReceiver]:
    """The same over HTTP/1.1 keep-alive, closing a connection idle for 0.3 s."""
    yield from _receiver(keep_alive=True)


def _receiver(*, keep_alive: bool) -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"
        timeout = 0.3 if keep_alive else None

        def setup(self) -> None:
            super().setup()
            with receiver.lock:
                receiver.connections += 1

        def log_error(self, format: str, *args: Any) -> None:
            # http.server closes a connection idle past `timeout` and says so here.
            if format.startswith("Request timed out"):
                with receiver.lock:
                    receiver.idle_closed += 1

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with receiver.lock:
                receiver.attempts += 1
                failing = receiver.attempts <= receiver.fail_first
                if not failing:
                    receiver.calls.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(500 if failing else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    server.shutdown()
    server.server_close()
