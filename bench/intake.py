"""Getting tickets in: webhook intake, and bursts through the sandbox.

    python -m bench.intake [--web N] [--workers N] [--quick]
        [--intake 1,32] [--in-flight 1000] [--bursts 2000@10000,200@2000]

Method
------
- `make run`'s layout and mode (DEBUG off), on a database of its own (`agentdesk_intakebench` on
  BENCH_DATABASE_URL's / DATABASE_URL's server, migrated, dropped at the end)
  and Redis db 14 of BENCH_REDIS_URL's / REDIS_URL's server: the sandbox,
  --web Daphne processes on one socket (`python -m config.web`; default as
  `make run` starts them), --workers Celery workers (default as `make run`:
  config/sizing.py), every process on a pool of 4 connections.
- Intake: C clients (threads, one keep-alive connection each) POST signed
  `ticket.created` webhooks straight to /api/inbound/helpdesk, 40 per client
  from one client and 16 per client from 32, after a short warm-up; a 202 is
  an accepted ticket. Accepted/s = accepted / (last answer - first send);
  latency is each request's round trip. Measured idle (only the turns these
  tickets start) and again with --in-flight sessions running (started through
  the sandbox first, at 30 s a model call so they stay in flight).
- Burst N@ms: the sandbox answers each model call after ms; N tickets are
  opened in the sandbox's helpdesk by 32 clients at once (the sandbox sends
  each one's webhook to us, as in production). A ticket's sojourn is its
  turn's finished_at - the moment its ticket was opened; the last answer is
  the last finished_at - the first opening. Floor = model calls per ticket x
  latency. Peak Postgres connections: all of this database's, every 50 ms.
- A burst is a batch: per ticket, the advance tasks the workers received
  (their logs), the claims (the sessions' fences), the sessions the
  sweepers re-enqueued, the model calls, and at the sandbox's helpdesk the
  replies and the tickets answered twice; and the backends waiting on a
  lock (pg_stat_activity every 50 ms: peak and mean), where a row every
  ticket's work takes would show.
- CPU per accepted ticket (ms), for each intake row: the CPU time the web
  processes, the workers, the sandbox and this client (its sending threads)
  spent during the row, over the tickets accepted. On a shared machine the
  rates move with the load; these move much less, and say which process
  the time goes to.

Prints a table and a last line `intake: {json}`.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.latency import (  # noqa: E402
    LOOKUPS,
    Proc,
    _admin_sql,
    _server_url,
    _with_db,
    bench_redis_url,
    lags,
    pct,
    turn_times,
)
from config import sizing  # noqa: E402
from config.security import use_local_defaults  # noqa: E402

DBNAME = "agentdesk_intakebench"
SECRET = "whsec_bench_intake"
CLIENTS_BURST = 32


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sign(body: bytes) -> str:
    t = int(time.time())
    mac = hmac.new(SECRET.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


class CpuMeter:
    """CPU seconds (user + system) of each group of the layout's processes,
    children included (config.web's Daphne processes), of the PostgreSQL and
    Redis servers (every process by that name: run nothing else on them
    meanwhile; a backend that exits takes its time with it), and of this one."""

    SERVERS = {"postgres": ("postgres",), "redis": ("redis-server",)}

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups

    def read(self) -> dict[str, float]:
        import psutil

        out: dict[str, float] = {name: 0.0 for name in self.SERVERS}
        for proc in psutil.process_iter(["name", "cpu_times"]):
            for name, names in self.SERVERS.items():
                if proc.info["name"] in names and proc.info["cpu_times"] is not None:
                    out[name] += proc.info["cpu_times"].user + proc.info["cpu_times"].system
        for name, pids in self.groups.items():
            total = 0.0
            for pid in pids:
                try:
                    root = psutil.Process(pid)
                    for proc in [root, *root.children(recursive=True)]:
                        times = proc.cpu_times()
                        total += times.user + times.system
                except psutil.Error:
                    pass
            out[name] = total
        own = psutil.Process().cpu_times()
        out["client"] = own.user + own.system
        return out


def cpu_per_ticket(before: dict[str, float], after: dict[str, float], n: int) -> dict:
    """ms of CPU per accepted ticket, by process group."""
    return {k: round((after[k] - before[k]) * 1000 / max(1, n), 2) for k in before}


CPU: CpuMeter | None = None
CPU_GROUPS = ("web", "workers", "sandbox", "postgres", "redis", "client")
WORKER_LOGS: list[Path] = []
SANDBOX_DB: Path | None = None


class WorkerLogs:
    """What the workers logged since it was made: the advance tasks they
    received, and the sessions their sweepers re-enqueued."""

    def __init__(self) -> None:
        self.offsets = {p: p.stat().st_size for p in WORKER_LOGS}

    def counts(self) -> tuple[int, int]:
        import re

        tasks = swept = 0
        for path, offset in self.offsets.items():
            with open(path, "rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
            # Celery logs a task twice ("... received", "... succeeded in"):
            # the first line only.
            tasks += len(re.findall(r"Task agents\.advance_session\[[^\]]+\] received", text))
            swept += sum(int(n) for n in re.findall(r"sweeper re-enqueued (\d+) session", text))
        return tasks, swept


def _replies(ticket_ids: list[int]) -> tuple[int, int]:
    """(tickets answered more than once, replies in all) at the sandbox's helpdesk."""
    import sqlite3

    if SANDBOX_DB is None:
        return 0, 0
    conn = sqlite3.connect(f"file:{SANDBOX_DB}?mode=ro", uri=True, timeout=30)
    try:
        per_ticket = conn.execute(
            "SELECT ticket_id, count(*) FROM ticket_messages WHERE kind = 'reply'"
            " GROUP BY ticket_id"
        ).fetchall()
    finally:
        conn.close()
    wanted = set(ticket_ids)
    counts = [n for tid, n in per_ticket if tid in wanted]
    return sum(1 for n in counts if n > 1), sum(counts)


def _claims(keys: list[str]) -> tuple[int, int]:
    """(claims in all, the most of one session): each claim bumps its fence."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(r.fence), 0), coalesce(max(r.fence), 0)"
            " FROM agents_sessionruntime r JOIN agents_session s ON s.id = r.session_id"
            " WHERE s.key = ANY(%s)",
            [keys],
        )
        total, most = cursor.fetchone()
    return int(total), int(most)


class PgPeak:
    """Every 50 ms: the connections to the bench database (all processes),
    and how many of them wait on a lock (a row every ticket's work takes,
    a hot row, shows here as waiters)."""

    def __init__(self, dsn: str) -> None:
        import psycopg

        self.peak = 0
        self.lock_waits: list[int] = []
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            n, waiting = self._conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock')"
                " FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"
            ).fetchone()
            self.peak = max(self.peak, n)
            self.lock_waits.append(waiting)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        self._conn.close()
        return self.peak


# --- Intake: signed webhooks straight to the desk ----------------------------------------


def _webhook(ticket_id: int) -> bytes:
    order, email = LOOKUPS[ticket_id % len(LOOKUPS)]
    body = f"Hi, could you tell me where order {order} is? Thanks ({ticket_id})"
    ticket = {"id": ticket_id, "subject": "Where is it?", "customer_email": email, "body": body}
    ticket.update(customer_name="Bench", order_id=order, status="open", priority="normal")
    event = {"id": f"evt_bench_{ticket_id}", "type": "ticket.created", "created": int(time.time())}
    event.update(ticket=ticket, message={"body": body})
    return json.dumps(event).encode()


def intake(port: int, clients: int, per_client: int, first_id: int) -> dict:
    """`clients` threads, each posting `per_client` webhooks on its own
    keep-alive connection; released together."""
    barrier = threading.Barrier(clients)
    results: list[tuple[float, float, int]] = []  # (sent, answered, status)
    lock = threading.Lock()

    def client(c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        bodies = [_webhook(first_id + c * per_client + i) for i in range(per_client)]
        mine = []
        barrier.wait()
        for body in bodies:
            headers = {"Content-Type": "application/json", "Agentdesk-Signature": _sign(body)}
            sent = time.perf_counter()
            try:
                conn.request("POST", "/api/inbound/helpdesk", body, headers)
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                status = 0
            mine.append((sent, time.perf_counter(), status))
        conn.close()
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    cpu_before = CPU.read() if CPU else {}
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    accepted = [r for r in results if r[2] == 202]
    cpu = cpu_per_ticket(cpu_before, CPU.read(), len(accepted)) if CPU else {}
    span = max(r[1] for r in results) - min(r[0] for r in results)
    latencies = [(r[1] - r[0]) * 1000 for r in results]
    return {
        "clients": clients,
        "requests": len(results),
        "accepted": len(accepted),
        "other": sorted({r[2] for r in results if r[2] != 202}),
        "accepted_per_s": round(len(accepted) / span, 1),
        "p50_ms": round(pct(latencies, 0.5), 1),
        "p95_ms": round(pct(latencies, 0.95), 1),
        "cpu_ms": cpu,
    }


# --- Bursts through the sandbox ------------------------------------------------------------


def open_tickets(sandbox_url: str, n: int, clients: int) -> dict[int, float]:
    """N tickets opened in the sandbox by `clients` threads at once: ticket id
    -> when (time.time()) it was opened."""
    import requests

    def one(i: int) -> tuple[int, float]:
        order, email = LOOKUPS[i % len(LOOKUPS)]
        body = f"Hi, could you tell me where order {order} is? Thanks ({i})"
        opened = time.time()
        ticket = session().post(
            f"{sandbox_url}/helpdesk/tickets",
            json={"customer_email": email, "subject": "Where is it?", "body": body},
            timeout=30,
        )
        return ticket.json()["id"], opened

    local = threading.local()

    def session() -> requests.Session:
        if not hasattr(local, "s"):
            local.s = requests.Session()
        return local.s

    with ThreadPoolExecutor(clients) as pool:
        return dict(pool.map(one, range(n)))


def wait_finished(keys: list[str], timeout: float, what: str = "finished") -> dict[str, float]:
    """session key -> its first turn's finished_at (time.time()), once all have."""
    from django.db import connection

    deadline = time.monotonic() + timeout
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT s.key, extract(epoch FROM t.finished_at) FROM agents_turn t"
                " JOIN agents_session s ON s.id = t.session_id"
                " WHERE t.number = 1 AND t.finished_at IS NOT NULL AND s.key = ANY(%s)",
                [keys],
            )
            done = {k: float(f) for k, f in cursor.fetchall()}
        if len(done) == len(keys) or time.monotonic() > deadline:
            if len(done) != len(keys):
                print(f"[intake] {len(keys) - len(done)} not {what} in time", file=sys.stderr)
            return done
        time.sleep(0.25)


