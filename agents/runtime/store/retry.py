"""A record that fails on a lost connection is tried again on a new one.

A record is one short statement (store/hot.py) carrying the fence it was
claimed with. When the database connection under it is lost (every backend
terminated, a failover, a blip on the network), the step's I/O is already
done: the model was paid, the tool call happened. Giving the step up would
do both again on the next claim, so the record is tried again on a fresh
connection, with backoff, for up to AGENTDESK_RECORD_RETRY_S, as long as the
fence still holds (the statement checks it: a superseded fence is LostClaim,
never a second write).

One case is ambiguous: the connection was lost after the server committed
but before it answered. Then the row at the record's transcript position is
already there, and writing again would be wrong: the record is given up
(`Recorded`) and the next claim carries on from the durable state. So
nothing is written again until the database has answered that question
(asked again while it cannot be reached).

The rarer writes of a step that cannot go on now (a model that is down, a
tool's provider that refused: store/control.py) are tried again the same
way (`retrying`); they write no transcript row, so each tells by itself
that its first commit landed, and then writes nothing more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections

from agents.backoff import backoff_s
from agents.models import Event
from agents.runtime.state import Claimed

log = logging.getLogger(__name__)
R = TypeVar("R")


class Recorded(Exception):
    """A lost answer to a record that did commit: nothing more to write here;
    the next claim reads what was recorded."""


def record_retrying(claimed: Claimed, record: Callable[[], R]) -> R:
    position = claimed.transcript_base + len(claimed.transcript)  # where this record goes
    return _retrying(claimed, "record", record, lambda: _written(claimed.session_id, position))


def retrying(claimed: Claimed, what: str, write: Callable[[], R]) -> R:
    """Another write of the claim's (`what` names it in the log) tried again
    the same way: a step backing off after its model or its tool's provider
    failed (store/control.py) must not be given up, and the step done again,
    for a connection blip. `write` checks the fence itself and must be safe
    to run twice: its first commit may have landed with the answer lost.
    (Or a read a paid step needs before its record: store.undone_actions.)"""
    return _retrying(claimed, what, write, None)


def _retrying(
    claimed: Claimed, what: str, write: Callable[[], R], written: Callable[[], bool] | None
) -> R:
    deadline = time.monotonic() + settings.AGENTDESK_RECORD_RETRY_S
    attempt = 0
    while True:
        try:
            return write()
        except (OperationalError, InterfaceError) as exc:
            attempt = _wait_to_write_again(claimed, what, exc, attempt, deadline, written)


def _wait_to_write_again(
    claimed: Claimed,
    what: str,
    exc: Exception,
    attempt: int,
    deadline: float,
    written: Callable[[], bool] | None,
) -> int:
    """Back off after a lost connection until the write may be tried again:
    when the database has said that the first one did not land. Until it
    answers that, nothing is written again: a commit whose answer was lost
    and then a second write would put the record on the transcript twice
    (seen: a tool_result twice, when the check could not reach the database
    and the next try could). Raises `exc` past the deadline, Recorded when
    the first write landed; returns the attempts made."""
    while True:
        attempt += 1
        _drop_connection()
        if time.monotonic() > deadline:
            log.warning("session %s: %s given up after %d tries", claimed.session_id, what, attempt)
            raise exc
        log.warning(
            "session %s: %s lost its connection (%s); trying again (%d)",
            claimed.session_id,
            what,
            str(exc).strip()[:200],
            attempt,
        )
        time.sleep(backoff_s(attempt, base=0.2, cap=2.0))
        if written is None:  # the write itself is safe to run twice
            return attempt
        try:
            if written():
                raise Recorded(f"session {claimed.session_id}: {what} committed") from exc
            return attempt
        except (OperationalError, InterfaceError):
            continue  # still away: ask again before writing again


def _written(session_id: int, position: int) -> bool:
    return Event.objects.filter(session_id=session_id, position=position).exists()


def _drop_connection() -> None:
    """Close this thread's broken connection: the next statement takes a new one."""
    db = connections[DEFAULT_DB_ALIAS]
    try:
        if db.in_atomic_block:
            return  # not ours to close (never so on the engine's record path)
        db.close()
    except Exception:  # closing a dead connection may raise: it is closed either way
        db.connection = None
