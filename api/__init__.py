"""The machine API: every inbound interface for programs. REST under
/api/v1/ (django-ninja), tokens, idempotency keys, rate limits, the SSE event
stream (through agents/stream.py, the desk's pipeline too), the MCP endpoint
and external approvals (through the approvals gate), the helpdesk webhook
and the first messages API (inbound).

May import: agents, capabilities, approvals; never the desk (dashboard) or
integrations.
"""
