"""Fixtures for the capability tests: real MCP servers (tests/capabilities/
mcp_server.py, the SDK's server side) over stdio and streamable HTTP, and
profiles that use them. Personas as elsewhere: alice (support), bob
(approver), carol (admin)."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.processes import Proc, wait_for

SERVER = Path(__file__).with_name("mcp_server.py")
LOWLEVEL_SERVER = Path(__file__).with_name("mcp_lowlevel_server.py")
# The side-effecting tool dedupes on our key (sent in _meta), so it is idempotent by key.
TOOLS = {
    "search": {"kind": "read_only"},
    "create_ticket": {"kind": "idempotent_by_key", "external_id": "ticket"},
}


class McpServers:
    """The configured servers and where their side effects are counted."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.config: dict[str, dict] = {}
        self.procs: list[Proc] = []

    def effects_file(self, name: str) -> Path:
        return self.run_dir / f"effects-{name}.jsonl"

    def effects(self, name: str) -> list[dict]:
        path = self.effects_file(name)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def received(self, name: str) -> int:
        path = Path(f"{self.effects_file(name)}.calls")
        return len(path.read_text().splitlines()) if path.exists() else 0

    def slow(self, name: str, seconds: float, tool: str = "create_ticket") -> None:
        suffix = ".slow" if tool == "create_ticket" else f".slow-{tool}"
        Path(f"{self.effects_file(name)}{suffix}").write_text(str(seconds))

    def pids(self, name: str) -> list[int]:
        """The pid of each start of the server, in order."""
        path = Path(f"{self.effects_file(name)}.pids")
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def _clean(self, name: str) -> None:
        for suffix in ("", ".calls", ".slow", ".slow-search", ".pids"):
            Path(f"{self.effects_file(name)}{suffix}").unlink(missing_ok=True)

    def stdio(self, name: str, **extra) -> None:
        self._clean(name)
        command = [sys.executable, str(SERVER), "--effects", str(self.effects_file(name))]
        self.config[name] = {"transport": "stdio", "command": command, "tools": TOOLS, **extra}

    def http(self, name: str, **extra) -> Proc:
        self._clean(name)
        port = free_port()
        args = [sys.executable, str(SERVER), "--effects", str(self.effects_file(name))]
        log = self.run_dir / f"{name}-{port}.log"
        proc = Proc(f"mcp-{name}", [*args, "--http", str(port)], dict(os.environ), log)
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}/mcp"
        wait_for(lambda: _listening(port), timeout=20, what=f"MCP server {name} on {port}")
        self.config[name] = {"transport": "http", "url": url, "tools": TOOLS, **extra}
        return proc

    def lowlevel(self, name: str, **extra) -> None:
        """The low-level server (mcp_lowlevel_server.py) over stdio."""
        command = [sys.executable, str(LOWLEVEL_SERVER)]
        self.config[name] = {"transport": "stdio", "command": command, **extra}

    def dead(self, name: str) -> None:
        """A server configured at an address where nothing listens."""
        self.config[name] = {
            "transport": "http",
            "url": f"http://127.0.0.1:{free_port()}/mcp",
            "tools": TOOLS,
            "timeout_s": 2,
        }

    def env(self) -> dict[str, str]:
        return {"AGENTDESK_MCP_SERVERS": json.dumps(self.config)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        requests.get(f"http://127.0.0.1:{port}/", timeout=1)
        return True
    except requests.ConnectionError:
        return False


@pytest.fixture
def mcp_servers(run_dir: Path, settings) -> Iterator[McpServers]:
    servers = McpServers(run_dir)
    yield servers
    for proc in servers.procs:
        proc.stop()


@pytest.fixture
def caps_workers(workers, mcp_servers, settings):
    """Start workers (and the test process) with the MCP servers configured."""

    def start(name: str = "w1", **env: str):
        settings.AGENTDESK_MCP_SERVERS = mcp_servers.config
        settings.AGENTDESK_CAPABILITY_CACHE_S = 0
        workers.env.update(mcp_servers.env(), AGENTDESK_CAPABILITY_CACHE_S="0.5")
        workers.env.setdefault("AGENTDESK_SUBAGENT_SWEEP_S", "0.5")
        return workers.start(name, **env)

    return start


def make_profile(name: str, *capabilities: str, **policies: dict):
    """A profile row with one enabled policy per capability (extra policy
    fields by capability, e.g. make_profile("p", "docs.x", **{"docs.x": {...}}))."""
    from capabilities.models import AgentProfile, ToolPolicy

    profile = AgentProfile.objects.create(name=name, system_prompt="You are a test agent.")
    for capability in capabilities:
        ToolPolicy.objects.create(
            profile=profile, capability=capability, **policies.get(capability, {})
        )
    from capabilities.profiles import forget

    forget()
    return profile


def start_session(key: str, profile: str, text: str):
    from agents import services

    session = services.session_get_or_create(key=key, profile=profile)
    services.message_post(key=key, text=text)
    return session
