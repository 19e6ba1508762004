"""`python -m bench`: every row of the table, then the other engineers' scripts,
then the summary line. QUICK=1: one trial at S = 50 only (engine 1 and 2
processes, the floor, the Celery rows, pgbench), no real client path, no
desk-at-scale."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from bench import pg, report, rows
from bench.measure import Row

ROOT = pg.ROOT
RUNS = {10: 400, 50: 80}  # workload.md §4: what the peers' figures used
FLOOR_RUNS = 400  # at S = 50: 20,000 steps
REAL_RUNS = 250  # 4 model calls each
SCRIPTS = ("live_latency.py", "desk_scale.py", "latency.py", "intake.py")
# Issue 7: the desk pages with 100,000 sessions and 2,000,000 events.
SCRIPT_ARGS = {"desk_scale.py": ["--big"]}
# Issue 15: bursts of tickets at a real model's pace (QUICK: no 500).
QUICK_ARGS = {"latency.py": ["--tickets", "50,200"], "intake.py": ["--quick"]}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def busy_processes() -> str:
    """What else is using the CPU (other engineers' tests run on this machine too)."""
    out = subprocess.run(
        ["ps", "-eo", "pcpu,etimes,args", "--sort=-pcpu", "--no-headers"],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    mine = str(os.getpid())
    busy = []
    for line in out:
        pcpu, _, args = line.strip().split(None, 2)
        if float(pcpu) < 5 or mine in args or args.startswith("ps "):
            continue
        busy.append(f"{pcpu}% {args[:90]}")
    return "; ".join(busy[:6]) or "nothing above 5% CPU"


def code_version() -> str:
    """The checkout is shared: say which runtime code was measured."""
    head = subprocess.run(
        ["git", "log", "-1", "--format=%h %s"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "agents", "approvals", "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    dirty = [line[3:] for line in dirty if line.strip()]
    state = f"; uncommitted changes in {', '.join(dirty)}" if dirty else ""
    return f"code: {head[:90]}{state}"


def others_testing() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args", "--no-headers"], capture_output=True, text=True)
    return [a[:100] for a in out.stdout.splitlines() if "pytest" in a and "bench" not in a]


def plan(quick: bool) -> list[tuple[str, object, tuple]]:
    """(label, row function, its arguments but the trial count), in table order."""
    items: list[tuple[str, object, tuple]] = []
    for s in (50,) if quick else (10, 50):
        r = env_int(f"BENCH_R{s}", RUNS[s])
        for p in (1, 2):
            items.append((f"engine S={s} P={p} R={r}", rows.engine_row, (s, p, r)))
    r = env_int("BENCH_R50", RUNS[50])
    floor_runs = env_int("BENCH_FLOOR_RUNS", FLOOR_RUNS)
    for p in (1, 2):
        items.append((f"floor P={p} R={floor_runs}", rows.floor_row, (50, p, floor_runs)))
    for w in (1, 2):
        items.append((f"celery S=50 W={w} R={r}", rows.celery_row, (50, w, r)))
    if not quick:
        runs = env_int("BENCH_REAL_RUNS", REAL_RUNS)
        items.append((f"real client R={runs}", rows.real_client_row, (runs,)))
    seconds = 5 if quick else 10
    for c in (1, 2):
        items.append((f"pgbench -c {c}", rows.pgbench_row, (c, seconds)))
    return items


def measure_all(quick: bool) -> list[Row]:
    """Round-robin: trial 1 of every row, then trial 2 of every row, ... so that
    each row, the floor included, samples the same stretches of a shared
    machine, and a busy minute does not land on one row's three trials."""
    trials = env_int("BENCH_TRIALS", 1 if quick else 3)
    items = plan(quick)
    table: dict[str, Row] = {}
    disturbed: set[str] = set()
    for round_ in range(1, trials + 1):
        for label, fn, args in items:
            log(f"{label}, trial {round_}/{trials} ...")
            started = time.monotonic()
            if others_testing():
                disturbed.add(label)
            row = fn(*args, 1)
            if others_testing():
                disturbed.add(label)
            if label in table:
                table[label].trials += row.trials
                table[label].failures += row.failures
                table[label].note = row.note  # the real client rows' note: the last trial's
            else:
                table[label] = row
            took = time.monotonic() - started
            log(f"{label}, trial {round_}: {row.trials[-1].steps_s:,.0f} steps/s ({took:.0f} s)")
    for label, row in table.items():
        notes = [row.note] if row.note else []
        if row.busy_before >= 0.15:
            notes.append(f"host {row.busy_before:.0%} busy before a trial")
        if label in disturbed:
            notes.append("others' tests ran")
        row.note = "; ".join(notes)
    return list(table.values())


def run_script(name: str, quick: bool) -> str:
    path = ROOT / "bench" / name
    if not path.is_file():
        print(f"\n{name}: not there yet (bench/{name}); skipped")
        return ""
    if quick and name == "desk_scale.py":
        print(f"\n{name}: skipped (QUICK)")
        return ""
    log(f"running bench/{name}")
    env = dict(os.environ, BENCH_DATABASE_URL=pg.database_url(), BENCH_REDIS_URL=pg.redis_url())
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, str(path), *(QUICK_ARGS if quick else SCRIPT_ARGS).get(name, [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    print(f"\n--- bench/{name} (exit {done.returncode}) ---")
    print(done.stdout.rstrip())
    if done.returncode:
        print(done.stderr.rstrip()[-3000:])
    return done.stdout


def live_p95_100(output: str) -> float | None:
    """The p95 at 100 clients from live_latency.py's output: `p95_ms_100=<ms>`."""
    match = re.findall(r"\bp95_ms_100=([\d.]+)", output)
    return float(match[-1]) if match else None


def summary(table: list[Row], live_output: str) -> dict[str, float | None]:
    def find(label: str, s: int | None = 50) -> Row | None:
        return next((r for r in table if r.label == label and r.S == s), None)

    engine_1p, engine_2p = find("engine 1p"), find("engine 2p")
    floor_1p, celery_2w = find("floor 1p"), find("celery 2w")
    engine_1p_10 = find("engine 1p", 10)
    figures: dict[str, float | None] = {
        "engine_1p": engine_1p.steps_s if engine_1p else None,
        "engine_2p": engine_2p.steps_s if engine_2p else None,
        "celery_2w": celery_2w.steps_s if celery_2w else None,
        "floor_1p": floor_1p.steps_s if floor_1p else None,
        "live_p95_100": live_p95_100(live_output),
    }
    if engine_1p and floor_1p:
        figures["ratio"] = engine_1p.steps_s / floor_1p.steps_s
    if engine_1p:
        figures["wal"] = report.wal_per_step(engine_1p)
    if engine_1p and engine_1p_10:
        figures["growth"] = report.wal_per_step(engine_1p) / report.wal_per_step(engine_1p_10)
    return figures


def main() -> int:
    with pg.exclusive("bench"):
        return _main()


def _main() -> int:
    quick = os.environ.get("QUICK", "") not in ("", "0")
    if quick:  # keep QUICK under five minutes on a shared machine
        os.environ.setdefault("BENCH_QUIET_WAIT_S", "10")
    started = time.monotonic()
    log(f"{report.machine_note()}; busy before: {busy_processes()}")
    log(f"database {pg.database_url()}, redis {pg.redis_url()}; preparing")
    pg.prepare()
    rows.pgbench_init()
    table = measure_all(quick)
    with pg.connect() as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        commit_mode = conn.execute("SHOW synchronous_commit").fetchone()[0]
    trials = env_int("BENCH_TRIALS", 1 if quick else 3)
    what = "QUICK, S=50 only" if quick else "S=10 and S=50"
    print(f"\nAgentdesk bench ({what}; median of {trials} trial(s), rows measured round-robin)")
    print(code_version())
    print(
        f"{report.machine_note()}; PostgreSQL {version}, synchronous_commit={commit_mode};"
        f" busy after: {busy_processes()}"
    )
    print()
    print(report.table(table))
    print()
    print(report.LEGEND)
    failures = [f"{r.label} S={r.S}: {f}" for r in table for f in r.failures]
    if failures:
        print("\nCHECKS FAILED (rows marked !):")
        print("\n".join(f"  {f}" for f in failures))
    live_output = run_script(SCRIPTS[0], quick)
    run_script(SCRIPTS[1], quick)
    run_script(SCRIPTS[2], quick)
    run_script(SCRIPTS[3], quick)  # issue 28: webhook intake, bursts through the sandbox
    print(f"\n(total {time.monotonic() - started:.0f} s)")
    print(report.final_line(summary(table, live_output)))
    return 1 if failures else 0