def wait_running(keys: list[str], timeout: float) -> None:
    from django.db import connection

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM agents_turn t JOIN agents_session s ON s.id = t.session_id"
                " WHERE t.number = 1 AND s.key = ANY(%s) AND t.status <> 'accepted'",
                [keys],
            )
            if cursor.fetchone()[0] == len(keys):
                return
        time.sleep(0.25)


def stages(keys: list[str], opened: dict[int, float]) -> dict:
    """Where a burst ticket's time went, p50 / p95 in seconds: opened at the
    sandbox -> its turn accepted here (the webhook), then bench.latency's
    lags (accepted -> first claimed, claimed -> finished); and the span from
    the first turn accepted to the last."""
    times = turn_times(keys)
    if not times:
        return {}
    accept = [a - opened[int(key.split(":")[1])] for key, a, _, _ in times]
    out = {
        "accept_p50_s": round(pct(accept, 0.5), 2),
        "accept_p95_s": round(pct(accept, 0.95), 2),
    }
    out.update(lags(times))
    out["accept_span_s"] = round(max(t[1] for t in times) - min(t[1] for t in times), 2)
    return out


def burst(n: int, latency_ms: int, sandbox_url: str, dsn: str) -> dict:
    import requests

    _reset(sandbox_url, latency_ms)
    peak = PgPeak(dsn)
    logs = WorkerLogs()
    cpu_before = CPU.read() if CPU else {}
    t0 = time.time()
    opened = open_tickets(sandbox_url, n, CLIENTS_BURST)
    opened_s = time.time() - t0
    keys = [f"ticket:{tid}" for tid in opened]
    finished = wait_finished(keys, timeout=max(180, 6 * latency_ms / 1000 * 5 + n * 0.2))
    conns = peak.stop()
    cpu = cpu_per_ticket(cpu_before, CPU.read(), n) if CPU else {}
    tasks, swept = logs.counts()
    claims, most_claims = _claims(keys)
    twice, replies = _replies(list(opened))
    stats = requests.get(f"{sandbox_url}/_stats", timeout=10).json()
    per_ticket = stats["model_requests"]["total"] / n
    floor = per_ticket * latency_ms / 1000
    sojourn = [
        finished[f"ticket:{tid}"] - at for tid, at in opened.items() if f"ticket:{tid}" in finished
    ]
    last = max(finished.values()) - t0 if finished else float("nan")
    return {
        "tickets": n,
        "latency_ms": latency_ms,
        "done": len(finished),
        "floor_s": round(floor, 2),
        "opened_s": round(opened_s, 2),
        "last_answer_s": round(last, 2),
        "last_x_floor": round(last / floor, 2) if floor else None,
        "sojourn_p50_x": round(statistics.median(sojourn) / floor, 2) if sojourn else None,
        "sojourn_p95_x": round(pct(sojourn, 0.95) / floor, 2) if sojourn else None,
        "peak_pg_conns": conns,
        # A burst is a batch: per ticket, these do not grow with the burst.
        "tasks_per_ticket": round(tasks / n, 2),
        "claims_per_ticket": round(claims / n, 2),
        "most_claims": most_claims,
        "swept": swept,
        "model_calls_per_ticket": round(per_ticket, 2),
        "replies": replies,
        "answered_twice": twice,
        "lock_waiters_peak": max(peak.lock_waits, default=0),
        "lock_waiters_mean": round(statistics.fmean(peak.lock_waits), 2) if peak.lock_waits else 0,
        "cpu_ms": cpu,
        "stages": stages(keys, opened),
    }


