"""`python -m bench.profile`: where the engine's time goes, in-process, S = 50.

Two passes over the same workload (R runs, one process, after 2 warm-up runs):

1. A timed pass with a database execute wrapper only: wall time per step,
   time spent inside each kind of statement (round trip + server work +
   commit), round trips per step, CPU per thread. Python time is the rest.
2. A cProfile pass (main thread only; the event publisher and the cancel
   watcher threads are covered by the per-thread CPU of pass 1), with time
   grouped by where the code lives.

Nothing in the runtime is changed: the engine's owner optimises from this.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import re
import sys
import time
from collections import defaultdict

from bench import pg

S = int(os.environ.get("BENCH_PROFILE_S", "50"))
R = int(os.environ.get("BENCH_PROFILE_R", "80"))


def statement_kind(sql: str) -> str:
    text = " ".join(sql.split())
    if "INSERT INTO agents_event" in text and "jsonb_to_recordset" in text:
        return "record_reply (CTE)"
    if "INSERT INTO agents_event" in text and "WITH s AS" in text:
        return "record_tool_result (CTE)"
    if "pg_try_advisory_lock" in text:
        return "advisory lock"
    if "pg_advisory_unlock" in text:
        return "advisory unlock"
    match = re.match(r'(SELECT|INSERT INTO|UPDATE|DELETE FROM)\s.*?"?(\w+)"?[.\s]', text)
    if text.startswith("SELECT"):
        table = re.search(r'FROM "?(\w+)"?', text)
        lock = " FOR UPDATE" if "FOR NO KEY UPDATE" in text or "FOR UPDATE" in text else ""
        return f"ORM SELECT {table.group(1) if table else '?'}{lock}"
    if match:
        verb = match.group(1).split()[0]
        table = re.search(r'(?:INTO|UPDATE|FROM) "?(\w+)"?', text)
        return f"ORM {verb} {table.group(1) if table else '?'}"
    return text[:40]


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each Python thread of this process (by native thread id)."""
    import threading

    ticks = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = defaultdict(float)
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        out[names.get(int(tid), f"thread {tid}")] += (int(fields[11]) + int(fields[12])) / ticks
    return out


def time_calls(owner, attribute: str, label: str, stats):
    """Time every call of owner.attribute (instrumentation for this pass only)."""
    original = getattr(owner, attribute)

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            entry = stats[label]
            entry[0] += 1
            entry[1] += time.perf_counter() - started

    setattr(owner, attribute, timed)
    return original


