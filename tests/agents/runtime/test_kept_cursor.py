"""The hot statements' kept cursor (agents/runtime/store/hot.py): one per
open connection, a new one after the connection is replaced, and never in
the way of Django's query logging."""

from __future__ import annotations

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