def drain(sandbox_url: str, timeout: float = 180) -> None:
    """Let every open turn finish (the model answers at once), so the next
    phase starts with nothing in flight."""
    import requests
    from django.db import connection

    requests.post(f"{sandbox_url}/_model_pace", json={"ttft_ms": 0, "tokens_per_s": 0}, timeout=10)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM agents_turn WHERE status IN"
                " ('accepted', 'running', 'resuming')"
            )
            if cursor.fetchone()[0] == 0:
                return
        time.sleep(0.5)
    print("[intake] turns still open after the drain", file=sys.stderr)


def _reset(sandbox_url: str, latency_ms: int) -> None:
    import requests
    from django.db import connection

    requests.post(f"{sandbox_url}/_reset", json={"seed_demo": True}, timeout=30)
    requests.post(
        f"{sandbox_url}/_model_pace", json={"ttft_ms": latency_ms, "tokens_per_s": 0}, timeout=10
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables "
            "WHERE schemaname = 'public' AND (tablename LIKE 'agents\\_%%' "
            "OR tablename LIKE 'approvals\\_%%' OR tablename LIKE 'api\\_%%')"
        )
        cursor.execute(f"TRUNCATE {cursor.fetchone()[0]} CASCADE")


# --- The layout ------------------------------------------------------------------------------


