"""The table and the last line."""

from __future__ import annotations

import math
import os

from bench.measure import Row

COLUMNS = (
    ("row", 13, "<"),
    ("S", 3, ">"),
    ("P", 2, ">"),
    ("steps/s", 8, ">"),
    ("turns/s", 7, ">"),
    ("WAL B/step", 10, ">"),
    ("WAL(db)", 8, ">"),
    ("table B/step", 12, ">"),
    ("commits/step", 12, ">"),
    ("p50 ms", 7, ">"),
    ("p99 ms", 7, ">"),
    ("CPU ms/step", 11, ">"),
    ("host ms/step", 12, ">"),
    ("x floor", 7, ">"),
    ("note", 0, "<"),
)


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def contaminated(row: Row) -> bool:
    """Did something outside the bench database write WAL meanwhile?

    Alone on the server, page headers and alignment put the lsn diff 2-4%
    above the record bytes we attribute to the bench database (see the floor
    and pgbench rows); other engineers' tests add commits, and CREATE
    DATABASE of a test database adds megabytes of WAL with a single commit.
    """
    return any(
        t.commits > 1.02 * t.db_commits + 2 or t.wal_bytes > 1.06 * t.db_wal_bytes
        for t in row.trials
    )


def wal_per_step(row: Row) -> float:
    """Workload.md's figure (cluster-wide lsn diff), unless other databases
    wrote meanwhile; then the WAL attributed to the bench database."""
    return row.per_step("db_wal_bytes" if contaminated(row) else "wal_bytes")


def cells(row: Row, floors: dict[int, float]) -> list[str]:
    floor = floors.get(row.P)
    ratio = row.steps_s / floor if floor else None
    wal = fmt(row.per_step("wal_bytes")) + ("*" if contaminated(row) else "")
    has_latency = any(t.latencies for t in row.trials)
    return [
        row.label + ("!" if row.failures else ""),
        str(row.S or "-"),
        str(row.P),
        fmt(row.steps_s),
        fmt(row.turns_s, 1) if row.turns else "-",
        wal,
        fmt(row.per_step("db_wal_bytes")),
        fmt(row.per_step("table_bytes")) if row.S else "-",
        fmt(row.per_step("db_commits" if contaminated(row) else "commits"), 2),
        fmt(row.median(lambda t: t.percentile(0.5)), 2) if has_latency else "-",
        fmt(row.median(lambda t: t.percentile(0.99)), 2) if has_latency else "-",
        fmt(row.median(lambda t: t.cpu_s / t.steps * 1000), 2),
        fmt(row.median(lambda t: t.machine_s / t.steps * 1000), 2),
        f"{ratio:.2f}" if ratio else "-",
        row.note,
    ]


def table(rows: list[Row]) -> str:
    floors = {r.P: r.steps_s for r in rows if r.label.startswith("floor")}
    body = [cells(r, floors) for r in rows]
    widths = [
        max([w, len(name)] + [len(c[i]) for c in body]) for i, (name, w, _) in enumerate(COLUMNS)
    ]
    widths[-1] = 0

    def line(values: list[str]) -> str:
        parts = []
        for value, width, (_, _, align) in zip(values, widths, COLUMNS, strict=True):
            parts.append(f"{value:{align}{width}}" if width else value)
        return "  ".join(parts).rstrip()

    out = [line([name for name, _, _ in COLUMNS])]
    out.append(line(["-" * w if w else "-" * 4 for w in widths]))
    out += [line(c) for c in body]
    return "\n".join(out)


LEGEND = """\
steps/s: R*S / wall clock from the first process's release to the last one's end; every
figure is the median of the trials. WAL B/step: pg_wal_lsn_diff / steps, cluster-wide; *:
other databases wrote WAL meanwhile, so read WAL(db), and commits/step then counts the
bench database's only. WAL(db): the WAL records that touch the bench database plus their
commit records (no page headers or alignment: ~3% below the lsn diff on a quiet server).
commits/step: Transaction/COMMIT records (pg_walinspect) / steps. p50/p99: from the model
returning step k to the commit that made step k durable returning. CPU: the measured
processes (in-process workers; for Celery rows the Celery workers, not the clients); host:
non-idle CPU of the whole machine (/proc/stat), PostgreSQL included. x floor: steps/s over
the floor's at the same process count. Before each trial the harness waits up to
BENCH_QUIET_WAIT_S (60 s; 10 with QUICK) for the machine to go idle; "host N% busy" says
it did not."""


def final_line(figures: dict[str, float | None]) -> str:
    def v(key: str, digits: int) -> str:
        value = figures.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "n/a"
        return f"{value:.{digits}f}"

    return (
        f"bench: S=50 engine_1p_steps_s={v('engine_1p', 0)} engine_2p_steps_s={v('engine_2p', 0)}"
        f" celery_2w_steps_s={v('celery_2w', 0)} floor_1p_steps_s={v('floor_1p', 0)}"
        f" ratio_engine_floor={v('ratio', 3)} wal_bytes_step={v('wal', 0)}"
        f" wal_growth_50_10={v('growth', 3)} live_p95_ms_100={v('live_p95_100', 2)}"
    )


def machine_note() -> str:
    load = os.getloadavg()
    return f"nproc={os.cpu_count()} loadavg={load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
