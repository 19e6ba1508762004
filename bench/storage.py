"""Storage per step and per closed session, before and after retention.

    python -m bench.storage [--runs 20] [--steps 50]

Runs `--runs` sessions of the workload's triage loop (S = `--steps` model
calls each, the fake model and tools of bench/plugin.py) through the real
engine in this process, on a database of its own (`agentdesk_bench_storage`
on DATABASE_URL's server, TRUNCATEd first; Redis db 14), then backdates them
past AGENTDESK_RETENTION_DAYS and runs agents.features.retention.sessions_prune.

Bytes are measured two ways: the rows as stored (sum of pg_column_size over
each session's rows, after TOAST compression, without page or index
overhead: what the session page shows), and the tables on disk
(pg_total_relation_size, with indexes and TOAST; it only shrinks after a
VACUUM FULL, so it is printed after a plain VACUUM to show reusable space).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from urllib.parse import urlsplit, urlunsplit

DB_NAME = "agentdesk_bench_storage"
# agents_message is a view over agents_event (transcript rows are events).
TABLES = ("agents_event", "agents_toolcall", "agents_turn", "agents_session")
TABLES += ("agents_sessionruntime", "agents_sessionarchive")


def _setup_env() -> None:
    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    parts = urlsplit(server)
    os.environ["BENCH_DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{DB_NAME}"))
    redis = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    os.environ["BENCH_REDIS_URL"] = urlunsplit(redis._replace(path="/14"))
    from bench import pg

    for name, value in pg.worker_env().items():
        if name.startswith(("DJANGO_", "DATABASE_", "REDIS_", "CELERY_", "AGENTDESK_")):
            os.environ[name] = value


def _prepare() -> None:
    from bench import pg

    pg.prepare()
    pg.reset()
    import redis

    redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]).flushdb()


def _run(runs: int, steps: int) -> float:
    from bench.worker import EngineRuns

    engine = EngineRuns({"S": steps})
    started = time.monotonic()
    for i in range(runs):
        engine.run(i)
    return time.monotonic() - started


def _row_bytes() -> dict[str, tuple[int, int]]:
    from django.db import connection

    out = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(
                f"SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t"  # noqa: S608
            )
            n, size = cursor.fetchone()
            out[table] = (int(n), int(size))
    return out


def _disk_bytes() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
        out = {}
        for table in TABLES:
            cursor.execute("SELECT pg_total_relation_size(%s)", [table])
            out[table] = int(cursor.fetchone()[0])
    return out


def _steps() -> int:
    """Engine steps: each recorded model reply and each recorded tool result
    is one transcript row; the rest are turn inputs."""
    from agents.models import Message, Turn

    return Message.objects.count() - Turn.objects.count()


def _print(label: str, rows: dict[str, tuple[int, int]], disk: dict[str, int], n: int, steps: int):
    total_rows = sum(size for _, size in rows.values())
    print(f"\n{label}")
    print(f"  {'table':24} {'rows':>8} {'row bytes':>12} {'on disk':>12}")
    for table in TABLES:
        count, size = rows[table]
        print(f"  {table:24} {count:>8} {size:>12} {disk[table]:>12}")
    print(f"  {'total':24} {'':>8} {total_rows:>12} {sum(disk.values()):>12}")
    print(
        f"  per closed session: {total_rows / n:,.0f} row bytes, {sum(disk.values()) / n:,.0f} on disk"
    )
    if steps:
        print(f"  per step ({steps} steps): {total_rows / steps:,.1f} row bytes")
        for table in ("agents_event", "agents_toolcall"):
            print(f"    {table}: {rows[table][1] / steps:,.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    _setup_env()
    from bench.worker import django_setup

    _prepare()
    django_setup()
    from datetime import timedelta

    from django.utils import timezone

    from agents.features.retention import sessions_prune
    from agents.models import Session

    seconds = _run(args.runs, args.steps)
    steps = _steps()
    statuses = set(Session.objects.values_list("status", flat=True))
    print(f"bench.storage: {args.runs} sessions x S={args.steps} in {seconds:.1f} s; {statuses}")
    before = _row_bytes()
    _print("before pruning", before, _disk_bytes(), args.runs, steps)

    Session.objects.update(updated_at=timezone.now() - timedelta(days=40))
    started = time.monotonic()
    report = sessions_prune(days=30)
    took = time.monotonic() - started
    after = _row_bytes()
    print(
        f"\npruned {report.sessions} sessions in {took:.2f} s: {report.messages} transcript rows, "
        f"{report.events} events; archive {report.archived_bytes} gzip bytes"
    )
    _print("after pruning (archive included)", after, _disk_bytes(), args.runs, steps)
    live = sum(s for t, (_, s) in after.items() if t != "agents_sessionarchive")
    print(f"  per closed session without the archive: {live / args.runs:,.0f} row bytes")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