def start(
    args: argparse.Namespace, env: dict[str, str], log_dir: Path, procs: list[Proc]
) -> tuple[int, str]:
    """Start the layout; every process goes on `procs` as it starts (the
    caller stops them, also when a later one fails to start)."""
    web_port = _free_port()
    sandbox = Proc(
        "sandbox",
        [sys.executable, "-m", "sandbox", "--port", "0", "--data", str(log_dir / "sb.db")]
        + ["--webhook-url", f"http://127.0.0.1:{web_port}/api/inbound/helpdesk"]
        + ["--webhook-secret", SECRET],
        env,
        log_dir,
    )
    procs.append(sandbox)
    sandbox_url = sandbox.wait_for_log(r"sandbox: listening on (http://\S+)").group(1)
    global SANDBOX_DB
    SANDBOX_DB = log_dir / "sb.db"
    env.update(SANDBOX_URL=sandbox_url)
    if args.web:
        web = ["-m", "config.web", "--host", "127.0.0.1", "--port", str(web_port)]
        web += ["--processes", str(args.web)] if args.web > 0 else []
    else:  # the layout before config.web: one Daphne
        web = ["-m", "daphne", "-b", "127.0.0.1", "-p", str(web_port), "config.asgi:application"]
    procs.append(Proc("web", [sys.executable, *web], env, log_dir))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", web_port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    for i in range(args.workers):
        worker = Proc(
            f"worker{i + 1}",
            sizing.worker_command(  # at make run's priority
                [sys.executable, "-m", "celery", "-A", "config", "worker", "-n", f"w{i}@%h"]
                + ["--loglevel=INFO", "--without-gossip", "--without-mingle"]
            ),
            env,
            log_dir,
        )
        procs.append(worker)
    for worker in procs[2:]:
        worker.wait_for_log(r"\bready\.", timeout=300)
    global CPU
    WORKER_LOGS[:] = [p.log_path for p in procs[2:]]
    CPU = CpuMeter(
        {
            "web": [procs[1].popen.pid],
            "workers": [p.popen.pid for p in procs[2:]],
            "sandbox": [sandbox.popen.pid],
        }
    )
    return web_port, sandbox_url


