"""Agents: the agent domain and the runtime; the bottom layer, which imports
no other app of ours (tests/test_import_contracts.py holds it to that).

- runtime/: the step engine (claim, act, record), which imports only agents'
  core; features and the other apps plug in through runtime/hooks.py (the
  gate, approval rows, profiles, a call handed elsewhere, turn ended...).
- The core: models, the one writer of each status (transitions.py), events
  and their publishing, the tool protocol (tools/), the gate's vocabulary
  (gate.py: Action, Verdict, NeedsApproval), the model client (llm/),
  budgets, observability.
- Its own interfaces and features, built on the core: services.py (writes
  from people and inbound channels), selectors.py (reads), stream.py (the
  live-event pipeline of the desk and the SSE stream), tasks, features/
  (follow-ups, jobs, retention, forks).
"""