def main() -> None:
    os.environ.update(pg.worker_env())
    pg.prepare()
    pg.reset()
    pg.redis_flush()
    import django

    django.setup()
    import threading

    from django.db import connection

    from bench import worker

    runner = worker.EngineRuns({"S": S})
    for i in (900_000, 900_001):
        runner.run(i)

    stats: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])

    def timed(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            entry = stats[statement_kind(sql)]
            entry[0] += 1
            entry[1] += time.perf_counter() - started

    original_commit = connection.commit

    def commit():
        started = time.perf_counter()
        original_commit()
        entry = stats["COMMIT (atomic blocks)"]
        entry[0] += 1
        entry[1] += time.perf_counter() - started

    connection.commit = commit
    from agents.runtime import dispatch, engine
    from agents.runtime.store import hot as store_hot
    from agents.tools.base import Tool

    python_stats: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    restore = [
        (
            Tool,
            "validate",
            time_calls(Tool, "validate", "Tool.validate (jsonschema)", python_stats),
        ),
        (
            store_hot,
            "_publish",
            time_calls(store_hot, "_publish", "store.hot._publish", python_stats),
        ),
        (
            dispatch,
            "enqueue",
            time_calls(dispatch, "enqueue", "dispatch.enqueue (Celery publish)", python_stats),
        ),
        (
            engine,
            "build_messages",
            time_calls(engine, "build_messages", "engine.build_messages", python_stats),
        ),
    ]
    wal_conn = pg.connect()
    wal_before = pg.snapshot(wal_conn, [])
    with connection.cursor() as cursor:  # the engine's PostgreSQL backend, on this host
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    from bench.measure import proc_cpu_s

    backend_before = proc_cpu_s(backend)
    cpu_before = thread_cpu()
    started = time.perf_counter()
    with connection.execute_wrapper(timed):
        for i in range(R):
            runner.run(i)
    wall = time.perf_counter() - started
    cpu_after = thread_cpu()
    backend_cpu = proc_cpu_s(backend) - backend_before
    wal_after = pg.snapshot(wal_conn, [])
    connection.commit = original_commit
    for owner, attribute, original in restore:
        setattr(owner, attribute, original)
    steps = R * S
    model = sum(runner.plugin.RECORDER.model_s)

    print(f"bench.profile: engine in-process, S={S}, R={R}, {steps} steps, 1 process")
    print(f"threads: {[t.name for t in threading.enumerate()]}")
    print(f"\n1. timed pass: {steps / wall:,.0f} steps/s, {wall / steps * 1000:.3f} ms/step wall")
    db_total = sum(v[1] for v in stats.values())
    trips = sum(v[0] for v in stats.values())
    print(
        f"   in the database client (round trip + server + commit): {db_total / steps * 1000:.3f} ms/step,"
        f" {trips / steps:.2f} statements/step"
    )
    print(f"   in the fake model: {model / steps * 1000:.3f} ms/step")
    print(f"   Python elsewhere: {(wall - db_total - model) / steps * 1000:.3f} ms/step")
    print(f"   {'statement':48} {'per step':>9} {'ms/step':>8} {'ms each':>8}")
    for kind, (count, total) in sorted(stats.items(), key=lambda kv: -kv[1][1]):
        print(
            f"   {kind[:48]:48} {count / steps:9.3f} {total / steps * 1000:8.3f} {total / count * 1000:8.3f}"
        )
    print("   timed Python pieces (outside the database client):")
    for kind, (count, total) in sorted(python_stats.items(), key=lambda kv: -kv[1][1]):
        print(
            f"   {kind[:48]:48} {count / steps:9.3f} {total / steps * 1000:8.3f} {total / count * 1000:8.3f}"
        )
    print(f"   CPU of the engine's PostgreSQL backend: {backend_cpu / steps * 1000:.3f} ms/step")
    print("   CPU by thread (ms/step):")
    for name, value in sorted(cpu_after.items(), key=lambda kv: -kv[1]):
        print(f"     {name:20} {(value - cpu_before.get(name, 0.0)) / steps * 1000:.3f}")

    wal_by_relation(wal_conn, wal_before.lsn, wal_after.lsn, steps)
    wal_conn.close()

    pg.reset()
    pg.redis_flush()
    for i in (900_000, 900_001):
        runner.run(i)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for i in range(R):
        runner.run(i)
    profiler.disable()
    wall = time.perf_counter() - started
    print(
        f"\n2. cProfile pass (main thread; profiling overhead included): {wall / steps * 1000:.3f} ms/step"
    )
    report(pstats.Stats(profiler), steps)
    sys.stdout.flush()


WAL_BY_RELATION_SQL = """
WITH r AS (
    SELECT record_type, resource_manager, record_length, fpi_length, xid,
           (regexp_match(block_ref, 'rel \\d+/(\\d+)/(\\d+)'))[1]::oid AS db,
           (regexp_match(block_ref, 'rel \\d+/(\\d+)/(\\d+)'))[2]::oid AS node
    FROM pg_get_wal_records_info(%s, %s)
)
SELECT coalesce(pg_filenode_relation(0, node)::text,
                CASE WHEN resource_manager = 'Transaction' THEN 'commit records'
                     ELSE 'other (' || resource_manager || ')' END) AS relation,
       count(*), sum(record_length), sum(fpi_length),
       string_agg(DISTINCT resource_manager || '/' || record_type, ' ') AS kinds
FROM r
WHERE db = (SELECT oid FROM pg_database WHERE datname = current_database())
   OR (resource_manager = 'Transaction' AND xid IN (
        SELECT xid FROM r WHERE db = (SELECT oid FROM pg_database
                                      WHERE datname = current_database())))
GROUP BY 1 ORDER BY 3 DESC
"""


def wal_by_relation(conn, before: str, after: str, steps: int) -> None:
    """Where the WAL of the timed pass went, by table / index (block references)."""
    rows = conn.execute(WAL_BY_RELATION_SQL, [before, after]).fetchall()
    total = sum(r[2] for r in rows)
    print(f"\n   WAL of the timed pass by relation: {total / steps:,.0f} B/step of record bytes")
    print(f"   {'relation':40} {'records/step':>12} {'B/step':>7} {'FPI':>5}  record types")
    for relation, count, size, fpi, kinds in rows:
        print(
            f"   {relation[:40]:40} {count / steps:12.2f} {size / steps:7.0f} {fpi / steps:5.0f}"
            f"  {kinds[:70]}"
        )


GROUPS = (
    ("our runtime (agents/runtime)", ("/agents/runtime/",)),
    ("our services/events/models (agents, approvals)", ("/agents/", "/approvals/")),
    ("bench (fake model, fake tools, hooks)", ("/bench/",)),
    ("Django ORM (models, query, compiler)", ("/django/db/models/",)),
    (
        "Django db backend, transactions, utils",
        ("/django/db/", "/django/utils/", "/django/dispatch/"),
    ),
    ("psycopg (Python layer)", ("/psycopg/",)),
    ("jsonschema + referencing", ("/jsonschema", "/referencing/", "/rpds")),
    ("celery/kombu/redis (enqueue)", ("/celery/", "/kombu/", "/redis/", "/vine/")),
    ("json", ("/json/",)),
    ("logging, threading, other stdlib", ("/lib/python3.11/",)),
)


def group_of(filename: str, name: str) -> str:
    if filename == "~":
        if "psycopg" in name or "wait" in name or "PGconn" in name or "poll" in name:
            return "waiting on PostgreSQL / libpq (C)"
        return "C builtins (str, dict, json C, ...)"
    for label, needles in GROUPS:
        if any(n in filename for n in needles):
            return label
    if "psycopg_binary" in filename:
        return "psycopg (C layer)"
    return "other"


def report(stats: pstats.Stats, steps: int) -> None:
    groups: dict[str, float] = defaultdict(float)
    total = 0.0
    rows = []
    for (filename, line, name), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        group = group_of(filename, name)
        groups[group] += tt
        total += tt
        rows.append(
            (
                tt,
                ct,
                nc,
                f"{filename.split('site-packages/')[-1].replace('/work/main/', '')}:{line}({name})",
            )
        )
    print(f"   {'self time by where the code lives':52} {'ms/step':>8} {'share':>6}")
    for group, value in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"   {group:52} {value / steps * 1000:8.3f} {value / total:6.1%}")
    print("   top functions by self time (ms/step, calls/step):")
    for tt, _ct, nc, where in sorted(rows, reverse=True)[:25]:
        print(f"     {tt / steps * 1000:7.3f} {nc / steps:6.1f}  {where[-95:]}")
    print("   cumulative time of the engine's pieces (ms/step, calls/step):")
    wanted = (
        "message_post",
        "advance",
        "claim",
        "_load",
        "_model_step",
        "_record_reply",
        "record_reply",
        "_tool_step",
        "record_tool_result",
        "execute",
        "validate",
        "_publish",
        "watch",
        "complete",
        "build_messages",
        "triage_calls",
        "requirement_for",
        "apply_async",
        "create_session",
        "_execute_one",
        "session_lock",
        "is_runnable",
        "__exit__",
    )
    picked = []
    for (filename, line, name), (_cc, nc, _tt, ct, _callers) in stats.stats.items():
        if name in wanted and (
            "/agents/" in filename
            or "/bench/" in filename
            or name == "apply_async"
            or (name == "validate" and "jsonschema/validators" in filename)
        ):
            picked.append(
                (
                    ct,
                    nc,
                    f"{filename.split('site-packages/')[-1].replace('/work/main/', '')}:{line}({name})",
                )
            )
    for ct, nc, where in sorted(picked, reverse=True):
        print(f"     {ct / steps * 1000:7.3f} {nc / steps:6.2f}  {where[-95:]}")


if __name__ == "__main__":
    with pg.exclusive("bench.profile"):
        main()
