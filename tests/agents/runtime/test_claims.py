"""The claim that starts a turn: two plain statements, the same rows as the ORM.

Almost every claim starts the next queued turn, and store/claims.py does that
in two statements; every other claim goes through the general ORM path. Both
must leave the same rows behind, and the short one must see a turn committed
by whoever held the session lock while it waited.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from agents.models import Event, Session, SessionRuntime, Turn
from agents.runtime import store
from agents.runtime.ownership import Owner
from agents.runtime.store import claims
from tests.processes import wait_for

# A slot of no live process (key 0): these tests claim by hand.
OWNER = Owner(name="test-worker:1", process=0)


def _post(key: str, text: str) -> Session:
    """A session with one finished turn (a reply recorded by the hot path) and
    a second one queued: the claim then has a transcript to load."""
    from agents.services import message_post, session_get_or_create

    session = session_get_or_create(key=key)
    message_post(key=key, text="first message")
    first = store.claim(session.id, OWNER)
    store.record_reply(
        first,
        content=[{"type": "text", "text": "first answer"}],
        calls=[],
        approvals=[],
        event_list=[
            {"kind": "model.replied", "data": {"stop_reason": "end_turn"}},
            {"kind": "turn.succeeded", "data": {"number": 1}},
        ],
        in_tokens=10,
        out_tokens=5,
        finish=True,
    )
    message_post(key=key, text=text)
    return session


def _general_claim(session_id: int):
    with transaction.atomic():
        return claims._claim_general(session_id, OWNER, looked=True)


def _state(session: Session) -> dict:
    runtime = SessionRuntime.objects.get(pk=session.id)
    turn = Turn.objects.get(session=session, number=2)
    started = Event.objects.filter(session=session).order_by("-seq").first()
    return {
        "runtime": {
            f: getattr(runtime, f)
            for f in (
                "fence owner cancel_requested step_attempts turn_steps turn_input_tokens "
                "turn_output_tokens turn_cost_micros transcript_len last_seq wake_at "
                "input_tokens output_tokens"
            ).split()
        },
        "current_is_turn_2": runtime.current_turn_id == turn.id,
        "turn": (turn.status, turn.started_at is not None),
        "session": Session.objects.get(pk=session.id).status,
        "event": (
            started.seq,
            started.kind,
            started.data,
            started.actor,
            started.turn_id == turn.id,
            started.position,
            started.role,
            started.content,
        ),
    }


def _claimed(claimed) -> dict:
    skip = {"session_id", "key", "turn_id", "turn_started_at"}
    return {k: v for k, v in vars(claimed).items() if k not in skip}


@pytest.mark.django_db
def test_starting_a_turn_writes_what_the_general_claim_writes():
    short, general = _post("claims:short", "second"), _post("claims:general", "second")

    short_claim = store.claim(short.id, OWNER)
    general_claim = _general_claim(general.id)

    assert short_claim is not None and general_claim is not None
    assert _state(short) == _state(general)
    assert _claimed(short_claim) == _claimed(general_claim)
    assert short_claim.transcript == [
        {"role": "user", "content": [{"type": "text", "text": "first message"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "first answer"}]},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
    ]
    assert short_claim.turn_number == 2 and short_claim.total_tokens == 15


@pytest.mark.django_db
def test_with_no_queued_turn_the_claim_writes_nothing_of_a_turn():
    from agents.services import session_get_or_create

    session = session_get_or_create(key="claims:empty")
    assert store.claim(session.id, OWNER) is None
    runtime = SessionRuntime.objects.get(pk=session.id)
    assert (runtime.owner, runtime.current_turn_id, runtime.last_seq) == ("", None, 0)
    assert not Event.objects.filter(session=session).exists()


@pytest.mark.django_db(transaction=True)
def test_a_claim_waiting_on_the_lock_sees_the_turn_its_holder_committed():
    """The lock first, then the read of the queued turns: a claim blocked
    behind a message being posted must start that message's turn."""
    from agents.services import session_get_or_create

    session = session_get_or_create(key="claims:race")
    locked, release = threading.Event(), threading.Event()

    def post_while_holding_the_lock():
        try:
            with transaction.atomic():
                store.lock_session(session.id)
                locked.set()
                release.wait(10)
                Turn.objects.create(session_id=session.id, number=1, input="posted meanwhile")
                Session.objects.filter(pk=session.id).update(status=Session.Status.RUNNING)
        finally:
            connections.close_all()

    results = []

    def claim():
        try:
            results.append(store.claim(session.id, OWNER))
        finally:
            connections.close_all()

    poster = threading.Thread(target=post_while_holding_the_lock)
    poster.start()
    assert locked.wait(10)
    claimer = threading.Thread(target=claim)
    claimer.start()
    wait_for(lambda: _waiting_on_a_lock(), timeout=10, what="the claim to wait on the lock")
    release.set()
    poster.join(10)
    claimer.join(10)

    (claimed,) = results
    assert claimed is not None, "the claim missed the turn committed while it waited"
    assert claimed.turn_number == 1
    assert claimed.transcript[-1]["content"][0]["text"] == "posted meanwhile"
    assert Turn.objects.get(session=session).status == Turn.Status.RUNNING


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0
