"""A real MCP server for the capability tests, built with the SDK's server side.

    python tests/capabilities/mcp_server.py --effects FILE [--http PORT]

Tools:
- `search` (read-only): answers from a tiny knowledge base; when FILE.slow-search
  exists, it first waits that many seconds (a server too slow for its timeout).
- `create_ticket` (side-effecting): appends one line per *effect* to FILE.
  A call carrying an idempotency key in `_meta` (agentdesk.dev/idempotency-key)
  that was already seen returns the first result without a second effect,
  which is what lets the runtime reissue it after a worker died. When the
  file FILE.slow exists, the call waits that many seconds before acting, so
  a test can kill a worker while the call is in flight.
(Output that breaks its schema: mcp_lowlevel_server.py, as MCPServer checks
its own tools' output.)

Each start appends the server's pid to FILE.pids, so a test can count how
often a stdio server was started, and kill the one running.

Over stdio (the default) the server is the client's subprocess; with --http it
serves streamable HTTP on 127.0.0.1:PORT/mcp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

KEY = "agentdesk.dev/idempotency-key"

parser = argparse.ArgumentParser()
parser.add_argument("--effects", required=True)
parser.add_argument("--http", type=int, default=0)
options = parser.parse_args()
EFFECTS = Path(options.effects)
LOCK = asyncio.Lock()

server = MCPServer("testdocs")


def _effects() -> list[dict]:
    if not EFFECTS.exists():
        return []
    return [json.loads(line) for line in EFFECTS.read_text().splitlines() if line.strip()]


@server.tool(description="Search the help-centre articles.")
async def search(query: str) -> str:
    slow = Path(f"{EFFECTS}.slow-search")
    if slow.exists():
        await asyncio.sleep(float(slow.read_text() or "3"))
    return f"Article 'Refunds': refunds for {query} take 5-10 business days."


@server.tool(description="Open a ticket in the partner's tracker. Has a side effect.")
async def create_ticket(title: str, ctx: Context) -> dict:
    meta = ctx.request_context.meta or {}
    key = meta.get(KEY, "")
    with Path(f"{EFFECTS}.calls").open("a") as f:  # received (before any effect)
        f.write(json.dumps({"key": key}) + "\n")
    async with LOCK:  # one at a time: a reissue waits for the first and is deduplicated
        for effect in _effects():
            if key and effect["key"] == key:
                return effect["result"]
        slow = Path(f"{EFFECTS}.slow")
        if slow.exists():
            await asyncio.sleep(float(slow.read_text() or "3"))
        result = {"ticket": f"PT-{len(_effects()) + 1}", "title": title}
        with EFFECTS.open("a") as f:
            f.write(json.dumps({"key": key, "pid": os.getpid(), "result": result}) + "\n")
        return result


if __name__ == "__main__":
    with Path(f"{EFFECTS}.pids").open("a") as f:
        f.write(f"{os.getpid()}\n")
    if options.http:
        print(f"mcp test server on {options.http}", flush=True)
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        server.run()
