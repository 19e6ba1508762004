"""Features that outlive a turn, built on the runtime's services and hooks:

- followups.py  a wake-up scheduled for a session (a reminder, "check back in
                two days"), fired by beat as a message, canceled by a reply;
- jobs.py       a batch of items worked through by a Celery task, one turn
                per item, resumable after a crash;
- retention.py  closed sessions archived (gzip JSON) and pruned;
- forks.py      a new session started from a point of an old one's history.

The runtime (agents/runtime/) imports none of these; they register on its
hooks (agents/runtime/hooks.py) when the app starts.
"""
