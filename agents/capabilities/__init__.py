"""The capability runtime: everything an agent can do, behind one boundary.

Providers turn configuration into `Tool` objects the engine runs the same
way whatever is behind them (agents/tools/base.py):

- builtin (agents/tools/): the helpdesk and payment connectors in code;
- mcp.py: the tools of MCP servers, over stdio or streamable HTTP;
- subagents.py: `subagent.<profile>`, which delegates a sub-task to a child
  session and parks the parent's call until the child answers.

profiles.py resolves a profile name to the tools it may use and the policy
for each (least privilege); names.py maps the names people read
(`docs.search`) to the names the Messages API accepts (`docs__search`).
"""
