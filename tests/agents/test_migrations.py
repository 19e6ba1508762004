"""Migrations that move data: nothing is lost on the way, in either direction."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("agents", "0007_event_created_brin")]


def _migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target or executor.loader.graph.leaf_nodes())
    return executor.loader.project_state(target).apps if target else None


@pytest.mark.django_db(transaction=True)
def test_transcript_rows_move_into_the_event_log_and_back():
    old = _migrate(BEFORE)
    try:
        now = timezone.now()
        Session = old.get_model("agents", "Session")
        SessionRuntime = old.get_model("agents", "SessionRuntime")
        Turn = old.get_model("agents", "Turn")
        Event = old.get_model("agents", "Event")
        Message = old.get_model("agents", "Message")
        session = Session.objects.create(key="ticket:migrated", max_turn_steps=40)
        SessionRuntime.objects.create(session=session, last_seq=2, transcript_len=3)
        turn = Turn.objects.create(session=session, number=1, status="succeeded", input="hi")
        for seq, kind in ((1, "turn.accepted"), (2, "turn.succeeded")):
            Event.objects.create(
                session=session, seq=seq, turn_id=turn.id, kind=kind, data={}, created_at=now
            )
        rows = [
            ("user", [{"type": "text", "text": "Where is ORD-1002? <script>x</script>"}]),
            ("assistant", [{"type": "text", "text": "Looking."}]),
            ("user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "{}"}]),
        ]
        for position, (role, content) in enumerate(rows):
            Message.objects.create(
                session=session,
                position=position,
                turn_id=turn.id,
                role=role,
                content=content,
                created_at=now,
            )
    finally:
        _migrate(None)  # forward to the latest, whatever happened above

    from agents.models import Event as NewEvent
    from agents.models import Message as NewMessage
    from agents.models import SessionRuntime as NewRuntime

    moved = list(NewMessage.objects.filter(session_id=session.id).order_by("position"))
    assert [(m.role, m.content) for m in moved] == rows
    events = list(NewEvent.objects.filter(session_id=session.id).order_by("seq"))
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]  # gap-free, after the old ones
    assert [e.kind for e in events[2:]] == ["transcript.row"] * 3
    assert [e.position for e in events[2:]] == [0, 1, 2]
    assert NewRuntime.objects.get(pk=session.id).last_seq == 5

    # And back: the table is rebuilt from the events, row for row.
    try:
        old = _migrate(BEFORE)
        back = old.get_model("agents", "Message").objects.filter(session_id=session.id)
        assert [(m.role, m.content) for m in back.order_by("position")] == rows
    finally:
        _migrate(None)
