"""The hot statements' kept cursor (agents/runtime/store/hot.py): one per
pooled connection (wrapped anew for the thread that borrows it), a new one
after the connection is replaced, and never in the way of Django's query
logging."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.runtime.store import hot


def test_one_cursor_is_kept_per_connection_and_replaced_with_it(transactional_db):
    first = hot._kept_cursor().cursor  # the psycopg cursor in Django's wrapper
    assert hot._kept_cursor().cursor is first

    raw = connection.connection
    raw.close()  # the connection broke...
    connection.close()  # ...and went back to the pool, which drops it
    second = hot._kept_cursor()
    assert connection.connection is not raw
    assert second.cursor is not first
    second.execute("SELECT 1")
    assert second.fetchone() == (1,)
    assert hot._kept_cursor().cursor is second.cursor


def test_the_cursor_stays_with_its_pooled_connection(transactional_db):
    """A step gives its connection back twice (store/pool.py); whichever
    pooled connection the next borrow gets, its own cursor comes with it."""
    from agents.runtime.store import pool

    kept = {}
    for _ in range(4):
        cursor = hot._kept_cursor()
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
        assert kept.setdefault(pid, cursor.cursor) is cursor.cursor
        assert cursor.cursor.connection is connection.connection
        pool.give_back()


def test_statements_are_logged_while_queries_are_captured(transactional_db):
    hot._kept_cursor()  # kept before the capture starts
    with CaptureQueriesContext(connection) as captured:
        cursor = hot._kept_cursor()
        cursor.execute("SELECT 2")
    assert [q["sql"] for q in captured.captured_queries] == ["SELECT 2"]


def test_a_statement_that_fails_on_the_kept_cursor_leaves_it_usable(transactional_db):
    """An error comes out as Django's error, and the next hot statement runs on
    the same kept cursor (autocommit: nothing to roll back)."""
    from django.db import DataError

    cursor = hot._kept_cursor()
    with pytest.raises(DataError):
        cursor.execute("SELECT 1 / %s", [0])

    again = hot._kept_cursor()
    assert again.cursor is cursor.cursor
    again.execute("SELECT 3")
    assert again.fetchone() == (3,)
