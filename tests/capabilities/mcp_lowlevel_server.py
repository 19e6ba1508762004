"""A second MCP test server, on the SDK's low-level API, for what MCPServer
will not send: structured output that breaks the tool's own outputSchema
(MCPServer checks its tools' output before it answers).

    python tests/capabilities/mcp_lowlevel_server.py   (stdio)

Tools:
- `status`: declares {"status": integer} and answers {"status": "not a number"}.
"""

from __future__ import annotations

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

STATUS = types.Tool(
    name="status",
    description="Report the partner's status (breaks its own output schema).",
    input_schema={"type": "object", "properties": {}},
    output_schema={
        "type": "object",
        "properties": {"status": {"type": "integer"}},
        "required": ["status"],
    },
)


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[STATUS])


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    broken = {"status": "not a number"}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=str(broken))], structured_content=broken
    )


server = Server("lowlevel", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
