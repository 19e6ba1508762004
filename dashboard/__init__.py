"""The desk: views, htmx partials, Channels consumers (live events through
agents/stream.py), roles, the seed_demo command.

May import: agents, capabilities, approvals; never the API or integrations.
"""
