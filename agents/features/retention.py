"""Retention: archive and delete the transcript and events of old closed sessions.

A session is closed when it is idle, failed or canceled, has no open turn
and no owner, and old when it was not updated for AGENTDESK_RETENTION_DAYS.
Its turns, tool calls and approvals stay (they are small, and they are the
audit of what the agent did); its events (agents_event), which carry its
transcript rows (the agents_message view), go, after being written as one gzip-compressed JSON
archive row (agents_sessionarchive), in the same transaction as the first
delete batch. The archive is in the database on purpose: it is transactional
with the delete (no orphan file, no lost rows), backed up with everything
else, and Postgres stores the already-compressed bytes as they are.

No long locks on live work: each batch (AGENTDESK_RETENTION_BATCH rows, 1,000
by default) is its own short transaction under the session lock taken with
SKIP LOCKED, re-checking that the session is still closed and old. A session
that woke up meanwhile is left alone (what was deleted is in the archive).

After pruning, the session's event seqs start after the archived range, and
its transcript (what a new turn's model call is built from) starts empty; a
new message on such a session therefore starts a fresh conversation.
"""

from __future__ import annotations

import gzip
import json
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from agents.models import Event, Message, Session, SessionArchive, SessionRuntime, Turn

log = logging.getLogger(__name__)
S = Session.Status
CLOSED = [S.IDLE, S.FAILED, S.CANCELED]
OPEN_TURN = [
    Turn.Status.ACCEPTED,
    Turn.Status.RUNNING,
    Turn.Status.WAITING,
    Turn.Status.WAITING_SUBAGENT,
    Turn.Status.RESUMING,
]


@dataclass
class PruneReport:
    sessions: int = 0
    messages: int = 0
    events: int = 0
    archived_bytes: int = 0
    skipped: list[int] = field(default_factory=list)  # woke up or busy meanwhile


def prunable_sessions(*, days: int, now=None) -> QuerySet[Session]:
    """Closed sessions not updated for `days` that still have rows to prune."""
    cutoff = (now or timezone.now()) - timedelta(days=days)
    has_rows = Exists(Event.objects.filter(session_id=OuterRef("pk")))
    return (
        Session.objects.filter(status__in=CLOSED, updated_at__lt=cutoff, runtime__owner="")
        .exclude(turns__status__in=OPEN_TURN)
        .filter(has_rows)
        .order_by("updated_at", "id")
    )


def sessions_prune(
    *,
    days: int | None = None,
    batch_size: int | None = None,
    dry_run: bool = False,
    limit: int = 10_000,
) -> PruneReport:
    """Prune every old closed session (at most `limit` per call)."""
    days = settings.AGENTDESK_RETENTION_DAYS if days is None else days
    batch_size = batch_size or settings.AGENTDESK_RETENTION_BATCH
    report = PruneReport()
    if days <= 0:
        return report
    ids = list(prunable_sessions(days=days).values_list("id", flat=True)[:limit])
    for session_id in ids:
        if dry_run:
            report.sessions += 1
            report.messages += Message.objects.filter(session_id=session_id).count()
            report.events += Event.objects.filter(session_id=session_id).count()
            continue
        if session_prune(session_id=session_id, days=days, batch_size=batch_size, report=report):
            report.sessions += 1
        else:
            report.skipped.append(session_id)
    if report.sessions and not dry_run:
        log.info(
            "retention pruned %d session(s): %d messages, %d events",
            report.sessions,
            report.messages,
            report.events,
        )
    return report


def session_prune(
    *, session_id: int, days: int, batch_size: int, report: PruneReport | None = None
) -> bool:
    """Archive then delete one session's transcript and events, in batches.
    False when the session is busy or no longer closed and old."""
    report = report if report is not None else PruneReport()
    upto: tuple[int, int] | None = None
    while True:
        with transaction.atomic():
            runtime = _lock_if_closed(session_id, days)
            if runtime is None:
                return upto is not None
            if upto is None:
                upto = (runtime.transcript_len, runtime.last_seq)
                if settings.AGENTDESK_RETENTION_ARCHIVE:
                    report.archived_bytes += _archive(runtime, *upto)
            # Rows newer than the archive (none while the session stays closed)
            # are never deleted: the bounds come from the archive.
            # Transcript rows are events (agents.models.Event): they go together.
            n_events, n_messages = _delete_batch(session_id, upto[1], batch_size)
        report.events += n_events
        report.messages += n_messages
        if n_events < batch_size:
            return True