def run(args: argparse.Namespace, sandbox_url: str, web_port: int, dsn: str) -> dict:
    out: dict = {"intake_idle": [], "intake_busy": [], "bursts": []}
    next_id = 10_000_000
    plan = [int(c) for c in args.intake.split(",") if c]
    if plan:
        _reset(sandbox_url, 30_000)  # the turns these start wait on the model meanwhile
        intake(web_port, 4, 5, next_id)  # warm: imports, pools, plans in every process
        next_id += 1000
        for clients in plan:
            per = 40 if clients == 1 else 16
            print(f"[intake] idle, {clients} client(s) ...", file=sys.stderr, flush=True)
            out["intake_idle"].append(intake(web_port, clients, per, next_id))
            next_id += 10_000
        drain(sandbox_url)
        if args.in_flight:
            print(f"[intake] {args.in_flight} in flight ...", file=sys.stderr, flush=True)
            _reset(sandbox_url, 30_000)
            try:
                opened = open_tickets(sandbox_url, args.in_flight, CLIENTS_BURST)
            except Exception as exc:  # noqa: BLE001 (a loaded machine: keep the other rows)
                print(f"[intake] opening the sessions in flight failed: {exc!r}", file=sys.stderr)
                out.setdefault("errors", []).append(f"in flight: {exc!r}")
                opened = {}
            wait_running([f"ticket:{t}" for t in opened], timeout=120)
            for clients in plan if opened else []:
                per = 40 if clients == 1 else 16
                print(f"[intake] busy, {clients} client(s) ...", file=sys.stderr, flush=True)
                row = intake(web_port, clients, per, next_id)
                out["intake_busy"].append(row)
                next_id += 10_000
            drain(sandbox_url)
    for spec in [b for b in args.bursts.split(",") if b]:
        n, ms = (int(x) for x in spec.split("@"))
        print(f"[intake] burst {n} at {ms} ms ...", file=sys.stderr, flush=True)
        try:
            out["bursts"].append(burst(n, ms, sandbox_url, dsn))
        except Exception as exc:  # noqa: BLE001 (a loaded machine: keep the other rows)
            print(f"[intake] burst {spec} failed: {exc!r}", file=sys.stderr)
            out.setdefault("errors", []).append(f"burst {spec}: {exc!r}")
        drain(sandbox_url)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--web", type=int, default=-1, help="Daphne processes (0: plain daphne)")
    parser.add_argument("--workers", type=int, default=sizing.worker_processes())
    parser.add_argument("--intake", default="1,32")
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--bursts", default="200@2000,2000@10000")
    parser.add_argument("--quick", action="store_true", help="smaller: 300 in flight, 200@2000")
    parser.add_argument(
        "--keep-db", action="store_true", help=f"leave {DBNAME} for a look afterwards"
    )
    args = parser.parse_args()
    if args.quick:
        args.in_flight, args.bursts = min(args.in_flight, 300), "200@2000"
    redis = bench_redis_url()
    dsn = _with_db(_server_url(), DBNAME)
    use_local_defaults()  # DEBUG off, as make run: secrets made up for this run
    env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "REDIS_URL": redis,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        "AGENTDESK_WEBHOOK_SECRET": SECRET,
        "AGENTDESK_DB_POOL_SIZE": "4",  # as make run
        "AGENTDESK_SWEEP_INTERVAL_S": "5",
    }
    _admin_sql(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)', f'CREATE DATABASE "{DBNAME}"')
    log_dir = Path(tempfile.mkdtemp(prefix="agentdesk-bench-intake-"))
    procs: list[Proc] = []
    try:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        import redis as redis_lib

        redis_lib.Redis.from_url(redis).flushdb()
        web_port, sandbox_url = start(args, env, log_dir, procs)
        os.environ.update(env)
        import django

        django.setup()
        results = run(args, sandbox_url, web_port, dsn)
    finally:
        for proc in reversed(procs):
            proc.stop()
        from django.db import connections

        connections.close_all()
        if args.keep_db:
            print(f"[intake] database {DBNAME} kept", file=sys.stderr)
        else:
            _admin_sql(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)')
        print(f"[intake] logs in {log_dir}", file=sys.stderr)
    _print(results, args)
    return 0


