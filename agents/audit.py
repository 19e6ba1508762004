"""The audit trail: proving a session's history complete and untouched, and
recording refused attempts.

Every event row carries `hash` = sha256(previous event's hash || the row's
canonical text), computed by the database on insert (migration 0014:
agentdesk_event_canonical, agentdesk_event_chain), and event rows refuse
UPDATE and DELETE except retention's pruning. Retention archives what it
prunes with each event's hash and canonical text (agents/features/retention.py).

session_verify() walks a session's chain from seq 1: archived events first
(from the archive's own copies), then the live rows, recomputing each hash in
Python from the canonical text the database gives for the row. It names the
first seq that is missing or whose hash does not match its content, and
checks the chain reaches the session's last_seq (a deleted tail shows).
A superuser who disables the triggers can still change a row, but not
without the chain saying where; one who rewrites the hashes of a whole tail
is caught by comparing the head hash (printed by `audit verify`) with a copy
kept elsewhere.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.db import connection

from agents.features.retention import archive_read
from agents.models import AuditEntry, SessionArchive, SessionRuntime


@dataclass(frozen=True)
class Verdict:
    session_id: int
    ok: bool
    events: int  # checked, archived ones included
    archived: int
    head: str  # hex hash of the last event ("" when there is none)
    bad_seq: int | None = None
    reason: str = ""


class _Bad(Exception):
    def __init__(self, seq: int, reason: str) -> None:
        self.seq, self.reason = seq, reason


_LIVE = """
    SELECT e.seq, e.hash, agentdesk_event_canonical(e)
    FROM agents_event e WHERE e.session_id = %s ORDER BY e.seq
"""


def _link(prev: bytes, canonical: str) -> bytes:
    return hashlib.sha256(prev + canonical.encode()).digest()


def _archived(session_id: int, state: dict[str, Any]) -> None:
    for archive in SessionArchive.objects.filter(session_id=session_id).order_by("upto_seq", "id"):
        for event in archive_read(archive)["events"]:
            seq = event["seq"]
            if seq != state["next"]:
                raise _Bad(state["next"], f"missing from the archive (it has seq {seq} next)")
            canonical = event.get("canonical")
            if canonical is None or event.get("hash") is None:
                raise _Bad(seq, "archived without its hash (before the chain existed)")
            fields = json.loads(canonical)
            if [fields[1], fields[2], fields[3], fields[4], fields[5]] != [
                seq,
                event["turn_id"],
                event["kind"],
                event["data"],
                event["actor"],
            ]:
                raise _Bad(seq, "the archived row differs from the text its hash covers")
            digest = _link(state["prev"], canonical)
            if digest.hex() != event["hash"]:
                raise _Bad(seq, "altered in the archive: its hash does not match its content")
            state["prev"], state["next"] = digest, seq + 1
            state["archived"] += 1
        if archive.last_hash is not None and bytes(archive.last_hash) != state["prev"]:
            raise _Bad(archive.upto_seq, "the archive's last hash does not match its events")


def _live(session_id: int, state: dict[str, Any]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_LIVE, [session_id])
        while rows := cursor.fetchmany(2000):
            for seq, stored, canonical in rows:
                if seq != state["next"]:
                    raise _Bad(state["next"], f"missing (the next stored event is seq {seq})")
                if stored is None:
                    raise _Bad(seq, "has no hash: written with the chain trigger disabled")
                if _link(state["prev"], canonical) != bytes(stored):
                    raise _Bad(seq, "altered: its hash does not match its content")
                state["prev"], state["next"] = bytes(stored), seq + 1
                state["live"] += 1


def session_verify(*, session_id: int) -> Verdict:
    """Whether the session's events 1..last_seq are all there and unchanged."""
    last_seq = SessionRuntime.objects.values_list("last_seq", flat=True).get(pk=session_id)
    state: dict[str, Any] = {"prev": b"", "next": 1, "archived": 0, "live": 0}
    try:
        _archived(session_id, state)
        _live(session_id, state)
        if state["next"] - 1 != last_seq:
            raise _Bad(state["next"], f"missing: the session's last seq is {last_seq}")
    except _Bad as bad:
        return Verdict(
            session_id,
            False,
            state["archived"] + state["live"],
            state["archived"],
            state["prev"].hex(),
            bad.seq,
            bad.reason,
        )
    return Verdict(
        session_id, True, state["archived"] + state["live"], state["archived"], state["prev"].hex()
    )


def client_address(request: Any) -> str | None:
    return request.META.get("REMOTE_ADDR") or None if request is not None else None


def audit_record(
    *,
    kind: str,
    request: Any = None,
    actor: str = "",
    session_id: int | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    """An append-only row for a refused or security-relevant attempt."""
    user = getattr(request, "user", None)
    if not actor and user is not None and user.is_authenticated:
        actor = user.get_username()
    return AuditEntry.objects.create(
        kind=kind,
        actor=actor[:150],
        client_address=client_address(request),
        method=(request.method or "")[:10] if request is not None else "",
        path=request.path[:300] if request is not None else "",
        session_id=session_id,
        detail=detail or {},
    )
