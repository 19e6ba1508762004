"""Capabilities: everything an agent can do, behind one boundary.

Providers turn configuration into `Tool` objects the engine runs the same
way whatever is behind them (agents/tools/base.py):

- builtin: the helpdesk and payment connectors in code (agents/tools/
  support.py), gathered into the code profiles of registry.py;
- mcp.py: the tools of MCP servers, over stdio or streamable HTTP
  (mcp_config.py reads their configuration, mcp_sessions.py keeps one
  session per server per worker process);
- subagents.py: `subagent.<profile>`, which delegates a sub-task to a child
  session and parks the parent's call until the child answers;
- browser/: durable browser sessions (Playwright on Chromium), its tools
  offered by a profile such as carrier_claims.

profiles.py resolves a profile name to the tools it may use and the policy
for each (least privilege: models.py's rows win over the code profile);
names.py maps the names people read (`docs.search`) to the names the
Messages API accepts (`docs__search`). The app plugs profiles and sub-agents
into the runtime's hooks at start (apps.py; agents/runtime/hooks.py).
"""
