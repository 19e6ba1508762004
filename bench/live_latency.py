"""From a step's commit to its event in a connected viewer: p50/p95 in ms.

    python bench/live_latency.py [--events 200] [--clients 1,100] [--interval-ms 25]

Method
------
- A database of its own (`agentdesk_livelatency` on the server of
  BENCH_DATABASE_URL / DATABASE_URL), migrated, dropped at the end; a Redis
  db of its own for the channel layer (BENCH_REDIS_URL, else db 15).
- A real Daphne process serves config.asgi:application, the production
  path: SameOriginValidator, the session cookie, SessionConsumer
  (permission check, replay by seq, shared rendering of the pushed
  fragments), channels_redis.
- The viewers are WebSocket clients (autobahn, in a separate process, so
  their work does not slow the producer): each connects with a logged-in
  user's session cookie, says `hello` with the current seq, and stamps
  `time.time()` when a frame carrying an event arrives (before parsing it).
  A frame carries the events and the re-rendered fragments (session head,
  the turn, the event's line), i.e. what a browser needs to show the step.
- The producer (this process) writes one event per transaction the way
  every runtime transition does (agents.events.append under the session
  lock, published by agents/events.py's publisher after commit), one every
  --interval-ms. Commit time: a transaction.on_commit hook registered
  before the event is appended runs first after COMMIT returns; it stamps
  `time.time()`. Both stamps come from the same machine's clock.
- Latency = arrival - commit, for every (event, viewer) pair: with 100
  viewers, 200 events give 20,000 samples. p50, p95, p99 and max.

This measures the whole live path after the commit: the publisher thread,
Redis, Daphne's consumers and rendering, the socket. All processes share
this machine's cores, so the figures include their contention; the load
average before and after is printed with the table.

Prints a table and a final line
`live_latency: p50_ms_1=… p95_ms_1=… p50_ms_100=… p95_ms_100=… {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DBNAME = "agentdesk_livelatency"


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _server_url() -> str:
    return os.environ.get("BENCH_DATABASE_URL") or os.environ.get(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
    )


def _env() -> dict[str, str]:
    redis = os.environ.get("BENCH_REDIS_URL") or _with_db(
        os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), "15"
    )
    return {
        **os.environ,
        "DATABASE_URL": _with_db(_server_url(), DBNAME),
        "REDIS_URL": redis,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }


def _admin_sql(*statements: str) -> None:
    import psycopg

    with psycopg.connect(_with_db(_server_url(), "postgres"), autocommit=True) as admin:
        for sql in statements:
            admin.execute(sql)


# --- The viewers (a child process) ----------------------------------------------------


def viewers(args: argparse.Namespace) -> None:
    """Connect N clients, print READY when all have caught up, record arrivals."""
    import asyncio

    from autobahn.asyncio.websocket import WebSocketClientFactory, WebSocketClientProtocol

    arrivals: list[list[tuple[int, float]]] = [[] for _ in range(args.n)]
    caught_up: set[int] = set()
    last = args.after + args.count
    done = asyncio.Event()

    class Viewer(WebSocketClientProtocol):
        index = 0

        def onOpen(self) -> None:  # noqa: N802 (autobahn's name)
            self.sendMessage(json.dumps({"type": "hello", "after": args.after}).encode())

        def onMessage(self, payload: bytes, is_binary: bool) -> None:  # noqa: N802
            now = time.time()
            message = json.loads(payload)
            if message["type"] == "stream":  # sent after the hello's replay
                caught_up.add(self.index)
                if len(caught_up) == args.n:
                    print("READY", flush=True)
            elif message["type"] == "events":
                mine = arrivals[self.index]
                mine.extend((e["seq"], now) for e in message["events"])
                if all(a and a[-1][0] >= last for a in arrivals):
                    done.set()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        url = f"ws://127.0.0.1:{args.port}/ws/sessions/{args.session}/"
        for i in range(args.n):
            factory = WebSocketClientFactory(
                url, origin=f"http://127.0.0.1:{args.port}", headers={"Cookie": args.cookie}
            )
            factory.setProtocolOptions(utf8validateIncoming=False)

            def make(index: int = i, factory: WebSocketClientFactory = factory) -> Viewer:
                viewer = Viewer()
                viewer.factory = factory
                viewer.index = index
                return viewer

            await loop.create_connection(make, "127.0.0.1", args.port)
        await asyncio.wait_for(done.wait(), timeout=args.timeout)

    try:
        asyncio.run(run())
    finally:
        Path(args.out).write_text(json.dumps(arrivals))


# --- The producer and the report (this process) ---------------------------------------


def setup() -> tuple[int, int, str]:
    os.environ.update(_env())
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from agents.models import Turn
    from agents.services import session_get_or_create
    from dashboard.roles import ensure_roles

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(username="latency-viewer")
    user.groups.add(ensure_roles()["support"])
    client = Client()
    client.force_login(user)
    session = session_get_or_create(key="ticket:latency", title="Latency", context={"id": 1})
    turn = Turn.objects.create(session=session, number=1, status="running", input="Measure me")
    return session.id, turn.id, f"sessionid={client.cookies['sessionid'].value}"


def produce(session_id: int, turn_id: int, count: int, interval_s: float) -> dict[int, float]:
    """`count` events, one per transaction; seq -> commit time."""
    from django.db import transaction

    from agents import events
    from agents.events import EventSpec
    from agents.runtime import store

    committed: dict[int, float] = {}
    for i in range(count):
        stamp: list[float] = []
        with transaction.atomic():
            # Registered first, so it runs first once COMMIT has returned.
            transaction.on_commit(lambda stamp=stamp: stamp.append(time.time()))
            runtime = store.lock_session(session_id)
            data = {"tool_use_id": f"toolu_{i}", "name": "lookup_order", "status": "succeeded"}
            data.update(ms=12, attempt=1)
            (event,) = events.append(runtime, [EventSpec("tool.finished", data, turn_id, "bench")])
        committed[event.seq] = stamp[0]
        time.sleep(interval_s)
    events.flush_published()
    return committed


def last_seq(session_id: int) -> int:
    from agents.models import SessionRuntime

    return SessionRuntime.objects.get(pk=session_id).last_seq


def start_daphne(log_path: Path) -> tuple[subprocess.Popen, int]:
    args = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", "0", "config.asgi:application"]
    log = open(log_path, "wb")  # noqa: SIM115 (the child writes it until stopped)
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        env={**_env(), "LOG_LEVEL": "INFO"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"Listening on TCP address 127\.0\.0\.1:(\d+)", log_path.read_text())
        if found:
            return proc, int(found.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"daphne did not start:\n{log_path.read_text()[-3000:]}")


def measure(n: int, port: int, session_id: int, turn_id: int, cookie: str, opts, tmp: Path):
    """Connect n viewers, produce opts.events events, return latencies in ms."""
    after = last_seq(session_id)
    out = tmp / f"arrivals-{n}.json"
    child = subprocess.Popen(
        [sys.executable, __file__, "--viewers", str(n), "--port", str(port),
         "--session", str(session_id), "--cookie", cookie, "--after", str(after),
         "--count", str(opts.events), "--out", str(out)],
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    ready = child.stdout.readline().strip()
    if ready != "READY":
        child.kill()
        raise RuntimeError(f"viewers did not connect (got {ready!r})")
    committed = produce(session_id, turn_id, opts.events, opts.interval_ms / 1000)
    child.wait(timeout=120)
    arrivals = json.loads(out.read_text())
    samples, missing, duplicates = [], 0, 0
    for mine in arrivals:
        seqs = [seq for seq, _ in mine]
        duplicates += len(seqs) - len(set(seqs))
        missing += len(set(committed) - set(seqs))
        samples += [(at - committed[seq]) * 1000 for seq, at in mine if seq in committed]
    samples.sort()
    pick = lambda q: samples[min(len(samples) - 1, int(len(samples) * q))]  # noqa: E731
    return {
        "clients": n,
        "events": opts.events,
        "samples": len(samples),
        "missing": missing,
        "duplicates": duplicates,
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(pick(0.95), 2),
        "p99_ms": round(pick(0.99), 2),
        "max_ms": round(samples[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--clients", default="1,100", help="comma-separated viewer counts")
    parser.add_argument("--interval-ms", type=float, default=25.0)
    parser.add_argument("--warmup", type=int, default=20)
    # Internal: the viewers' child process.
    parser.add_argument("--viewers", type=int, dest="n", help=argparse.SUPPRESS)
    for name in ("--port", "--session", "--after", "--count"):
        parser.add_argument(name, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cookie", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=120.0, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.n:
        viewers(opts)
        return

    load_before = os.getloadavg()
    _admin_sql(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)', f'CREATE DATABASE "{DBNAME}"')
    daphne = None
    try:
        session_id, turn_id, cookie = setup()
        with tempfile.TemporaryDirectory(prefix="live-latency-") as tmp:
            daphne, port = start_daphne(Path(tmp) / "daphne.log")
            # Warm Daphne (templates compiled, connections open), unmeasured.
            warm = argparse.Namespace(**{**vars(opts), "events": opts.warmup})
            measure(1, port, session_id, turn_id, cookie, warm, Path(tmp))
            results = [
                measure(int(n), port, session_id, turn_id, cookie, opts, Path(tmp))
                for n in opts.clients.split(",")
            ]
    finally:
        if daphne is not None:
            os.killpg(daphne.pid, signal.SIGTERM)
            daphne.wait(10)
        from django.db import connections

        connections.close_all()
        _admin_sql(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)')
    load_after = os.getloadavg()

    print(
        f"{'clients':>8} {'events':>7} {'samples':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} {'lost':>5} {'dup':>5}"
    )
    for r in results:
        print(
            f"{r['clients']:8d} {r['events']:7d} {r['samples']:8d} {r['p50_ms']:8.2f} "
            f"{r['p95_ms']:8.2f} {r['p99_ms']:8.2f} {r['max_ms']:8.2f} {r['missing']:5d} {r['duplicates']:5d}"
        )
    print(f"load average (1/5/15 min) before {load_before}, after {load_after}")
    flat = " ".join(
        f"p50_ms_{r['clients']}={r['p50_ms']} p95_ms_{r['clients']}={r['p95_ms']}" for r in results
    )
    print(f"live_latency: {flat} " + json.dumps({"results": results}, separators=(",", ":")))


if __name__ == "__main__":
    main()
