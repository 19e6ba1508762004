"""The rows of the table: how each is run and checked."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench import pg, workload
from bench.measure import QUIET_WAIT_S, Row, Trial, measure

ROOT = pg.ROOT


# --- Checks (after each measurement, outside the timed part) ---------------------------


def check_refunds(trial: Trial, max_steps: int, prefix: str, runs: int) -> list[str]:
    refunds = trial.extra["refunds"]
    problems = []
    twice = [k for k, n in refunds.items() if n != 1]
    if twice:
        problems.append(f"{len(twice)} refund keys executed more than once, e.g. {twice[0]}")
    per_run: dict[str, int] = {}
    for key in refunds:
        per_run[key.split(":", 1)[0]] = per_run.get(key.split(":", 1)[0], 0) + 1
    want = workload.expected_refunds(max_steps)
    wrong = [
        f"{prefix}-{i:06d}" for i in range(runs) if per_run.get(f"{prefix}-{i:06d}", 0) != want
    ]
    if wrong:
        problems.append(f"{len(wrong)} runs without exactly {want} refund keys, e.g. {wrong[0]}")
    return problems


def check_runtime(max_steps: int, runs: int, warmups: int) -> list[str]:
    """Every run ended as workload.md §3 rule 3 says, and run 0 kept every byte."""
    want = workload.expected_result(max_steps)
    problems = []
    with pg.connect() as conn:
        good = conn.execute(
            "SELECT count(*) FROM agents_turn WHERE status = 'succeeded' AND steps = %s"
            " AND input_tokens = %s AND output_tokens = %s",
            [want["step"], want["input_tokens"], want["output_tokens"]],
        ).fetchone()[0]
        if good != runs + warmups:
            problems.append(f"{good} of {runs + warmups} turns ended as expected")
        bad = conn.execute(
            "SELECT count(*) FROM (SELECT session_id FROM agents_message GROUP BY 1"
            " HAVING count(*) <> %s) x",
            [want["messages"]],
        ).fetchone()[0]
        if bad:
            problems.append(f"{bad} sessions without {want['messages']} transcript rows")
        rows = conn.execute(
            "SELECT m.role, m.content FROM agents_message m JOIN agents_session s"
            " ON s.id = m.session_id WHERE s.key = %s ORDER BY m.position",
            [workload.run_id(max_steps, 0)],
        ).fetchall()
    expected = workload.run_in_memory(0, max_steps)
    stored = [{"role": r, "content": c} for r, c in rows]
    if stored and stored[0]["content"] == [{"type": "text", "text": expected[0]["content"]}]:
        stored[0]["content"] = expected[0]["content"]  # the runtime stores text as a block
    for message in expected[1:]:
        message.pop("stop_reason", None)  # kept on the turn's events, not the transcript
        message.pop("usage", None)
    if stored != expected:
        problems.append("run 0's stored transcript differs from the workload's messages")
    return problems


# --- Engine, in-process --------------------------------------------------------------


def engine_row(max_steps: int, processes: int, runs: int, trials: int) -> Row:
    row = Row(f"engine {processes}p", max_steps, processes)
    for _ in range(trials):
        trial = measure(
            mode="engine",
            processes=processes,
            max_steps=max_steps,
            runs=runs,
            env=pg.worker_env(),
        )
        row.trials.append(trial)
        row.failures += check_refunds(trial, max_steps, f"run-{max_steps}", runs)
        row.failures += check_runtime(max_steps, runs, 2 * processes)
    return row


# --- Through Celery ------------------------------------------------------------------------


def start_celery_workers(count: int, env: dict[str, str], log_dir: Path) -> list[subprocess.Popen]:
    workers = []
    for n in range(count):
        log_path = log_dir / f"celery-{n}.log"
        args = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo"]
        args += ["--loglevel=INFO", "-n", f"bench{n}@%h", "--without-gossip"]
        args += ["--without-mingle", "--without-heartbeat", "--include", "bench.plugin"]
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=open(log_path, "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc.log_path = log_path
        workers.append(proc)
    deadline = time.monotonic() + 60
    for proc in workers:
        while b" ready." not in proc.log_path.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_processes(workers)
                raise RuntimeError(f"celery worker did not start:\n{proc.log_path.read_text()}")
            time.sleep(0.1)
    return workers


def stop_processes(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """SIGTERM (a Celery worker's warm shutdown), then SIGKILL after the grace."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def celery_row(max_steps: int, workers: int, runs: int, trials: int) -> Row:
    row = Row(f"celery {workers}w", max_steps, workers, turns=True)
    report_url = pg.redis_url()
    env = pg.worker_env(BENCH_REPORT_REDIS_URL=report_url)
    for _ in range(trials):
        busy_before = pg.wait_quiet(QUIET_WAIT_S)
        pg.reset()
        pg.redis_flush()
        log_dir = Path(tempfile.mkdtemp(prefix="agentdesk-bench-celery-"))
        procs: list[subprocess.Popen] = []
        try:
            procs = start_celery_workers(workers, env, log_dir)
            # One client per worker, each with one run in flight at a time.
            trial = measure(
                mode="dispatch",
                processes=workers,
                max_steps=max_steps,
                runs=runs,
                env=env,
                extra_config={"report_redis_url": report_url},
                watch_pids=[p.pid for p in procs],
                reset=False,
            )
        finally:
            stop_processes(procs)
            shutil.rmtree(log_dir, ignore_errors=True)
        trial.extra["busy_before"] = busy_before
        row.trials.append(trial)
        row.failures += check_refunds(trial, max_steps, f"run-{max_steps}", runs)
        row.failures += check_runtime(max_steps, runs, 2 * workers)
    return row


# --- The real client path ---------------------------------------------------------------------

REAL_SUFFIX = " Please refund order ORD-{i:06d}."


def start_sandbox(data_dir: Path) -> tuple[subprocess.Popen, str]:
    log_path = data_dir / "sandbox.log"
    args = [sys.executable, "-m", "sandbox", "--host", "127.0.0.1", "--port", "0"]
    args += ["--data", str(data_dir / "sandbox.sqlite3")]
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        stdout=open(log_path, "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while True:
        match = re.search(r"sandbox: listening on (http://\S+)", log_path.read_text())
        if match:
            return proc, match.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_processes([proc])
            raise RuntimeError(f"sandbox did not start:\n{log_path.read_text()}")
        time.sleep(0.05)


def real_client_row(runs: int, trials: int) -> Row:
    """The anthropic SDK against the sandbox's Messages API at zero latency.

    The sandbox plays its own triage policy (lookup_customer, lookup_order,
    issue_refund, then a final answer: 4 model calls per run with these
    tools), not the workload's fake model; the tools are the same in-process
    fakes. Steps here are model calls, so the figure says what HTTP + SSE +
    the SDK cost per step next to the engine rows, not a like-for-like run.
    """
    row = Row("real client", None, 1)
    data_dir = Path(tempfile.mkdtemp(prefix="agentdesk-bench-sandbox-"))
    sandbox, url = start_sandbox(data_dir)
    env = pg.worker_env(
        AGENTDESK_MODEL_CLIENT="bench.plugin.TimedAnthropicModel", ANTHROPIC_BASE_URL=url
    )
    env.pop("ANTHROPIC_API_KEY", None)
    try:
        for _ in range(trials):
            trial = measure(
                mode="engine",
                processes=1,
                max_steps=40,  # the step budget; the sandbox decides how many are used
                runs=runs,
                env=env,
                extra_config={"profile": "bench_real", "ticket_suffix": REAL_SUFFIX},
                side_pids=[sandbox.pid],
                steps_per_run=4,
            )
            row.trials.append(trial)
            row.failures += _check_real(trial, runs)
    finally:
        stop_processes([sandbox])
        shutil.rmtree(data_dir, ignore_errors=True)
    sandbox_ms = row.median(lambda t: t.extra["side_cpu_s"] / t.steps) * 1000
    model_ms = row.median(lambda t: t.model_s / t.steps) * 1000
    row.note = (
        f"sandbox's policy, 4 model calls/run; in the model client {model_ms:.1f} ms/call;"
        f" sandbox CPU {sandbox_ms:.2f} ms/call"
    )
    return row


def _check_real(trial: Trial, runs: int) -> list[str]:
    with pg.connect() as conn:
        steps = conn.execute(
            "SELECT t.steps, count(*) FROM agents_turn t JOIN agents_session s ON s.id = t.session_id"
            " WHERE t.status = 'succeeded' AND s.key LIKE 'real-0%%' GROUP BY 1"
        ).fetchall()
    problems = []
    if steps != [(4, runs)]:
        problems.append(f"real client runs: (model calls, runs) = {steps}, expected [(4, {runs})]")
    twice = [k for k, n in trial.extra["refunds"].items() if n != 1]
    if twice or len(trial.extra["refunds"]) != runs:
        problems.append(
            f"real client refunds: {len(trial.extra['refunds'])} keys, {len(twice)} repeated"
        )
    return problems


# --- The floor -------------------------------------------------------------------------------------


def floor_row(max_steps: int, processes: int, runs: int, trials: int) -> Row:
    row = Row(f"floor {processes}p", max_steps, processes, note="psycopg, 1 INSERT/step")
    for _ in range(trials):
        trial = measure(
            mode="floor", processes=processes, max_steps=max_steps, runs=runs, env=pg.worker_env()
        )
        row.trials.append(trial)
        with pg.connect() as conn:
            count = conn.execute("SELECT count(*) FROM bench_floor WHERE step > 0").fetchone()[0]
        want = (runs + 2 * processes) * max_steps
        if count != want:
            row.failures.append(f"floor: {count} rows, expected {want}")
    return row


def pgbench_row(clients: int, seconds: int, trials: int) -> Row:
    row = Row(f"pgbench -c {clients}", None, clients, note="-b simple-update, scale 1")
    url = urlsplit(pg.sibling_url(pg.PGBENCH_DB))
    args = ["-h", url.hostname or "127.0.0.1", "-p", str(url.port or 5432)]
    args += ["-U", url.username or "postgres"]
    env = dict(os.environ)
    if url.password:
        env["PGPASSWORD"] = url.password
    for _ in range(trials):
        busy_before = pg.wait_quiet(QUIET_WAIT_S)
        with pg.connect(pg.sibling_url(pg.PGBENCH_DB)) as conn:
            conn.execute("CHECKPOINT")
            before = pg.snapshot(conn, [])
            done = subprocess.run(
                ["pgbench", *args, "-n", "-b", "simple-update", "-c", str(clients)]
                + ["-j", str(clients), "-T", str(seconds), pg.PGBENCH_DB],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            after = pg.snapshot(conn, [])
            wal = pg.wal_between(conn, before.lsn, after.lsn)
        tps = float(re.search(r"tps = ([\d.]+) \(without initial", done.stdout).group(1))
        count = int(re.search(r"actually processed: (\d+)", done.stdout).group(1))
        trial = Trial(
            steps=count,
            runs=count,
            wall_s=count / tps,
            wal_bytes=wal.wal_bytes,
            commits=wal.commits,
            db_wal_bytes=wal.db_bytes,
            db_commits=wal.db_commits,
            fpi_bytes=wal.fpi_bytes,
            machine_s=after.machine_busy_s - before.machine_busy_s,
        )
        trial.cpu_s = float("nan")
        trial.extra["busy_before"] = busy_before
        row.trials.append(trial)
    return row


def pgbench_init() -> None:
    pg.create_database(pg.PGBENCH_DB)
    url = urlsplit(pg.sibling_url(pg.PGBENCH_DB))
    env = dict(os.environ)
    if url.password:
        env["PGPASSWORD"] = url.password
    subprocess.run(
        ["pgbench", "-h", url.hostname or "127.0.0.1", "-p", str(url.port or 5432)]
        + ["-U", url.username or "postgres", "-i", "-q", "-s", "1", pg.PGBENCH_DB],
        env=env,
        check=True,
        capture_output=True,
    )
    with pg.connect(pg.sibling_url(pg.PGBENCH_DB)) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")


# --- `python -m bench.rows`: issue 28's ratio alone --------------------------------------------


def main() -> None:
    """The engine 1p and floor 1p rows at S = 50, alternated BENCH_TRIALS times
    (default 3), each trial's ratio and the medians': the engine ÷ floor figure
    without the rest of the suite."""
    import statistics

    trials = int(os.environ.get("BENCH_TRIALS", "3"))
    runs = int(os.environ.get("BENCH_R50", "80"))
    floor_runs = int(os.environ.get("BENCH_FLOOR_RUNS", "400"))
    pg.prepare()
    engine, floor = Row("engine 1p", 50, 1), Row("floor 1p", 50, 1)
    for n in range(trials):
        e, f = engine_row(50, 1, runs, 1), floor_row(50, 1, floor_runs, 1)
        engine.trials += e.trials
        floor.trials += f.trials
        engine.failures += e.failures + f.failures
        et, ft = e.trials[-1], f.trials[-1]
        print(
            f"trial {n + 1}: engine {et.steps_s:,.0f} steps/s ({et.cpu_s / et.steps * 1000:.3f} ms"
            f" CPU/step), floor {ft.steps_s:,.0f} steps/s, ratio {et.steps_s / ft.steps_s:.3f};"
            f" load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    cpu = statistics.median(t.cpu_s / t.steps * 1000 for t in engine.trials)
    print(
        f"rows: engine_1p_steps_s={engine.steps_s:.0f} floor_1p_steps_s={floor.steps_s:.0f}"
        f" ratio_engine_floor={engine.steps_s / floor.steps_s:.3f} engine_cpu_ms_step={cpu:.3f}"
    )
    if engine.failures:
        print("CHECKS FAILED:\n" + "\n".join(f"  {f}" for f in engine.failures))
        sys.exit(1)


if __name__ == "__main__":
    with pg.exclusive("bench.rows"):
        main()
