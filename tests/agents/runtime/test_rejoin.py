"""When this process has just taken its liveness lock again, another
process's free lock says little (runtime/ownership.rejoining): whatever took
ours (a database restart, every backend terminated) took every worker's,
and a live one takes its own back within a sweep interval. So for two sweep
intervals neither the sweeper nor a claim takes over a session whose owner's
lock is free; afterwards a dead owner's sessions are taken over as before.
Real Postgres (the liveness connection terminated by the server) and Redis."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from agents.models import SessionRuntime
from agents.runtime import ownership, store, sweeper, watchdog
from agents.services import message_post
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

GHOST = 987_654_321  # a liveness key nobody holds


@pytest.fixture(autouse=True)
def our_lock_let_go():
    """The liveness lock's connection would keep the test database busy."""
    yield
    ownership.release_liveness()


def _owned_by_a_ghost(broker, key: str) -> int:
    session_id = message_post(key=key, text="Where is my order?").session_id
    broker.flushdb()  # its trigger (and mark) long gone: only the sweeper sends one
    SessionRuntime.objects.filter(session_id=session_id).update(
        owner="ghost:1/1",
        owner_process=GHOST,
        fence=1,
        updated_at=timezone.now() - timedelta(minutes=1),  # past the grace
    )
    return session_id


def _another_connection() -> psycopg.Connection:
    """A connection of another process's, as far as this one's locks go."""
    s = connection.settings_dict
    return psycopg.connect(
        dbname=s["NAME"], user=s["USER"], host=s["HOST"], port=s["PORT"] or 5432, autocommit=True
    )


def _lose_and_retake_our_lock() -> None:
    _terminate_our_lock_unnoticed()
    ownership.check_liveness()  # the watchdog's look: lost, taken again (same key)
    assert ownership.rejoining()


def test_a_free_lock_is_not_taken_over_while_this_process_rejoins(broker, settings):
    settings.AGENTDESK_SWEEP_INTERVAL_S = 1.0  # a two-second moment
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    session_id = _owned_by_a_ghost(broker, "ticket:rejoin")
    _lose_and_retake_our_lock()

    assert sweeper.sweep() == []  # the ghost may be a live process re-taking its lock
    assert store.claim(session_id, ownership.me()) is None  # a trigger's claim leaves it too
    runtime = SessionRuntime.objects.get(session_id=session_id)
    assert (runtime.owner, runtime.fence) == ("ghost:1/1", 1)

    # The moment passes and the ghost has not come back: it is dead.
    wait_for(lambda: not ownership.rejoining(), timeout=10, what="the rejoin moment to pass")
    assert sweeper.sweep() == [session_id]
    claimed = store.claim(session_id, ownership.me())
    assert claimed is not None and claimed.fence == 2


def test_unowned_work_is_still_sent_while_this_process_rejoins(broker, settings):
    settings.AGENTDESK_SWEEP_INTERVAL_S = 1.0
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    waiting = message_post(key="ticket:rejoin-unowned", text="And mine?").session_id
    broker.flushdb()  # its trigger lost: the sweeper's backstop is what sends it
    SessionRuntime.objects.filter(session_id=waiting).update(
        updated_at=timezone.now() - timedelta(minutes=1)
    )
    _lose_and_retake_our_lock()
    assert sweeper.sweep() == [waiting]


def _terminate_our_lock_unnoticed() -> None:
    """The server lets go of our lock (a restart, every backend terminated)
    and this process has not looked yet: its watchdog looks once an interval."""
    ownership.me()
    assert not ownership.rejoining()
    pid = ownership._liveness.get()._conn.info.backend_pid
    with _another_connection() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        wait_for(
            lambda: (
                not other.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]
                ).fetchone()[0]
            ),
            timeout=10,
            what="our liveness backend to end",
        )


def test_a_claim_looks_at_our_own_lock_before_it_takes_a_session_over(broker, settings):
    """Our lock went with the ghost's, and we have not noticed: the claim
    finds out (and takes ours again) before it believes the ghost dead."""
    settings.AGENTDESK_SWEEP_INTERVAL_S = 1.0
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    session_id = _owned_by_a_ghost(broker, "ticket:rejoin-unnoticed")
    _terminate_our_lock_unnoticed()

    assert store.claim(session_id, ownership.me()) is None
    assert ownership.rejoining()  # the claim's look took our lock again
    runtime = SessionRuntime.objects.get(session_id=session_id)
    assert (runtime.owner, runtime.fence) == ("ghost:1/1", 1)


