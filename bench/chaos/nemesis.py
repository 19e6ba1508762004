"""The nemesis: seeded faults at random moments, each logged (time, kind, target).

One fault at a time, with a seeded pause between faults (load shape, not a
wait on a condition). random.Random(seed) alone decides which fault, which
target and how long; what the fault then hits (which session a worker owns
at that moment) is up to the system.

A SIGKILL also opens a recovery probe: the sessions the dead process owned
(SessionRuntime.owner is `hostname:pid`), each of which must show a next
event soon; campaign.py measures the delay afterwards from the event log.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
import requests

from bench.chaos.stack import WORKER_APP, Database, RedisServer, Workers, WorkerSlot

log = logging.getLogger("chaos.nemesis")
HOST = socket.gethostname()

# kind: weight. Worker deaths dominate: they are what recovery is about.
KINDS = {
    "worker_sigkill": 5,
    "worker_sigterm": 2,
    "pool_child_sigkill": 2,
    "redis_restart": 2,
    "pg_terminate_backend": 3,
    "payments_500": 1,
    "payments_409": 1,
    "payments_slow": 2,
    "payments_drop_after_commit": 2,
    "model_429": 1,
    "model_529": 1,
    "model_500": 1,
    "model_stall": 2,
    "advance_duplicate": 2,
    "advance_late": 2,
}


@dataclass
class Probe:
    """A process died by SIGKILL at `at` (epoch seconds) owning `sessions`."""

    kind: str
    target: str
    at: float
    sessions: list[int]


@dataclass
class Nemesis:
    seed: int
    started: float  # monotonic start of the campaign (log times are relative)
    workers: Workers
    redis: RedisServer
    database: Database
    sandbox_url: str
    lines: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    probes: list[Probe] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.errors: list[str] = []

    def start(self) -> None:
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(60)

    def _run(self) -> None:
        kinds, weights = list(KINDS), list(KINDS.values())
        with self.database.connect() as conn:
            while not self.stop.wait(self.rng.uniform(0.3, 2.5)):
                kind = self.rng.choices(kinds, weights)[0]
                try:
                    target = getattr(self, f"_{kind}")(conn)
                except Exception as exc:  # noqa: BLE001 (a fault that failed to apply)
                    self.errors.append(f"{kind}: {exc!r}")
                    target = None
                if target is not None:
                    self._log(kind, target)

    def _log(self, kind: str, target: str) -> None:
        self.counts[kind] += 1
        line = f"t=+{time.monotonic() - self.started:8.3f}s kind={kind} target={target}"
        self.lines.append(line)
        log.info("fault %s", line)

    # --- workers -------------------------------------------------------------------

    def _live_slots(self, prefork_only: bool = False) -> list[WorkerSlot]:
        slots = [s for s in self.workers.slots if s.alive]
        if prefork_only:
            slots = [s for s in slots if s.extra]
        return slots

    def _pick_victim(self) -> WorkerSlot | None:
        # Keep two workers alive, so a death is recovered by capacity that
        # exists (the recovery bound is about noticing, not about restarts).
        live = self._live_slots()
        if len(live) <= 2:
            return None
        return self.rng.choice(live)

    def _worker_sigkill(self, conn: psycopg.Connection) -> str | None:
        slot = self._pick_victim()
        if slot is None:
            return None
        pids = slot.group_pids()
        at = time.time()
        slot.proc.kill(signal.SIGKILL)  # the group: the worker and its pool children
        slot.restart_at = time.monotonic() + self.rng.uniform(0.5, 3.0)
        slot.deaths += 1
        sessions = _owned_by(conn, pids)
        self.probes.append(Probe("worker_sigkill", slot.name, at, sessions))
        return f"{slot.name} pids={pids} owned={sessions}"

    def _worker_sigterm(self, conn: psycopg.Connection) -> str | None:
        slot = self._pick_victim()
        if slot is None:
            return None
        # Warm shutdown: the running task finishes (a slice at most), then the
        # worker exits; the supervisor restarts it after the pause.
        slot.proc.popen.send_signal(signal.SIGTERM)
        slot.restart_at = time.monotonic() + self.rng.uniform(0.5, 3.0)
        slot.deaths += 1
        return f"{slot.name} pid={slot.proc.pid}"

    def _pool_child_sigkill(self, conn: psycopg.Connection) -> str | None:
        slots = self._live_slots(prefork_only=True)
        if not slots:
            return None
        slot = self.rng.choice(slots)
        children = slot.group_pids()[1:]
        if not children:
            return None
        pid = self.rng.choice(children)
        at = time.time()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        # The parent replaces the child; acks_late + reject_on_worker_lost put
        # the task it ran back on the queue.
        sessions = _owned_by(conn, [pid])
        self.probes.append(Probe("pool_child_sigkill", f"{slot.name}/{pid}", at, sessions))
        return f"{slot.name} child pid={pid} owned={sessions}"

    # --- Redis and PostgreSQL ---------------------------------------------------------

    def _redis_restart(self, conn: psycopg.Connection) -> str | None:
        down_s = self.rng.uniform(0.5, 3.0)
        self.redis.stop()
        # Load shape: the broker stays down this long (no condition to wait on).
        self.stop.wait(down_s)
        self.redis.start()
        return f"redis :{self.redis.port} down {down_s:.1f}s"

    def _pg_terminate_backend(self, conn: psycopg.Connection) -> str | None:
        mode = self.rng.choice(["owner", "owner", "one", "all"])
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s AND pid <> pg_backend_pid() ORDER BY pid",
            [WORKER_APP],
        ).fetchall()
        pids = [r[0] for r in rows]
        if mode == "owner":
            owners = conn.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchall()
            pids = [r[0] for r in owners if r[0] in set(pids)] or pids
        if not pids:
            return None
        chosen = pids if mode == "all" else [self.rng.choice(pids)]
        for pid in chosen:
            conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        return f"{mode} backends={chosen}"

    # --- the sandbox ------------------------------------------------------------------

    def _fault(self, rule: dict[str, Any]) -> None:
        response = requests.post(f"{self.sandbox_url}/_faults", json=rule, timeout=10)
        response.raise_for_status()

    def _payments(self, **rule: Any) -> str:
        rule = {
            "target": "payments",
            "match": {"path_prefix": "/v1/refunds", "method": "POST"},
            **rule,
        }
        self._fault(rule)
        shown = {k: v for k, v in rule.items() if k not in ("target", "match")}
        return f"payments POST /v1/refunds {shown}"

    def _payments_500(self, conn) -> str:
        return self._payments(kind="status", status=500, count=self.rng.randint(1, 3))

    def _payments_409(self, conn) -> str:
        return self._payments(kind="status", status=409, count=self.rng.randint(1, 3))

    def _payments_slow(self, conn) -> str:
        phase = self.rng.choice(["before", "in_flight", "after_commit"])
        latency = self.rng.randint(500, 6000)
        return self._payments(kind="latency", phase=phase, latency_ms=latency)

    def _payments_drop_after_commit(self, conn) -> str:
        return self._payments(kind="drop_after_commit", count=self.rng.randint(1, 2))

    def _model(self, **rule: Any) -> str:
        self._fault({"target": "messages", **rule})
        shown = {k: v for k, v in rule.items() if k != "target"}
        return f"model {shown}"

    def _model_429(self, conn) -> str:
        return self._model(kind="status", status=429, count=self.rng.randint(1, 4), retry_after=0.2)

    def _model_529(self, conn) -> str:
        return self._model(kind="status", status=529, count=self.rng.randint(1, 4))

    def _model_500(self, conn) -> str:
        return self._model(kind="status", status=500, count=self.rng.randint(1, 4))

    def _model_stall(self, conn) -> str:
        return self._model(kind="stall", latency_ms=self.rng.randint(2000, 15000))

    # --- deliveries ---------------------------------------------------------------------

    def _active_sessions(self, conn: psycopg.Connection, n: int) -> list[int]:
        rows = conn.execute(
            "SELECT id FROM agents_session WHERE status IN ('running', 'waiting_for_approval') "
            "ORDER BY id"
        ).fetchall()
        ids = [r[0] for r in rows]
        return self.rng.sample(ids, min(n, len(ids)))

    def _advance_duplicate(self, conn: psycopg.Connection) -> str | None:
        from agents.tasks import advance_session

        sessions = self._active_sessions(conn, self.rng.randint(1, 5))
        copies = self.rng.randint(2, 3)
        if not sessions:
            return None
        for session_id in sessions:
            for _ in range(copies):
                advance_session.delay(session_id)
        return f"sessions={sessions} x{copies}"

    def _advance_late(self, conn: psycopg.Connection) -> str | None:
        from agents.tasks import advance_session

        sessions = self._active_sessions(conn, self.rng.randint(1, 5))
        countdown = round(self.rng.uniform(1.0, 15.0), 1)
        if not sessions:
            return None
        for session_id in sessions:
            advance_session.apply_async((session_id,), countdown=countdown)
        return f"sessions={sessions} countdown={countdown}s"


def _owned_by(conn: psycopg.Connection, pids: list[int]) -> list[int]:
    if not pids:
        return []
    # An owner is host:pid/slot (agents/runtime/ownership.py): any slot of the process.
    prefixes = [f"{HOST}:{pid}/%" for pid in pids]
    rows = conn.execute(
        "SELECT session_id FROM agents_sessionruntime WHERE owner LIKE ANY(%s) ORDER BY session_id",
        [prefixes],
    ).fetchall()
    return [r[0] for r in rows]
