"""`python bench/mcp_calls.py [--calls N] [--fresh-calls M] [--gap S]`: the cost
of one MCP tools/call through capabilities/mcp.py::call, as the tool
step pays it (wall clock, ms per call, median and p95).

The server is the capability tests' own (tests/capabilities/mcp_server.py,
the SDK's server side), over stdio and over streamable HTTP (a subprocess
on a free port). Servers log to stderr: run it with 2>/dev/null. For each
transport, two ways of calling:

- fresh: a session per call (`"persistent": false`, how every call went
  before mcp_sessions.py): over stdio, a server process start per call;
- kept: the process keeps one session per server (the default); the first
  call, which opens it, is left out of the figures and printed apart.

The `search` tool is read-only and answers at once, so the figures are the
transport and the SDK, not the tool. --gap S waits S seconds between kept
calls: past the server's idle_probe_s (2 s) each call is preceded by a ping.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from capabilities.mcp import ServerConfig, call  # noqa: E402

SERVER = ROOT / "tests" / "capabilities" / "mcp_server.py"


def measure(config: ServerConfig, n: int, gap: float = 0.0) -> list[float]:
    times = []
    for i in range(n):
        if gap and i:
            time.sleep(gap)
        started = time.perf_counter()
        result = call(config, "search", {"query": f"q{i}"}, meta={}, timeout_s=30)
        times.append((time.perf_counter() - started) * 1000)
        assert not result.is_error, result
    return times


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered):8.2f} ms   p95 {p95:8.2f} ms   (n={len(times)})"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"the MCP server did not listen on {port} within {timeout:g}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="kept-session calls")
    parser.add_argument("--fresh-calls", type=int, default=20, help="fresh-session calls")
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between kept calls")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mcp-bench-"))
    port = free_port()
    base = [sys.executable, str(SERVER), "--effects", str(work / "effects.jsonl")]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    http = subprocess.Popen([*base, "--http", str(port)], **quiet)
    try:
        wait_listening(port)
        configs = {
            "stdio": ServerConfig(name="bstdio", transport="stdio", command=tuple(base)),
            "http": ServerConfig(
                name="bhttp", transport="http", url=f"http://127.0.0.1:{port}/mcp"
            ),
        }
        print(f"MCP tools/call, ms per call (load average {os.getloadavg()[0]:.1f})")
        for transport, config in configs.items():
            fresh = dataclasses.replace(config, persistent=False)
            fresh_times = measure(fresh, args.fresh_calls)
            print(f"{transport:5} {'fresh session per call':26} {summary(fresh_times)}")
            first = measure(config, 1)[0]
            kept = measure(config, args.calls, args.gap)
            label = f"kept session, {args.gap:g} s apart" if args.gap else "kept session"
            print(f"{transport:5} {label:26} {summary(kept)}")
            print(f"{transport:5} (opening the kept session: {first:.1f} ms)")
    finally:
        http.terminate()
        http.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
