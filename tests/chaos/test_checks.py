"""The campaign's after-run checks (bench/chaos/checks.py), handed a bad state."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from bench.chaos.checks import Findings, no_open_transactions

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_transaction_left_open_fails_invariant_5_and_one_that_ends_does_not():
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params["application_name"] = "left-open"
    left_open = psycopg.connect(**params)
    try:
        left_open.execute("SELECT 1")  # BEGIN ... SELECT 1, then nothing: idle in transaction
        found = Findings()
        no_open_transactions(found)
        assert len(found.violations) == 1
        assert (
            found.violations[0].startswith("[5] backend") and "(left-open)" in found.violations[0]
        )

        left_open.commit()
        found = Findings()
        no_open_transactions(found)
        assert found.violations == []
    finally:
        left_open.close()
