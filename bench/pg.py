"""The benchmark's own database and Redis db, and what we read from PostgreSQL.

The harness never touches the application's database: it creates (and
migrates) `agentdesk_bench` on the server DATABASE_URL points at (default
127.0.0.1:5432), or uses BENCH_DATABASE_URL as given, and a Redis db of its
own (BENCH_REDIS_URL, default db 13 on REDIS_URL's server). TRUNCATE runs
only on a database whose name contains "bench".
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "agentdesk_bench"
PGBENCH_DB = "agentdesk_pgbench"
RUNTIME_TABLES = ("agents_%", "approvals_%")


def _with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def database_url() -> str:
    if os.environ.get("BENCH_DATABASE_URL"):
        return os.environ["BENCH_DATABASE_URL"]
    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    return _with_path(server, f"/{BENCH_DB}")


def redis_url() -> str:
    if os.environ.get("BENCH_REDIS_URL"):
        return os.environ["BENCH_REDIS_URL"]
    return _with_path(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), "/13")


def sibling_url(dbname: str) -> str:
    return _with_path(database_url(), f"/{dbname}")


def connect(url: str | None = None) -> psycopg.Connection:
    return psycopg.connect(_libpq(url or database_url()), autocommit=True)


def _libpq(url: str) -> str:
    # libpq does not know the postgres:// scheme's alias used by dj-database-url.
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def create_database(dbname: str) -> None:
    with connect(sibling_url("postgres")) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone()
        if not exists:
            admin.execute(f'CREATE DATABASE "{dbname}"')


@contextmanager
def exclusive(what: str) -> Iterator[None]:
    """One bench run at a time on this server: `python -m bench`, bench.profile
    and bench.whatif all TRUNCATE the bench database, so a second one started
    meanwhile would wipe the first one's runs. Waits for the other to finish.

    A two-key advisory lock in the `postgres` database: the runtime's
    session locks use the one-key form, so the two can never collide.
    """
    conn = connect(sibling_url("postgres"))
    key = (7_007, 1)
    try:
        if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()[0]:
            print(f"{what}: another bench run holds the bench database; waiting", file=sys.stderr)
            conn.execute("SELECT pg_advisory_lock(%s, %s)", key)
        yield
    finally:
        conn.close()  # releases the lock


def worker_env(**extra: str) -> dict[str, str]:
    """The environment of every process that runs Agentdesk code for the bench."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database_url(),
        REDIS_URL=redis_url(),
        CELERY_BROKER_URL=redis_url(),
        AGENTDESK_MODEL_CLIENT="bench.plugin.FakeModel",
        # Refunds above the limit wait for a human; the bench runs unattended.
        AGENTDESK_REFUND_APPROVAL_LIMIT_CENTS="1000000000",
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


def prepare() -> None:
    """Create and migrate the bench database; enable pg_walinspect."""
    create_database(urlsplit(database_url()).path.lstrip("/"))
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=worker_env(),
        check=True,
    )
    with connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor ("
            " id bigserial PRIMARY KEY, run_id text NOT NULL, step int NOT NULL,"
            " delta jsonb NOT NULL)"
        )


def runtime_tables(conn: psycopg.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        " AND (tablename LIKE %s OR tablename LIKE %s) ORDER BY 1",
        list(RUNTIME_TABLES),
    ).fetchall()
    return [r[0] for r in rows]


def reset(extra_tables: tuple[str, ...] = ("bench_floor",)) -> None:
    """§4.1: empty the runtime's tables (schema and migrations stay), CHECKPOINT."""
    name = urlsplit(database_url()).path.lstrip("/")
    if "bench" not in name:
        raise SystemExit(f"bench: refusing to TRUNCATE database {name!r} (not a bench database)")
    with connect() as conn:
        tables = runtime_tables(conn) + list(extra_tables)
        conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
        conn.execute("CHECKPOINT")


@dataclass
class Snapshot:
    lsn: str
    table_bytes: int
    machine_busy_s: float
    sessions: int  # connections ever opened to the bench database


