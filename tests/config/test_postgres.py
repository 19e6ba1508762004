"""The pool, as a busy process meets it (config/postgres/base.py): a
connection given back a moment ago (by the engine, a request, anyone
closing Django's connection) waits on the pool's shelf and is handed out
again without the pool's ping or bookkeeping, to its own thread first,
else to any thread; one that sat longer goes back to the pool, which pings
it and replaces a dead one; the process never holds more connections than
the pool's size; a forked child never touches its parent's."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from django.db import connection, connections
from psycopg_pool import ConnectionPool, PoolTimeout

from bench.chaos.proxy import Proxy
from config.postgres import base as backend
from tests.agents.helpers import at_once
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_pool(transactional_db):
    """These tests kill pooled connections on purpose: the next test file on
    this pytest worker gets a pool with none of them (torn down before the
    database flush, which then borrows from a new pool). And each starts on
    a new pool: other tests' threads leave connections on the old one's shelf."""
    connection.close()
    connection.close_pool()
    yield
    connection.close()
    connection.close_pool()


def _kill(pid: int) -> None:
    with psycopg.connect(**_params(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


def _params() -> dict:
    s = connection.settings_dict
    params = {"dbname": s["NAME"], "user": s["USER"], "host": s["HOST"]}
    if s.get("PORT"):
        params["port"] = s["PORT"]
    return params


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _shelf() -> backend.Shelf:
    return backend.shelf_of(connection.pool)


def _in_other_thread(work):
    """What `work` returned on a thread of its own (which gives its
    connection back before it ends, as a request thread does)."""
    out = []

    def run():
        try:
            out.append(work())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return out[0]


def test_a_connection_given_back_is_handed_to_the_next_borrow_without_the_pool():
    pid = _backend_pid()
    ready = len(connection.pool._pool)
    connection.close()  # a step waits on the network, or a request ends
    assert [c.info.backend_pid for c, _ in _shelf().kept.values()] == [pid]
    assert len(connection.pool._pool) == ready  # not back in the pool
    requests_before = connection.pool.get_stats()["requests_num"]
    assert _backend_pid() == pid  # the same connection, taken from the shelf
    assert connection.pool.get_stats()["requests_num"] == requests_before  # no getconn
    assert not _shelf().kept


def test_another_thread_takes_a_shelved_connection_and_none_is_made_past_the_pool():
    pid = _backend_pid()
    connection.close()
    # A thread with none of its own takes the shelved one: a slot whose
    # connection waits on the shelf never makes another slot wait.
    assert _in_other_thread(_backend_pid) == pid
    pids = set()
    barrier = threading.Barrier(4)

    def hold():
        pids.add(_backend_pid())
        barrier.wait(10)  # all four hold one at once
        return True

    threads = [threading.Thread(target=_in_other_thread, args=(hold,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(pids) == 4
    stats = connection.pool.get_stats()
    assert stats["pool_size"] <= connection.pool.max_size


def test_a_connection_that_sat_is_given_back_to_the_pool_pinged_and_a_dead_one_replaced(
    monkeypatch,
):
    first = _backend_pid()
    connection.close()  # onto the shelf
    _kill(first)
    # It sat a while: the borrow hands it to the pool, whose check pings it,
    # finds it dead and gives another.
    monkeypatch.setattr(backend, "FRESH_S", 0.0)
    assert _backend_pid() != first
    assert not _shelf().kept
    connection.close()
    _shelf().give_all_back()
    ready = connection.pool._pool  # psycopg_pool's deque: borrows take from the left
    for _ in range(len(ready)):
        if ready[0].info.backend_pid == first:
            break
        ready.rotate(1)  # the dead one is the next one out
    assert _backend_pid() != first  # the ping found it dead; the pool gave another
    assert first not in [c.info.backend_pid for c in ready if not c.closed]  # and dropped it


def test_a_connection_given_back_a_moment_ago_is_not_pinged():
    pid = _backend_pid()
    connection.close()
    ((raw, _),) = _shelf().kept.values()
    _kill(pid)
    backend.check_unless_fresh(raw)  # no round trip: it does not notice
    raw._agentdesk_given_back = time.monotonic() - backend.FRESH_S - 1
    with pytest.raises(psycopg.OperationalError):
        backend.check_unless_fresh(raw)  # idle a while: pinged, and found dead


def test_a_connection_given_back_mid_transaction_goes_to_the_pool_which_rolls_it_back():
    _backend_pid()
    raw = connection.connection
    raw.execute("BEGIN")  # left in a transaction (not through Django's atomic)
    connection.close()
    assert not _shelf().kept  # never shelved: the pool rolls it back
    assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_closing_the_pool_gives_the_shelved_connections_back_first():
    _backend_pid()
    connection.close()
    pool = connection.pool
    connection.close_pool()
    assert not backend.shelf_of(pool).kept
    assert pool.closed


def test_a_forked_child_never_uses_or_closes_its_parents_shelved_connections():
    pid = _backend_pid()
    connection.close()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: the shelf is empty, the parent's connection untouched
        try:
            os.write(write, b"empty" if not _shelf().kept else b"kept")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    assert os.read(read, 16) == b"empty" and status == 0
    os.close(read)
    assert _backend_pid() == pid  # still alive and shelved for us


def test_a_borrower_waiting_on_a_full_pool_gets_the_next_connection_given_back_at_once():
    """Every connection the pool may make is held; one more borrower waits.
    The first holder to give back hands it over (not to the shelf, where the
    waiter would not look before its timeout)."""
    size = connection.pool.max_size
    held, release = threading.Barrier(size + 1), threading.Event()

    def hold():
        _backend_pid()
        held.wait(10)
        release.wait(30)

    holders = [threading.Thread(target=_in_other_thread, args=(hold,)) for _ in range(size)]
    for t in holders:
        t.start()
    held.wait(10)  # all connections out
    waited = []

    def borrow_and_time():
        started = time.monotonic()
        _backend_pid()
        waited.append(time.monotonic() - started)

    waiter = threading.Thread(target=_in_other_thread, args=(borrow_and_time,))
    waiter.start()
    deadline = time.monotonic() + 10
    while not connection.pool._waiting and time.monotonic() < deadline:
        time.sleep(0.005)  # until it queues in the pool
    assert connection.pool._waiting, "the extra borrower never waited"
    given_back = time.monotonic()
    release.set()
    waiter.join(30)
    for t in holders:
        t.join(30)
    assert waited and waited[0] > 0
    assert time.monotonic() - given_back < 5  # not the pool's 30 s timeout
    assert connection.pool.get_stats()["pool_size"] <= size


def test_many_more_borrowers_than_connections_all_get_theirs_in_turn(monkeypatch):
    """A worker's slots far outnumber its pool: each borrows for a short
    statement, again and again. None times out: the pool's queue serves
    them in turn (a shelf that kept connections from queued borrowers, or
    borrowers that left the queue to look at it, starved some for the
    pool's whole timeout: 1,000 slots on 4 connections)."""
    connection.close()
    connection.close_pool()  # a pool of two, with a short timeout, for this test
    options = {**connection.settings_dict["OPTIONS"]["pool"], "max_size": 2, "timeout": 10.0}
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "pool", options)
    threads, rounds = 200, 10

    def slot() -> list[float]:
        waits = []
        for _ in range(rounds):
            asked = time.monotonic()
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_sleep(0.002)")
            waits.append(time.monotonic() - asked)
            connection.close()  # given back, as before every network wait
        return waits

    waits = [wait for slot_waits in at_once(slot, threads, timeout=120) for wait in slot_waits]
    assert len(waits) == threads * rounds
    assert connection.pool.max_size == 2
    assert connection.pool.get_stats()["pool_size"] <= 2


