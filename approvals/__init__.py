"""Approvals: the one gate and what it decides.

gate.py::gate_decide answers whether an action (a tool call, a program's
host call, a browser submit, an external agent's request) may run now, must
wait for a person, or is refused: every rule is there. The runtime asks it
through agents/runtime/hooks.py::gate and writes the approval rows through
rows.py (hooks.approval_rows), so this app owns the approval objects, who
may decide them (terms.py), the decisions and votes (services.py), expiry
and escalation, and every read of them (selectors.py).

May import: agents and capabilities (profiles, tool policies); never the
API, the desk or integrations.
"""
