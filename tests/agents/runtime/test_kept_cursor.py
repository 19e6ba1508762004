"""The hot statements' kept cursor (agents/runtime/store/hot.py): one per
open connection, a new one after the connection is replaced, and never in
the way of Django's query logging."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.runtime.store import hot


def test_one_cursor_is_kept_per_connection_and_replaced_with_it(transactional_db):
    first = hot._kept_cursor()
    assert hot._kept_cursor() is first

    connection.close()  # a worker closes its connection between tasks
    second = hot._kept_cursor()
    assert second is not first
    second.execute("SELECT 1")
    assert second.fetchone() == (1,)
    assert hot._kept_cursor() is second


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
    assert again is cursor
    again.execute("SELECT 3")
    assert again.fetchone() == (3,)