def test_a_claim_looks_at_our_own_lock_outside_its_transaction(broker, settings, monkeypatch):
    """The look can wait: on the liveness connection (a link gone silent),
    on the watchdog taking the lock again (connecting, ending our lost
    backend). Made inside the claim's transaction, it held the session's
    row lock idle in transaction meanwhile (6-10 s in chaos campaigns,
    every other claim of the session queued behind it). The claim rolls
    back, looks, and claims again."""
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    session_id = _owned_by_a_ghost(broker, "ticket:rejoin-look-outside")
    ownership.me()  # our lock taken, and held: not rejoining
    looks_in_a_transaction = []
    real_look = ownership.check_liveness

    def look():  # the real look, and where it was made from
        looks_in_a_transaction.append(connection.in_atomic_block)
        real_look()

    monkeypatch.setattr(ownership, "check_liveness", look)
    claimed = store.claim(session_id, ownership.me())

    assert looks_in_a_transaction == [False]
    assert claimed is not None and claimed.recovered and claimed.fence == 2  # the ghost is dead


def test_a_sweep_looks_at_our_own_lock_before_it_takes_a_session_over(broker, settings):
    settings.AGENTDESK_SWEEP_INTERVAL_S = 1.0
    settings.AGENTDESK_SWEEP_GRACE_S = 0
    _owned_by_a_ghost(broker, "ticket:rejoin-unnoticed-sweep")
    _terminate_our_lock_unnoticed()

    assert sweeper.sweep() == []
    assert ownership.rejoining()


def test_a_lock_not_taken_again_at_once_is_taken_at_the_next_look():
    """Lost while the database was away, taking it again failed: the next
    look of the watchdog takes it (it used to wait for a slot's claim)."""
    key = ownership.me().process
    made = ownership._liveness.get()
    made.close()  # as a failed re-take leaves it: no connection, the key remembered
    ownership.check_liveness()
    assert made._conn is not None and ownership.me().process == key
    assert ownership.rejoining()

    ownership.release_liveness()  # a clean exit is for good
    ownership.check_liveness()
    assert made._conn is None


def test_the_look_at_our_own_lock_does_not_wait_behind_a_sweep(broker, settings):
    """A sweep can wait seconds for a pooled connection (a thousand slots on
    a few of them) or on a cut link. The look at this process's own lock
    runs on a thread of its own: a lost lock is taken again within a sweep
    interval while the sweeper waits. (When the look came first in the
    sweeper's loop, a worker took its lock again 20 s after a crash, and
    every other process took its sessions over meanwhile.)"""
    settings.AGENTDESK_SWEEP_INTERVAL_S = 0.2
    every = connection.pool.max_size
    connection.close()
    release, held = threading.Event(), []

    def hold_one():  # one of the pool's connections, until released
        connection.ensure_connection()
        held.append(1)
        release.wait(60)
        connection.close()

    holders = [threading.Thread(target=hold_one) for _ in range(every)]
    for holder in holders:
        holder.start()
    wait_for(lambda: len(held) == every, timeout=30, what="the pool's connections all held")
    watchdog.start()
    try:
        waiting = lambda: connection.pool.get_stats().get("requests_waiting", 0)  # noqa: E731
        wait_for(waiting, timeout=10, what="the sweeper waiting for a connection")
        _terminate_our_lock_unnoticed()
        wait_for(ownership.rejoining, timeout=5, what="our lock taken again")
    finally:
        release.set()
        for holder in holders:
            holder.join(30)
        watchdog.stop()


def test_our_key_held_by_our_own_lost_connection_is_taken_again():
    """A cut link: this process gave up on its liveness connection, and the
    server has not noticed yet, so that connection's backend still holds
    the lock. The backend is ours: it is ended, and the same key taken
    again. (A new key made every session of this process a dead owner's.)"""
    key = ownership.me().process
    made = ownership._liveness.get()
    lost = made._conn  # kept open: the server's side of it lives on
    lost_backend = lost.info.backend_pid
    made._conn = None  # as check() leaves it after giving up on the connection
    try:
        ownership.check_liveness()
        assert ownership.me().process == key
        assert made._conn.info.backend_pid != lost_backend
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [lost_backend])
            assert cursor.fetchone()[0] == 0
    finally:
        lost.close()


def test_our_key_taken_by_another_process_is_left_to_it():
    key = ownership.me().process
    made = ownership._liveness.get()
    made.close()  # ours let go...
    with _another_connection() as other:  # ...and drawn by another process
        other.execute("SELECT pg_advisory_lock(%s, %s)", [ownership.LOCK_CLASS, key])
        ownership.check_liveness()
        assert ownership.me().process != key
        assert other.execute("SELECT 1").fetchone() == (1,)  # not ended