def _print(results: dict, args: argparse.Namespace) -> None:
    web = (
        "plain daphne"
        if args.web == 0
        else f"web processes: {args.web if args.web > 0 else 'default'}"
    )
    print(f"\nIntake ({web}; {args.workers} workers; {os.cpu_count()} cores)")
    print(
        f"{'':>22} {'clients':>7} {'accepted/s':>10} {'p50 ms':>7} {'p95 ms':>7} {'ok':>9}"
        f"   CPU ms per ticket: {'web':>5} {'workers':>7} {'sandbox':>7} {'client':>6}"
        f" {'pg':>5} {'redis':>5}"
    )
    for label, rows in (
        ("idle", results["intake_idle"]),
        (f"{args.in_flight} in flight", results["intake_busy"]),
    ):
        for r in rows:
            ok = f"{r['accepted']}/{r['requests']}"
            cpu = r.get("cpu_ms") or {}
            print(
                f"{'webhooks, ' + label:>22} {r['clients']:>7} {r['accepted_per_s']:>10}"
                f" {r['p50_ms']:>7} {r['p95_ms']:>7} {ok:>9}"
                f"   {'':>18} {cpu.get('web', ''):>5} {cpu.get('workers', ''):>7}"
                f" {cpu.get('sandbox', ''):>7} {cpu.get('client', ''):>6}"
                f" {cpu.get('postgres', ''):>5} {cpu.get('redis', ''):>5}"
            )
    if results["bursts"]:
        print(
            f"\n{'burst':>12} {'floor s':>7} {'opened s':>8} {'last s':>7} {'x floor':>7}"
            f" {'p50 x':>6} {'p95 x':>6} {'PG conns':>8}"
        )
        for b in results["bursts"]:
            label = f"{b['tickets']}@{b['latency_ms']}ms"
            print(
                f"{label:>12} {b['floor_s']:>7} {b['opened_s']:>8} {b['last_answer_s']:>7}"
                f" {b['last_x_floor']:>7} {b['sojourn_p50_x']:>6} {b['sojourn_p95_x']:>6}"
                f" {b['peak_pg_conns']:>8}"
            )
            if b["done"] != b["tickets"]:
                print(f"      ! {b['done']} of {b['tickets']} finished")
        print(
            f"\n{'burst':>12} {'tasks/t':>7} {'claims/t':>8} {'most':>4} {'swept':>5}"
            f" {'calls/t':>7} {'replies':>7} {'twice':>5} {'lock waiters peak/mean':>22}"
        )
        for b in results["bursts"]:
            label = f"{b['tickets']}@{b['latency_ms']}ms"
            waits = f"{b['lock_waiters_peak']}/{b['lock_waiters_mean']}"
            print(
                f"{label:>12} {b['tasks_per_ticket']:>7} {b['claims_per_ticket']:>8}"
                f" {b['most_claims']:>4} {b['swept']:>5} {b['model_calls_per_ticket']:>7}"
                f" {b['replies']:>7} {b['answered_twice']:>5} {waits:>22}"
            )
        print(f"\n{'burst':>12}   CPU ms per ticket: " + " ".join(f"{k:>8}" for k in CPU_GROUPS))
        for b in results["bursts"]:
            label = f"{b['tickets']}@{b['latency_ms']}ms"
            cpu = b.get("cpu_ms") or {}
            print(f"{label:>12}   {'':>18}" + " ".join(f"{cpu.get(k, ''):>8}" for k in CPU_GROUPS))
        print(
            f"\n{'burst':>12} {'accepted over s':>15}  p50 / p95 s: {'opened->accepted':>16}"
            f" {'accepted->claimed':>17} {'claimed->done':>13}"
        )
        for b in results["bursts"]:
            label = f"{b['tickets']}@{b['latency_ms']}ms"
            st = b.get("stages") or {}
            if not st:
                continue
            cols = [f"{st[f'{k}_p50_s']} / {st[f'{k}_p95_s']}" for k in ("accept", "start", "run")]
            print(
                f"{label:>12} {st['accept_span_s']:>15}  {'':>11} {cols[0]:>16} {cols[1]:>17}"
                f" {cols[2]:>13}"
            )
    print(f"intake: {json.dumps(results)}")


if __name__ == "__main__":
    sys.exit(main())
