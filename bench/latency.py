"""A burst of tickets at a real model's pace: makespan against the floor.

    python -m bench.latency [--tickets 50,200,500] [--latency-ms 2000] [--workers 1]

Method
------
- A database of its own (`agentdesk_latency` on the server of
  BENCH_DATABASE_URL / DATABASE_URL), migrated, dropped at the end; a Redis
  db of its own (BENCH_REDIS_URL's server, db 14) for the broker and the
  channel layer.
- The sandbox answers every model call after --latency-ms (its time to
  first token, POST /_model_pace); tool calls go to its helpdesk at once.
- --workers real `celery worker` processes in the default mode (a thread
  pool of AGENTDESK_WORKER_SLOTS slots, Django's connection pool), nothing
  else: no beat, no Daphne.
- For each N: N "where is my order" tickets are opened in the sandbox, then
  their N first messages posted at once through agents.services.message_post
  (what the webhook does) from 8 threads, as Daphne's request threads would
  take a burst of webhooks; t0 is the first post. A ticket's time is its
  turn's finished_at - t0. Makespan = the last one.
- The floor is what one ticket takes alone: model calls per ticket (counted
  at the sandbox) x latency. Also measured: peak RSS of each worker process
  (/proc) and its growth over the idle worker divided by N, the peak of
  Postgres connections held by the workers (pg_stat_activity, by pid), and
  the workers' CPU per step.

Prints a table and a final line
`latency: makespan_x_floor_200=... makespan_x_floor_500=... {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DBNAME = "agentdesk_latency"
POSTERS = 8  # threads posting the burst's first messages
LOOKUPS = [  # (order, customer) from sandbox/seed.py
    ("ORD-1002", "alice.martin@example.com"),
    ("ORD-1007", "dana.kowalski@example.com"),
    ("ORD-1012", "farid.haddad@example.org"),
    ("ORD-1014", "grace.liu@example.com"),
]


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def bench_redis_url() -> str:
    """The benchmarks' Redis: BENCH_REDIS_URL, else db 14 on REDIS_URL's server."""
    default = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    return _with_db(os.environ.get("BENCH_REDIS_URL") or default, "14")


def _server_url() -> str:
    return os.environ.get("BENCH_DATABASE_URL") or os.environ.get(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
    )


def _admin_sql(*statements: str) -> None:
    import psycopg

    with psycopg.connect(_with_db(_server_url(), "postgres"), autocommit=True) as admin:
        for sql in statements:
            admin.execute(sql)


class Proc:
    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        self.popen = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def wait_for_log(self, pattern: str, timeout: float = 60) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_path.read_text()[-2000:]}")
            match = re.search(pattern, self.log_path.read_text(errors="replace"))
            if match:
                return match
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: no {pattern!r} within {timeout}s")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._log.close()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    """CPU seconds the whole machine spent not idle (all cores, /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Sampler:
    """Every 50 ms: each worker's RSS, and the connections the workers hold."""

    def __init__(self, pids: list[int], dsn: str) -> None:
        import psycopg

        self.pids = pids
        self.peak_rss = {pid: 0 for pid in pids}
        self.peak_conns = {pid: 0 for pid in pids}
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        names = [f"agentdesk pid={pid}" for pid in self.pids]
        while not self._stop.wait(0.05):
            rows = self._conn.execute(
                "SELECT application_name, count(*) FROM pg_stat_activity "
                "WHERE application_name = ANY(%s) GROUP BY 1",
                [names],
            ).fetchall()
            counts = {int(name.split("=")[1]): n for name, n in rows}
            for pid in self.pids:
                self.peak_conns[pid] = max(self.peak_conns[pid], counts.get(pid, 0))
                self.peak_rss[pid] = max(self.peak_rss[pid], _rss_kb(pid))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._conn.close()


def turn_times(keys: list[str]) -> list[tuple[str, float, float, float]]:
    """(session key, accepted, first claimed, finished) of each session's
    first turn that has finished, as time.time() values."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.key, extract(epoch FROM t.created_at), extract(epoch FROM t.started_at),"
            " extract(epoch FROM t.finished_at) FROM agents_turn t"
            " JOIN agents_session s ON s.id = t.session_id"
            " WHERE t.number = 1 AND t.finished_at IS NOT NULL AND s.key = ANY(%s)",
            [keys],
        )
        return [(k, float(a), float(b), float(c)) for k, a, b, c in cursor.fetchall()]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * (len(ordered) - 1) + 0.5))] if ordered else 0.0


def lags(times: list[tuple[str, float, float, float]]) -> dict:
    """p50 / p95 s of accepted -> first claimed (waiting for a slot and its
    trigger) and first claimed -> finished (running)."""
    start = [b - a for _, a, b, _ in times]
    run = [c - b for _, _, b, c in times]
    return {
        "start_p50_s": round(pct(start, 0.5), 2),
        "start_p95_s": round(pct(start, 0.95), 2),
        "run_p50_s": round(pct(run, 0.5), 2),
        "run_p95_s": round(pct(run, 0.95), 2),
    }


def _post(message_post, key: str, text: str) -> None:
    from django.db import connection

    try:
        message_post(key=key, text=text)
    finally:
        connection.close()  # back to this process's pool


def burst(
    n: int, latency_ms: int, sandbox: Proc, sandbox_url: str, workers: list[Proc], dsn: str
) -> dict:
    import requests
    from django.db import connection

    from agents.models import Event, Session, Turn
    from agents.services import message_post

    requests.post(f"{sandbox_url}/_reset", json={"seed_demo": True}, timeout=10)
    requests.post(
        f"{sandbox_url}/_model_pace", json={"ttft_ms": latency_ms, "tokens_per_s": 0}, timeout=10
    )
    with connection.cursor() as cursor:  # a clean slate for every N (ticket ids restart)
        cursor.execute(
            "SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables "
            "WHERE schemaname = 'public' AND (tablename LIKE 'agents\\_%%' "
            "OR tablename LIKE 'approvals\\_%%')"
        )
        cursor.execute(f"TRUNCATE {cursor.fetchone()[0]} CASCADE")
    keys, texts = [], []
    for i in range(n):
        order, email = LOOKUPS[i % len(LOOKUPS)]
        body = f"Hi, could you tell me where order {order} is? Thanks ({i})"
        ticket = requests.post(
            f"{sandbox_url}/helpdesk/tickets",
            json={"customer_email": email, "subject": "Where is it?", "body": body},
            timeout=10,
        ).json()
        keys.append(f"ticket:{ticket['id']}")
        texts.append(f"From {email}: {body}")
    pids = [w.popen.pid for w in workers]
    idle_rss = {pid: _rss_kb(pid) for pid in pids}
    cpu_before = sum(_cpu_s(pid) for pid in pids)
    sandbox_before, machine_before = _cpu_s(sandbox.popen.pid), _machine_busy_s()
    sampler = Sampler(pids, dsn)
    t0 = time.time()
    # Posted from POSTERS threads at once, as Daphne's request threads would
    # take a burst of webhooks; each thread gives its connection back after.
    with ThreadPoolExecutor(POSTERS) as posters:
        list(posters.map(lambda kt: _post(message_post, *kt), zip(keys, texts, strict=True)))
    posted_s = time.time() - t0
    sessions = list(Session.objects.filter(key__in=keys).values_list("id", flat=True))
    deadline = time.monotonic() + max(120, n * 2)
    while time.monotonic() < deadline:
        done = Turn.objects.filter(session_id__in=sessions, status__in=Turn.TERMINAL).count()
        if done == n:
            break
        time.sleep(0.1)
    sampler.stop()
    cpu_s = sum(_cpu_s(pid) for pid in pids) - cpu_before
    sandbox_cpu_s = _cpu_s(sandbox.popen.pid) - sandbox_before
    machine_cpu_s = _machine_busy_s() - machine_before
    turns = list(Turn.objects.filter(session_id__in=sessions).values_list("status", "finished_at"))
    finished = [f.timestamp() - t0 for s, f in turns if f is not None]
    statuses = {s for s, _ in turns}
    stats = requests.get(f"{sandbox_url}/_stats", timeout=10).json()
    model_calls = stats["model_requests"]["total"]
    steps = Event.objects.filter(
        session_id__in=sessions, kind__in=["model.replied", "tool.finished"]
    ).count()
    per_ticket = model_calls / n
    floor = per_ticket * latency_ms / 1000
    makespan = max(finished) if finished else float("nan")
    growth = sum(max(0, sampler.peak_rss[p] - idle_rss[p]) for p in pids)
    return {
        **lags(turn_times(keys)),
        "tickets": n,
        "done": len(finished),
        "statuses": sorted(statuses),
        "model_calls_per_ticket": round(per_ticket, 2),
        "floor_s": round(floor, 2),
        "makespan_s": round(makespan, 2),
        "x_floor": round(makespan / floor, 2) if floor else None,
        "p50_s": round(statistics.median(finished), 2),
        "p95_s": round(sorted(finished)[int(0.95 * (len(finished) - 1))], 2),
        "post_s": round(posted_s, 2),
        "peak_rss_mb": [round(sampler.peak_rss[p] / 1024, 1) for p in pids],
        "kb_per_session": round(growth / n, 1),
        "peak_pg_conns": [sampler.peak_conns[p] for p in pids],
        "steps": steps,
        "cpu_ms_per_step": round(cpu_s * 1000 / max(steps, 1), 2),
        "steps_per_cpu_s": round(steps / cpu_s, 1) if cpu_s else None,
        # Where the machine's CPU went during the burst (all cores, seconds):
        # the workers, the sandbox (the stand-in for the outside world), and
        # the rest (Postgres, Redis, this process posting, anything else).
        "cpu_s": {
            "workers": round(cpu_s, 1),
            "sandbox": round(sandbox_cpu_s, 1),
            "rest": round(machine_cpu_s - cpu_s - sandbox_cpu_s, 1),
            "cores_busy": round(machine_cpu_s / (max(finished) if finished else 1), 2),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tickets", default="50,200,500")
    parser.add_argument("--latency-ms", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--slots", type=int, default=0, help="per worker (0: the largest N)")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the processes' logs (INFO) and say where"
    )
    args = parser.parse_args()
    sizes = [int(x) for x in args.tickets.split(",")]
    slots = args.slots or max(sizes)
    redis = bench_redis_url()
    database_url = _with_db(_server_url(), DBNAME)
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "LOG_LEVEL": "INFO" if args.keep_logs else "WARNING",
        "PYTHONPATH": str(ROOT),
        "AGENTDESK_WORKER_SLOTS": str(slots),
    }
    _admin_sql(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)', f'CREATE DATABASE "{DBNAME}"')
    log_dir = Path(tempfile.mkdtemp(prefix="agentdesk-bench-latency-"))
    procs: list[Proc] = []
    results = []
    try:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        import redis as redis_lib

        redis_lib.Redis.from_url(redis).flushdb()
        sandbox = Proc(
            "sandbox",
            [sys.executable, "-m", "sandbox", "--port", "0", "--data", str(log_dir / "sb.db")],
            env,
            log_dir,
        )
        procs.append(sandbox)
        sandbox_url = sandbox.wait_for_log(r"sandbox: listening on (http://\S+)").group(1)
        env.update(SANDBOX_URL=sandbox_url, AGENTDESK_SWEEP_INTERVAL_S="2")
        workers = []
        for i in range(args.workers):
            worker = Proc(
                f"worker{i + 1}",
                [sys.executable, "-m", "celery", "-A", "config", "worker", "-n", f"w{i}@%h"]
                + ["--loglevel=INFO", "--without-gossip", "--without-mingle"],
                env,
                log_dir,
            )
            worker.wait_for_log(r"\bready\.")
            workers.append(worker)
            procs.append(worker)
        os.environ.update(env)
        import django

        django.setup()
        burst(
            5, 0, sandbox, sandbox_url, workers, database_url
        )  # warm: imports, the pool, prepared plans
        for n in sizes:
            print(f"[latency] N={n} ...", file=sys.stderr, flush=True)
            results.append(burst(n, args.latency_ms, sandbox, sandbox_url, workers, database_url))
    finally:
        for proc in reversed(procs):
            proc.stop()
        from django.db import connections

        connections.close_all()
        _admin_sql(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)')
        if args.keep_logs:
            print(f"[latency] logs kept in {log_dir}", file=sys.stderr)
        else:
            for path in log_dir.iterdir():
                path.unlink()
            log_dir.rmdir()
    _print(results, args)
    return 0


def _print(results: list[dict], args: argparse.Namespace) -> None:
    print(
        f"\nA burst of 'where is my order' tickets, model latency {args.latency_ms} ms a call,"
        f" {args.workers} worker process(es), {os.cpu_count()} cores"
    )
    head = (
        f"{'N':>5} {'calls/t':>7} {'floor s':>7} {'makespan':>8} {'x floor':>7} {'p50 s':>6}"
        f" {'p95 s':>6} {'RSS MB':>9} {'KB/sess':>7} {'PG conns':>8} {'CPU ms/step':>11}"
    )
    print(head)
    for r in results:
        rss = "+".join(f"{m:g}" for m in r["peak_rss_mb"])
        conns = "+".join(str(c) for c in r["peak_pg_conns"])
        print(
            f"{r['tickets']:>5} {r['model_calls_per_ticket']:>7} {r['floor_s']:>7} "
            f"{r['makespan_s']:>8} {r['x_floor']:>7} {r['p50_s']:>6} {r['p95_s']:>6} "
            f"{rss:>9} {r['kb_per_session']:>7} {conns:>8} {r['cpu_ms_per_step']:>11}"
        )
        cpu = r["cpu_s"]
        print(
            f"      CPU s: workers {cpu['workers']}, sandbox {cpu['sandbox']}, rest {cpu['rest']};"
            f" cores busy {cpu['cores_busy']} of {os.cpu_count()}; posting took {r['post_s']} s"
        )
        print(
            f"      accepted -> first claimed p50 {r['start_p50_s']} s, p95 {r['start_p95_s']} s;"
            f" claimed -> done p50 {r['run_p50_s']} s, p95 {r['run_p95_s']} s"
        )
        if r["done"] != r["tickets"] or r["statuses"] != ["succeeded"]:
            print(f"      ! {r['done']} of {r['tickets']} ended; statuses {r['statuses']}")
    figures = {f"x_floor_{r['tickets']}": r["x_floor"] for r in results}
    line = " ".join(f"makespan_{k}={v}" for k, v in figures.items())
    print(f"latency: {line} {json.dumps(results)}")


if __name__ == "__main__":
    sys.exit(main())
