"""The session lock every transition takes, and what losing it means."""

from __future__ import annotations

from agents.models import SessionRuntime


class LostClaim(Exception):
    """Another claim superseded ours: stop, write nothing more."""


def _locking():
    # FOR NO KEY UPDATE: the session lock. It serializes with the engine's
    # record statements and with every human action on this session, while
    # still letting inserts that reference the row (FK checks) through.
    return SessionRuntime.objects.select_for_update(no_key=True).select_related("session")


def lock_session(session_id: int, fence: int | None = None) -> SessionRuntime:
    runtime = _locking().get(pk=session_id)
    if fence is not None and runtime.fence != fence:
        raise LostClaim(f"session {session_id}: fence {fence} superseded by {runtime.fence}")
    return runtime
