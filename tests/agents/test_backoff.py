"""One backoff formula for every retry: doubling from the base, capped, jittered."""

from __future__ import annotations

from agents.backoff import backoff_s


def test_the_delay_doubles_from_the_base_up_to_the_cap():
    assert [backoff_s(n, base=2.0, cap=60.0) for n in range(1, 8)] == [2, 4, 8, 16, 32, 60, 60]


def test_jitter_adds_at_most_its_fraction():
    delays = {backoff_s(3, base=1.0, cap=100.0, jitter=0.1) for _ in range(200)}
    assert all(4.0 <= d < 4.4 for d in delays) and len(delays) > 1


def test_attempt_zero_waits_the_base():
    assert backoff_s(0, base=0.4, cap=2.0) == 0.4
