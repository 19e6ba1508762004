"""The pool's health check (config/postgres/base.py): a connection given
back a moment ago (by the engine, a request, anyone closing Django's
connection) is handed out without the pool's ping; one that sat longer is
pinged, so a dead one is replaced before anyone uses it."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection

from config.postgres import base as backend

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_pool(transactional_db):
    """These tests kill pooled connections on purpose: the next test file on
    this pytest worker gets a pool with none of them (torn down before the
    database flush, which then borrows from a new pool)."""
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


def test_a_connection_that_sat_in_the_pool_is_pinged_and_a_dead_one_replaced(monkeypatch):
    monkeypatch.setattr(backend, "FRESH_S", 0.0)  # everything counts as idle a while
    first = _backend_pid()
    connection.close()  # back to the pool, as a request or a step ends
    _kill(first)
    ready = connection.pool._pool  # psycopg_pool's deque: borrows take from the left
    ready.rotate(1)  # the connection just given back (and killed) is the next one out
    assert ready[0].info.backend_pid == first
    assert _backend_pid() != first  # the ping found it dead; the pool gave another
    assert first not in [c.info.backend_pid for c in ready if not c.closed]  # and dropped it


def test_a_connection_given_back_a_moment_ago_is_not_pinged():
    pid = _backend_pid()
    connection.close()  # back to the pool, as a request or a step ends
    raw = connection.pool._pool[-1]  # the connection just returned (psycopg_pool's deque)
    assert raw.info.backend_pid == pid
    _kill(pid)
    backend.check_unless_fresh(raw)  # no round trip: it does not notice
    raw._agentdesk_given_back = time.monotonic() - backend.FRESH_S - 1
    with pytest.raises(psycopg.OperationalError):
        backend.check_unless_fresh(raw)  # idle a while: pinged, and found dead