def machine_busy_s() -> float:
    """Non-idle CPU seconds of the whole host since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def hold_wal(conn: psycopg.Connection) -> None:
    """Keep the WAL from now on until this connection closes.

    A checkpoint during a trial (checkpoint_timeout, or anyone's CHECKPOINT)
    may recycle the segments pg_walinspect must read afterwards; a temporary
    physical replication slot, dropped with its session, keeps them.
    """
    exists = conn.execute(
        "SELECT 1 FROM pg_replication_slots WHERE active_pid = pg_backend_pid()"
    ).fetchone()
    if not exists:
        conn.execute(
            "SELECT pg_create_physical_replication_slot(%s, true, true)",
            [f"agentdesk_bench_{os.getpid()}"],
        )


def _cpu_counters() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def wait_quiet(max_s: float, threshold: float = 0.15) -> float:
    """Before a trial, wait (at most max_s) until the host is idle: nothing of
    ours runs now, so what is busy is someone else's work. Returns the busy
    share of the whole machine over the last second."""
    deadline = time.monotonic() + max_s
    while True:
        busy0, total0 = _cpu_counters()
        time.sleep(1.0)
        busy1, total1 = _cpu_counters()
        share = (busy1 - busy0) / max(1, total1 - total0)
        if share < threshold or time.monotonic() >= deadline:
            return share


def snapshot(conn: psycopg.Connection, tables: list[str]) -> Snapshot:
    hold_wal(conn)
    lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    size = 0
    if tables:
        size = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c::regclass)), 0)::bigint"
            " FROM unnest(%s::text[]) AS c",
            [tables],
        ).fetchone()[0]
    sessions = conn.execute(
        "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()[0]
    return Snapshot(lsn, int(size), machine_busy_s(), int(sessions))


@dataclass
class WalFigures:
    wal_bytes: int  # pg_wal_lsn_diff: cluster-wide
    commits: int  # Transaction/COMMIT records, cluster-wide
    db_bytes: int  # record bytes of records that touch our database, and their commits
    db_commits: int  # commits of transactions that wrote our database
    fpi_bytes: int  # full-page images among db_bytes


def wal_between(conn: psycopg.Connection, before: str, after: str) -> WalFigures:
    wal = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)::bigint", [after, before]).fetchone()[0]
    if wal <= 0:
        return WalFigures(0, 0, 0, 0, 0)
    commits = conn.execute(
        "SELECT coalesce(sum(count), 0)::bigint FROM pg_get_wal_stats(%s, %s, true)"
        " WHERE \"resource_manager/record_type\" = 'Transaction/COMMIT'",
        [before, after],
    ).fetchone()[0]
    # Attribute records to databases through their block references
    # ("rel <tablespace>/<database>/<relfilenode>"): other engineers' tests
    # write to the same cluster, and the cluster-wide figures then say so.
    oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
    pattern = f"% rel %/{oid[0]}/%"
    row = conn.execute(
        """
        WITH r AS (SELECT * FROM pg_get_wal_records_info(%s, %s)),
        ours AS (SELECT DISTINCT xid FROM r WHERE block_ref LIKE %s AND xid <> '0')
        SELECT coalesce(sum(record_length) FILTER (WHERE block_ref LIKE %s
                   OR (resource_manager = 'Transaction' AND xid IN (SELECT xid FROM ours))), 0),
               count(*) FILTER (WHERE resource_manager = 'Transaction'
                   AND record_type = 'COMMIT' AND xid IN (SELECT xid FROM ours)),
               coalesce(sum(fpi_length) FILTER (WHERE block_ref LIKE %s), 0)
        FROM r
        """,
        [before, after, pattern, pattern, pattern],
    ).fetchone()
    return WalFigures(int(wal), int(commits), int(row[0]), int(row[1]), int(row[2]))


def redis_flush() -> None:
    import redis

    redis.Redis.from_url(redis_url()).flushdb()
