"""Every commit the step engine makes.

- `claims`: becoming a session's owner (fencing token, recovery, loading the
  turn into memory), releasing, and whether a session is runnable;
- `hot`: the two statements of an agent step (`record_reply`,
  `record_tool_result`), one round trip and one commit each, guarded by the
  fence, no read-before-write;
- `control`: the control transitions, everything rarer (mark running / reissued / in doubt, park
  for a human, cancel, fail, back off), ORM inside `transaction.atomic()`;
- `evidence`: what a slot that lost its claim learned (a late outcome; a call never sent);
- `resume`: a parked turn whose calls were settled handed back to a worker;
- `lock`: the session lock they all take, and LostClaim;
- `retry`: a record (and the writes of a step that backs off) tried again on a lost connection;
- `pool`: giving the borrowed connection back before a network wait;
- `steps`: a running call's inner steps (begin, end, park on one).

The status writers are agents/transitions.py's, imported from there by
one name each (toolcall_move, turn_move, session_move).
"""

from agents.runtime.store.claims import (
    abandon,
    abandon_pending,
    claim,
    disown,
    is_runnable,
    release,
)
from agents.runtime.store.control import (
    cancel_open_calls,
    cancel_turn,
    fail_turn,
    finish_turn,
    mark_in_doubt,
    mark_reissued,
    mark_running,
    note_step_failure,
    park,
    retry_call_later,
    undone_actions,
)
from agents.runtime.store.evidence import never_sent_pending, note_late_outcome, note_never_sent
from agents.runtime.store.hot import record_reply, record_tool_result
from agents.runtime.store.lock import LostClaim, lock_session
from agents.runtime.store.resume import resume_if_unblocked
from agents.runtime.store.retry import Recorded, record_retrying

__all__ = [
    "LostClaim",
    "Recorded",
    "record_retrying",
    "abandon",
    "abandon_pending",
    "disown",
    "cancel_open_calls",
    "cancel_turn",
    "claim",
    "fail_turn",
    "finish_turn",
    "is_runnable",
    "lock_session",
    "mark_in_doubt",
    "mark_reissued",
    "mark_running",
    "note_late_outcome",
    "note_never_sent",
    "never_sent_pending",
    "note_step_failure",
    "resume_if_unblocked",
    "retry_call_later",
    "undone_actions",
    "park",
    "record_reply",
    "record_tool_result",
    "release",
]
