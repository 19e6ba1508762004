"""An external agent's side of the MCP endpoint: the official `mcp` SDK's
client over streamable HTTP, with an API token."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def _call(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(10, read=180)
    )
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        results = []
        for name, arguments in calls:
            if name == "list_tools":
                listed = await client.list_tools()
                results.append(sorted(t.name for t in listed.tools))
                continue
            result = await client.call_tool(name, arguments, read_timeout_seconds=180)
            if result.is_error:
                results.append({"error": " ".join(getattr(c, "text", "") for c in result.content)})
            elif result.structured_content is not None:
                results.append(result.structured_content.get("result", result.structured_content))
            else:
                results.append(json.loads(result.content[0].text))
        return results


def call(url: str, token: str, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """Run the calls in one client session; their results (or {"error": ...})."""
    return asyncio.run(_call(url, token, list(calls)))
