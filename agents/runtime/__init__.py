"""The step engine: claim, act, record (DESIGN.md, "The step protocol").

- engine.py     the loop: decide the next step from durable state, do its
                I/O outside any transaction, record it
- store/        every statement the engine commits (claims, the two hot-path
                statements, the control transitions, the session lock)
- ownership.py  who may advance a session (a liveness lock on the worker
                process's own connection) and the fencing token
- state.py      the claimed session as the engine holds it in memory
- tooling.py    running one tool call and sorting its outcome
- cancel.py     cancels and deadlines during a model call
- memory.py     summarizing a long transcript into a memory snapshot
- live.py       streaming a reply's text to live viewers
- dispatch.py   enqueueing `advance` (by task name)
- sweeper.py    re-enqueueing sessions that have work and no live owner
- watchdog.py   the threads of every worker process that sweep, and that
                keep the process's liveness lock (taken again once lost)
- hooks.py      the plug points features register on (the runtime imports
                no feature: tests/test_import_contracts.py)
"""
