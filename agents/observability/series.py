"""The operations page's time series, aggregated in Postgres.

Two queries per refresh, each bounded to the last N hours:

- the event log (steps, failures, recoveries, tokens and cost per bucket):
  every step writes `model.replied` or `tool.finished`, a dead owner's
  successor writes `recovery`, and a model reply carries its usage and cost;
- approvals decided in the window (time from request to decision).

The events query is a range on agents_event.created_at: fast with an index
on that column (see the report of the observability work; a BRIN index fits
an append-only log), a sequential scan of the log without one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents import budgets

# Bucket width per window: about 60-100 bars whatever the window.
WINDOWS = {1: 60, 3: 180, 6: 300, 12: 600, 24: 900}  # hours -> seconds per bucket
# USD per million tokens (input, output) when AGENTDESK_PRICES (agents/budgets.py)
# has no price for the model and a reply recorded no cost of its own.

_EVENTS_SQL = """
    SELECT date_bin(make_interval(secs => %(width)s), created_at, TIMESTAMPTZ '2000-01-01') AS b,
        count(*) FILTER (WHERE kind IN ('model.replied', 'tool.finished')) AS steps,
        count(*) FILTER (WHERE kind = 'turn.failed') AS turns_failed,
        count(*) FILTER (WHERE kind IN ('model.failed', 'memory.failed')) AS model_failed,
        count(*) FILTER (WHERE kind = 'tool.finished' AND data->>'status' = 'failed')
            AS tools_failed,
        count(*) FILTER (WHERE kind = 'tool.in_doubt') AS in_doubt,
        count(*) FILTER (WHERE kind = 'recovery') AS recoveries,
        coalesce(sum((data->>'cost_micros')::bigint)
            FILTER (WHERE kind = 'model.replied' AND data->>'cost_micros' IS NOT NULL), 0) AS cost_micros,
        coalesce(sum((data->'usage'->>'input')::bigint)
            FILTER (WHERE kind = 'model.replied' AND data->>'cost_micros' IS NULL), 0) AS in_unpriced,
        coalesce(sum((data->'usage'->>'output')::bigint)
            FILTER (WHERE kind = 'model.replied' AND data->>'cost_micros' IS NULL), 0) AS out_unpriced,
        coalesce(sum((data->'usage'->>'input')::bigint + (data->'usage'->>'output')::bigint)
            FILTER (WHERE kind = 'model.replied'), 0) AS tokens
    FROM agents_event
    WHERE created_at >= %(since)s
    GROUP BY b ORDER BY b
"""

_APPROVALS_SQL = """
    SELECT date_bin(make_interval(secs => %(width)s), decided_at, TIMESTAMPTZ '2000-01-01') AS b,
        count(*), avg(extract(epoch FROM decided_at - created_at)),
        max(extract(epoch FROM decided_at - created_at))
    FROM approvals_approval
    WHERE decided_at >= %(since)s AND status IN ('approved', 'denied', 'expired')
    GROUP BY b ORDER BY b
"""


@dataclass
class Bucket:
    start: datetime
    steps: int = 0
    failures: int = 0
    turns_failed: int = 0
    model_failed: int = 0
    tools_failed: int = 0
    in_doubt: int = 0
    recoveries: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    decided: int = 0
    wait_avg_s: float | None = None
    wait_max_s: float | None = None


@dataclass
class Series:
    hours: int
    width_s: int
    since: datetime
    buckets: list[Bucket]

    def total(self, name: str) -> float:
        return sum(getattr(b, name) or 0 for b in self.buckets)

    @property
    def wait_avg_s(self) -> float | None:
        decided = self.total("decided")
        if not decided:
            return None
        return sum((b.wait_avg_s or 0) * b.decided for b in self.buckets) / decided


def ops_series(*, hours: int, now: datetime | None = None) -> Series:
    """Per-bucket figures for the last `hours` (one of WINDOWS), oldest first,
    every bucket present (zeros where nothing happened)."""
    width = WINDOWS[hours]
    now = now or timezone.now()
    first = _bin(now - timedelta(hours=hours), width) + timedelta(seconds=width)
    buckets = {}
    moment = first
    while moment <= now:
        buckets[moment] = Bucket(start=moment)
        moment += timedelta(seconds=width)
    params = {"width": width, "since": first}
    price_in, price_out = _prices()
    with connection.cursor() as cursor:
        cursor.execute(_EVENTS_SQL, params)
        for row in cursor.fetchall():
            bucket = buckets.get(row[0])
            if bucket is None:
                continue
            row = [int(v) for v in row[1:]]  # sums of bigint come back as numeric
            row.insert(0, bucket.start)
            bucket.steps, bucket.turns_failed, bucket.model_failed = row[1], row[2], row[3]
            bucket.tools_failed, bucket.in_doubt, bucket.recoveries = row[4], row[5], row[6]
            bucket.failures = row[2] + row[3] + row[4] + row[5]
            bucket.tokens = row[10]
            unpriced = (price_in * row[8] + price_out * row[9]) / 1_000_000
            bucket.cost_usd = row[7] / 1_000_000 + unpriced
        cursor.execute(_APPROVALS_SQL, params)
        for start, decided, wait_avg, wait_max in cursor.fetchall():
            bucket = buckets.get(start)
            if bucket is not None:
                bucket.decided = decided
                bucket.wait_avg_s, bucket.wait_max_s = float(wait_avg), float(wait_max)
    return Series(hours=hours, width_s=width, since=first, buckets=list(buckets.values()))


def _bin(moment: datetime, width: int) -> datetime:
    """The start of the bucket holding `moment` (what date_bin computes)."""
    epoch = datetime(2000, 1, 1, tzinfo=moment.tzinfo)
    seconds = int((moment - epoch).total_seconds()) // width * width
    return epoch + timedelta(seconds=seconds)


def _prices() -> tuple[float, float]:
    """Price of the configured model, per million tokens, for replies that
    recorded no cost: the one price table, AGENTDESK_PRICES (agents/budgets.py);
    a model without a price costs nothing, as in the budgets."""
    return budgets.prices_for(settings.AGENTDESK_MODEL) or (0.0, 0.0)
