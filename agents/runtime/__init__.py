"""The step engine: claim, act, record (see ../shared/DESIGN.md, "The step protocol").

- ownership.py  who may advance a session (an advisory lock on the worker's
                own connection) and the fencing token that guards its writes
- store/        every statement the engine commits (claims, hot, transitions)
- engine.py     the loop: decide the next step from durable state, do its
                I/O outside any transaction, record it
- tooling.py    running one tool call and sorting its outcome
- events.py     publishing committed events to live viewers
- sweeper.py    re-enqueueing sessions that have work and no live owner
"""