def _lock_if_closed(session_id: int, days: int) -> SessionRuntime | None:
    # The session lock, without waiting: a session somebody is working on
    # right now is not one to prune.
    runtime = (
        SessionRuntime.objects.select_for_update(no_key=True, skip_locked=True)
        .select_related("session")
        .filter(pk=session_id)
        .first()
    )
    if runtime is None or runtime.owner:
        return None
    session = runtime.session
    cutoff = timezone.now() - timedelta(days=days)
    if session.status not in CLOSED or session.updated_at >= cutoff:
        return None
    if Turn.objects.filter(session_id=session_id, status__in=OPEN_TURN).exists():
        return None
    return runtime


def _archive(runtime: SessionRuntime, upto_position: int, upto_seq: int) -> int:
    sid = runtime.session_id
    messages = [
        {"position": p, "turn_id": t, "role": r, "content": c, "at": at.isoformat()}
        for p, t, r, c, at in Message.objects.filter(session_id=sid, position__lt=upto_position)
        .order_by("position")
        .values_list("position", "turn_id", "role", "content", "created_at")
    ]
    # Each event keeps its chain hash and the canonical text it was computed
    # from (the database's own, agentdesk_event_canonical), so `audit verify`
    # proves the archived history as it does the live one (agents/audit.py).
    events = [
        {
            "seq": s,
            "turn_id": t,
            "kind": k,
            "data": d,
            "actor": a,
            "at": at.isoformat(),
            "hash": bytes(h).hex() if h is not None else None,
            "canonical": c,
        }
        for s, t, k, d, a, at, h, c in Event.objects.filter(session_id=sid, seq__lte=upto_seq)
        .annotate(canonical=RawSQL("agentdesk_event_canonical(agents_event)", ()))
        .order_by("seq")
        .values_list("seq", "turn_id", "kind", "data", "actor", "created_at", "hash", "canonical")
    ]
    if not messages and not events:
        return 0
    body = {"session": runtime.session.key, "messages": messages, "events": events}
    raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    packed = gzip.compress(raw, compresslevel=6)
    SessionArchive.objects.create(
        session_id=sid,
        upto_position=upto_position,
        upto_seq=upto_seq,
        messages=len(messages),
        events=len(events),
        raw_bytes=len(raw),
        data=packed,
        last_hash=bytes.fromhex(events[-1]["hash"]) if events and events[-1]["hash"] else None,
    )
    return len(packed)


def _delete_batch(session_id: int, upto_seq: int, limit: int) -> tuple[int, int]:
    """Delete the session's oldest `limit` events up to `upto_seq`, found
    through the primary key (session_id, seq); one statement, one short
    transaction. Returns (events, of which transcript rows)."""
    sql = """
        WITH gone AS (
            DELETE FROM agents_event WHERE session_id = %s AND seq IN (
                SELECT seq FROM agents_event WHERE session_id = %s AND seq <= %s
                ORDER BY seq LIMIT %s)
            RETURNING position)
        SELECT count(*), count(position) FROM gone
    """
    with connection.cursor() as cursor:
        # The one way past the append-only trigger (migration 0014), for this
        # transaction only; the rows are in the archive, in this transaction.
        cursor.execute("SET LOCAL agentdesk.allow_prune = on")
        cursor.execute(sql, [session_id, session_id, upto_seq, limit])
        n_events, n_rows = cursor.fetchone()
    return n_events, n_rows


def archive_read(archive: SessionArchive) -> dict:
    """The archived rows back, as they were written."""
    return json.loads(gzip.decompress(bytes(archive.data)))