@contextmanager
def _pool_behind_a_proxy(**options) -> Iterator[tuple[ConnectionPool, Proxy]]:
    """A psycopg pool of its own reaching the test database through a proxy
    of the test's own (bench/chaos/proxy.py), which cuts and heals; opened,
    and with the capped reconnection of Django's pools."""
    params = _params()
    proxy = Proxy((params.get("host") or "127.0.0.1", int(params.get("port") or 5432))).start()
    pool = ConnectionPool(
        kwargs={**params, "host": "127.0.0.1", "port": proxy.port}, open=False, **options
    )
    backend.reconnect_soon(pool)  # as on every pool Django makes here
    try:
        pool.open(wait=True)
        yield pool, proxy
    finally:
        pool.close()
        proxy.stop()


@pytest.mark.slow
def test_a_connection_lost_to_an_outage_is_made_again_within_seconds_of_its_end():
    """psycopg_pool tries a lost connection again 1, 2, 4, 8 ... s apart: its
    fifth try comes 15 s after the loss, 8 s after an outage of 7 s ended.
    Capped (backend.reconnect_soon, on every pool Django makes here), the
    next try is at most RECONNECT_EVERY_S away. The outage: the proxy
    refuses every connection."""
    assert "schedule_task" in connection.pool.__dict__  # Django's pool here is capped
    options = {"min_size": 1, "max_size": 1, "timeout": 0.5}
    with _pool_behind_a_proxy(check=ConnectionPool.check_connection, **options) as (pool, proxy):
        proxy.cut()
        with pytest.raises(PoolTimeout):  # the ping finds it dead; no new one can be made
            pool.getconn()
        # Four tries failed (uncapped: at about 0, 1, 3 and 7 s; the next at 15 s).
        wait_for(lambda: pool.get_stats()["connections_errors"] >= 4, timeout=20, what="4 tries")
        proxy.heal()
        healed = time.monotonic()
        with pool.connection(timeout=10) as conn:
            conn.execute("SELECT 1")
        took = time.monotonic() - healed
    print(f"a connection again {took:.2f}s after the outage ended")
    assert took < backend.RECONNECT_EVERY_S + 1.5


@pytest.mark.slow
def test_after_a_restart_a_borrow_does_not_find_the_broken_connections_one_by_one():
    """Every idle connection of a pool broke at once (the proxy resets them
    all, as a restart does) and the database is back. The first borrow
    finds one broken; the others are pinged and replaced at once, so it
    has a new connection at once, not after a pause per broken connection,
    each twice the last (0 + 1 + 2 + 4 s: 6.6 s measured without)."""
    options = {"min_size": 4, "max_size": 4, "timeout": 20}
    with _pool_behind_a_proxy(check=backend.check_unless_fresh, **options) as (pool, proxy):
        proxy.cut()
        proxy.heal()
        started = time.monotonic()
        with pool.connection() as conn:
            conn.execute("SELECT 1")
        took = time.monotonic() - started
    print(f"a working connection {took:.2f}s after the restart")
    assert took < 2.0
