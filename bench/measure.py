"""One measurement (workload.md §4): reset, start P processes, warm up, snapshot,
release them at once, snapshot again, and compute the metrics."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import pg

ROOT = pg.ROOT
WARMUP_BASE = 900_000
# How long to wait, before a trial, for the rest of the machine to go idle.
QUIET_WAIT_S = float(os.environ.get("BENCH_QUIET_WAIT_S", "60"))


@dataclass
class Trial:
    steps: int
    runs: int
    wall_s: float
    wal_bytes: int = 0
    commits: int = 0
    db_wal_bytes: int = 0
    db_commits: int = 0
    fpi_bytes: int = 0
    table_bytes: int = 0
    latencies: list[float] = field(default_factory=list)
    cpu_s: float = 0.0  # the measured processes (all threads)
    machine_s: float = 0.0  # non-idle CPU of the host
    connections: int = 0  # connections opened to the bench database meanwhile
    model_s: float = 0.0  # time inside the model client
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def steps_s(self) -> float:
        return self.steps / self.wall_s

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


@dataclass
class Row:
    label: str
    S: int | None
    P: int
    trials: list[Trial] = field(default_factory=list)
    turns: bool = False  # report turns/s
    note: str = ""
    failures: list[str] = field(default_factory=list)

    @property
    def busy_before(self) -> float:
        """The busiest the host was (without us) just before one of the trials."""
        values = [t.extra.get("busy_before") for t in self.trials]
        return max((v for v in values if v is not None), default=0.0)

    def median(self, metric) -> float:
        values = [metric(t) for t in self.trials]
        return statistics.median(values) if values else float("nan")

    @property
    def steps_s(self) -> float:
        return self.median(lambda t: t.steps_s)

    @property
    def turns_s(self) -> float:
        return self.median(lambda t: t.runs / t.wall_s)

    def per_step(self, name: str) -> float:
        return self.median(lambda t: getattr(t, name) / t.steps)


def start(config: dict[str, Any], env: dict[str, str], log_dir: Path) -> subprocess.Popen:
    log = open(log_dir / f"{config['mode']}-{os.getpid()}-{id(config)}.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "bench.worker", json.dumps(config)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )


def _expect(proc: subprocess.Popen, kind: str, log_dir: Path) -> Any:
    while True:
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in log_dir.glob("*.log"))
            raise RuntimeError(f"bench worker exited ({proc.returncode}) before '{kind}':\n{logs}")
        if line.startswith(f"BENCH {kind}"):
            rest = line[len(f"BENCH {kind}") :].strip()
            return json.loads(rest) if rest else None


def proc_cpu_s(pid: int) -> float:
    """CPU of a process we did not start through bench.worker (a Celery worker)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def measure(
    *,
    mode: str,
    processes: int,
    max_steps: int,
    runs: int,
    env: dict[str, str],
    extra_config: dict[str, Any] | None = None,
    watch_pids: list[int] = (),
    side_pids: list[int] = (),
    steps_per_run: int | None = None,
    reset: bool = True,
) -> Trial:
    """Workload.md §4 steps 1–5 for P processes; returns one trial's raw figures."""
    busy_before = pg.wait_quiet(QUIET_WAIT_S) if reset else None
    if reset:
        pg.reset()
        pg.redis_flush()
    log_dir = Path(tempfile.mkdtemp(prefix="agentdesk-bench-"))
    procs = []
    try:
        for w in range(processes):
            config = {
                "mode": mode,
                "S": max_steps,
                "warmup": [WARMUP_BASE + 10 * w, WARMUP_BASE + 10 * w + 1],
                "runs": list(range(w, runs, processes)),
                "dsn": pg.database_url(),
                **(extra_config or {}),
            }
            procs.append(start(config, env, log_dir))
        for proc in procs:
            _expect(proc, "ready", log_dir)
        with pg.connect() as conn:
            tables = pg.runtime_tables(conn) + ["bench_floor"]
            before = pg.snapshot(conn, tables)
            watched_before = [proc_cpu_s(pid) for pid in watch_pids]
            side_before = [proc_cpu_s(pid) for pid in side_pids]
            for proc in procs:  # release them all at once
                proc.stdin.write("go\n")
                proc.stdin.flush()
            results = [_expect(proc, "result", log_dir) for proc in procs]
            watched_after = [proc_cpu_s(pid) for pid in watch_pids]
            side_after = [proc_cpu_s(pid) for pid in side_pids]
            after = pg.snapshot(conn, tables)
            wal = pg.wal_between(conn, before.lsn, after.lsn)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        # The logs only matter when a worker failed, and _expect has put them
        # in its error by then: a run leaves nothing in the temp directory.
        shutil.rmtree(log_dir, ignore_errors=True)
    started = min(r["started"] for r in results)
    ended = max(r["ended"] for r in results)
    latencies = [x for r in results for x in r["latencies"]]
    refunds: dict[str, int] = {}
    for r in results:
        refunds.update(r["refunds"])
    cpu = sum(r["cpu_s"] for r in results)
    if watch_pids:  # the Celery row: the workers are the processes
        cpu = sum(a - b for a, b in zip(watched_after, watched_before, strict=True))
    trial = Trial(
        steps=runs * (steps_per_run or max_steps),
        runs=runs,
        wall_s=ended - started,
        wal_bytes=wal.wal_bytes,
        commits=wal.commits,
        db_wal_bytes=wal.db_bytes,
        db_commits=wal.db_commits,
        fpi_bytes=wal.fpi_bytes,
        table_bytes=after.table_bytes - before.table_bytes,
        latencies=latencies,
        cpu_s=cpu,
        machine_s=after.machine_busy_s - before.machine_busy_s,
        connections=after.sessions - before.sessions,
        model_s=sum(sum(r["model_s"]) for r in results),
        extra={
            "refunds": refunds,
            "client_cpu_s": sum(r["cpu_s"] for r in results),
            "side_cpu_s": sum(a - b for a, b in zip(side_after, side_before, strict=True)),
            "busy_before": busy_before,
        },
    )
    return trial
