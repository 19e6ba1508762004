"""Retention: old closed sessions lose their transcript and events to a
compressed archive, in batches; live and recent sessions are untouched."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from agents.features.retention import archive_read, sessions_prune
from agents.models import Event, Message, Session, SessionArchive
from agents.selectors import session_storage
from tests.dashboard import factories

pytestmark = pytest.mark.django_db(transaction=True)


def _closed(days_ago: int, turns: int = 3, status: str = Session.Status.IDLE) -> Session:
    session = factories.session()
    for _ in range(turns):
        factories.turn(session)
    Session.objects.filter(pk=session.pk).update(
        status=status, updated_at=timezone.now() - timedelta(days=days_ago)
    )
    return session


def _rows(session: Session) -> tuple[int, int]:
    return (
        Message.objects.filter(session=session).count(),
        Event.objects.filter(session=session).count(),
    )


def _bytes(session: Session) -> int:
    return sum(
        size for part, _, size in session_storage(session_id=session.id) if part != "archives"
    )


def test_old_closed_sessions_are_archived_and_pruned_in_batches(broker):
    old_idle = _closed(40)
    old_failed = _closed(45, status=Session.Status.FAILED)
    recent = _closed(3)
    live = _closed(60)
    factories.parked_call(owner=live)  # an open turn, waiting on a human
    Session.objects.filter(pk=live.pk).update(updated_at=timezone.now() - timedelta(days=60))
    before = {s.id: (_rows(s), _bytes(s)) for s in (old_idle, old_failed, recent, live)}
    kept = list(
        Message.objects.filter(session=old_idle)
        .order_by("position")
        .values_list("content", flat=True)
    )

    report = sessions_prune(days=30, batch_size=5)  # 6 messages + 12 events: 4 batches each

    assert report.sessions == 2 and not report.skipped
    assert report.messages == 12 and report.events == 24
    for session in (old_idle, old_failed):
        assert _rows(session) == (0, 0)
        assert _bytes(session) < before[session.id][1]
        archive = SessionArchive.objects.get(session=session)
        assert (archive.messages, archive.events) == before[session.id][0]
        assert archive.raw_bytes > len(bytes(archive.data))  # compressed
    restored = archive_read(SessionArchive.objects.get(session=old_idle))
    assert [m["content"] for m in restored["messages"]] == kept
    assert [e["seq"] for e in restored["events"]] == list(range(1, 13))
    for session in (recent, live):
        assert (_rows(session), _bytes(session)) == before[session.id]
        assert not SessionArchive.objects.filter(session=session).exists()
    assert sessions_prune(days=30).sessions == 0  # nothing left to do


def test_prune_dry_run_counts_and_changes_nothing(broker, capsys):
    old = _closed(40)
    before = _rows(old)

    call_command("prune", "--dry-run", "--days", "30")

    out = capsys.readouterr().out
    assert "would prune 1 session(s)" in out and f"{before[0]} transcript rows" in out
    assert _rows(old) == before and not SessionArchive.objects.exists()

    call_command("prune", "--days", "30", "--batch-size", "1000")
    assert "pruned 1 session(s)" in capsys.readouterr().out
    assert _rows(old) == (0, 0)


def test_a_pruned_session_takes_new_messages(broker, alice):
    from agents.services import message_post

    old = _closed(40)
    sessions_prune(days=30)
    turn = message_post(key=old.key, text="Hello again", user=alice)
    assert turn.number == 4
    seqs = list(Event.objects.filter(session=old).values_list("seq", flat=True))
    assert seqs == [13]  # after the archived range, no reuse
