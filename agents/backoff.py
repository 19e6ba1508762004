"""The one backoff formula: a base doubled for each attempt after the first,
capped, with optional jitter. Used by the step retry (runtime/store/control.py),
a tool's own retries (runtime/tooling.py), jobs and outbound webhooks.
"""

from __future__ import annotations

import secrets


def backoff_s(attempt: int, *, base: float, cap: float, jitter: float = 0.0) -> float:
    """Seconds to wait before retrying after `attempt` failed attempts (1, 2, ...):
    base, 2 x base, 4 x base ... up to `cap`, then up to `jitter` (a fraction)
    more, so that many senders that failed together do not retry together."""
    delay = min(base * 2 ** (max(attempt, 1) - 1), cap)
    if jitter:
        delay *= 1 + secrets.randbelow(round(jitter * 1000)) / 1000
    return delay
