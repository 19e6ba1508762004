"""The nemesis: seeded faults at random moments, each logged (time, kind, target).

One fault at a time, with a seeded pause between faults (load shape, not a
wait on a condition). random.Random(seed) alone decides which fault, which
target and how long; what the fault then hits (which session a worker owns
at that moment) is up to the system. Kinds are dealt from a shuffled deck
holding each kind `weight` times, one of each first, so every kind comes
up, in proportion, even in a short run; CHAOS_KINDS (comma-separated)
restricts the deck.

Every fault that takes something away (a process, the broker, the database,
a host's link) also opens a recovery probe: the sessions owned at that
moment (SessionRuntime.owner is `hostname:pid/slot`), each of which must
show a next event soon after the fault ends; campaign.py measures the delay
afterwards from the event log, per kind.

A process the nemesis stops is announced to the supervisor first
(WorkerSlot.expect_exit): an exit nobody announced is a finding.
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
from typing import Any, NamedTuple

import psycopg
import requests

from bench.chaos.stack import (
    WORKER_APP,
    Database,
    PostgresServer,
    RedisServer,
    Workers,
    WorkerSlot,
)

log = logging.getLogger("chaos.nemesis")
HOST = socket.gethostname()

# kind: weight. Worker deaths dominate: they are what recovery is about.
KINDS = {
    "worker_sigkill": 5,
    "worker_sigterm": 2,
    "pool_child_sigkill": 2,
    "redis_restart": 2,
    "redis_outage": 2,  # down 5-30 s (issue 26)
    "redis_flushall": 2,  # every queued trigger gone, with a backlog in the queue
    "postgres_crash": 2,  # stop -m immediate, or SIGKILL of the postmaster; then restart
    "pg_terminate_backend": 3,
    "pg_terminate_all": 2,  # every backend of the workers and beat at once
    "rolling_deploy": 1,  # SIGTERM each worker in turn, its replacement started
    "partition_cut": 2,  # one host's links reset, refused; healed later
    "partition_blackhole": 2,  # one host's links silent (no error), healed later
    "partition_delay": 1,  # one host's links slow
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


class Window(NamedTuple):
    """A fault from beginning to end (epoch seconds): what lost a paid answer."""

    kind: str
    began: float
    ended: float
    host: str = ""  # a partition's host: the answers it lost are the cut's


PARTITION_KINDS = ("partition_cut", "partition_blackhole", "partition_delay")


@dataclass
class Probe:
    """A fault of `kind` ended at `at` (epoch seconds; for a kill, the kill)
    while `sessions` were owned by what it hit."""

    kind: str
    target: str
    at: float
    sessions: list[int]
    began: float = 0.0  # a partition: when its link went (epoch seconds)
    pids: list[int] = field(default_factory=list)  # a partition: the host's worker pids


def kinds_wanted() -> dict[str, int]:
    wanted = [k.strip() for k in os.environ.get("CHAOS_KINDS", "").split(",") if k.strip()]
    unknown = [k for k in wanted if k not in KINDS]
    if unknown:
        raise ValueError(f"CHAOS_KINDS: unknown kinds {unknown}; known: {sorted(KINDS)}")
    return {k: KINDS[k] for k in wanted} if wanted else dict(KINDS)


@dataclass
class Nemesis:
    seed: int
    started: float  # monotonic start of the campaign (log times are relative)
    workers: Workers
    redis: RedisServer
    database: Database
    sandbox_url: str
    postgres: PostgresServer | None = None  # the campaign's own server, when it has one
    # host -> its links: a pair of proxies (proxy.py) or one veth (netns.VethLink)
    links: dict[str, list[Any]] = field(default_factory=dict)
    warmup_s: float = 0.0  # no fault before this (the steady level is measured then)
    quota: int = 0  # faults wanted of each kind (CHAOS_FAULTS_PER_KIND); 0: by weight alone
    lines: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    probes: list[Probe] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    stopped_at: float | None = None  # epoch seconds: the last fault ended
    broker_back_at: float = 0.0  # epoch seconds: Redis last came back (or was flushed)
    slow_link_until: float = 0.0  # epoch seconds: a link is slowed until (and 5 s after) this
    # host -> epoch seconds its link was healed (inf while it is faulted)
    link_faulted_until: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.errors: list[str] = []
        self.kinds = kinds_wanted()
        if self.postgres is None:
            self.kinds.pop("postgres_crash", None)  # not the machine's shared server
        if not self.links:
            for kind in PARTITION_KINDS:
                self.kinds.pop(kind, None)
        links = [link for host_links in self.links.values() for link in host_links]
        if any(getattr(link, "slow_kind", "") == "none" for link in links):
            self.kinds.pop("partition_delay", None)  # no qdisc here to slow a veth with
        self.deck: list[str] = []
        self.decks_dealt = 0
        self._cut_host = ""  # the host of the last partition
        self.conn: psycopg.Connection | None = None

    def start(self) -> None:
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(180)

    def quota_met(self, per_kind: int) -> bool:
        """Every kind in the deck injected at least `per_kind` times."""
        return all(self.counts[kind] >= per_kind for kind in self.kinds)

    def _deal(self) -> str:
        """The next kind. A deck holds each kind `weight` times; its first
        cards are one of each kind (shuffled), the rest follow (shuffled), so
        a run of len(kinds) faults has met every kind once. With a quota
        (CHAOS_FAULTS_PER_KIND), every deck after the first holds each kind
        still short of it once, whatever its weight: a rare kind reaches its
        count in as few faults as the run can deal, not one a deck of 43."""
        if not self.deck:
            weights = self.kinds
            if self.quota and self.decks_dealt:
                short = {k: 1 for k in self.kinds if self.counts[k] < self.quota}
                weights = short or self.kinds
            self.decks_dealt += 1
            kinds = list(weights)
            extra = [k for k, w in weights.items() for _ in range(w - 1)]
            self.rng.shuffle(kinds)
            self.rng.shuffle(extra)
            self.deck = extra[::-1] + kinds[::-1]  # popped from the end
        return self.deck.pop()

    def _connection(self) -> psycopg.Connection:
        """Ours (application_name chaos-campaign, never a target), opened
        again after a fault took the server or the connection away."""
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.conn = self.database.connect()
        return self.conn

    def _run(self) -> None:
        if self.stop.wait(self.warmup_s):
            return
        try:
            while not self.stop.wait(self.rng.uniform(0.3, 2.5)):
                kind = self._deal()
                began = time.time()
                try:
                    target = getattr(self, f"_{kind}")(self._connection())
                except Exception as exc:  # noqa: BLE001 (a fault that failed to apply)
                    self.errors.append(f"{kind}: {exc!r}")
                    target = None
                    if self.conn is not None and self.conn.broken:
                        self.conn = None
                if target is not None:
                    self._log(kind, target)
                    host = self._cut_host if kind in PARTITION_KINDS else ""
                    self.windows.append(Window(kind, began, time.time(), host))
        finally:
            self.stopped_at = time.time()
            if self.conn is not None:
                self.conn.close()

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
        slot.expect_exit(self.rng.uniform(0.5, 3.0))
        slot.proc.kill(signal.SIGKILL)  # the group: the worker and its pool children
        sessions = _owned_by(conn, pids)
        self.probes.append(Probe("worker_sigkill", slot.name, at, sessions))
        return f"{slot.name} pids={pids} owned={sessions}"

    def _worker_sigterm(self, conn: psycopg.Connection) -> str | None:
        slot = self._pick_victim()
        if slot is None:
            return None
        # Warm shutdown: the running task finishes (a slice at most), then the
        # worker exits; the supervisor restarts it after the pause.
        slot.expect_exit(self.rng.uniform(0.5, 3.0))
        slot.proc.popen.send_signal(signal.SIGTERM)
        return f"{slot.name} pid={slot.proc.pid}"

    def _rolling_deploy(self, conn: psycopg.Connection) -> str | None:
        """Each worker in turn: SIGTERM (warm shutdown), wait for it to exit,
        start its replacement at once, wait until it is ready, next. As a
        deploy does it: never more than one worker away at a time."""
        from tests.processes import wait_for

        done = []
        for slot in list(self.workers.slots):
            if self.stop.is_set() or not slot.alive:
                continue
            pids = slot.group_pids()
            at = time.time()
            slot.expect_exit(0.0)
            proc = slot.proc
            proc.popen.send_signal(signal.SIGTERM)
            self.probes.append(Probe("rolling_deploy", slot.name, at, _owned_by(conn, pids)))
            wait_for(
                lambda proc=proc: proc.popen.poll() is not None,
                timeout=90,
                what=f"{slot.name} to finish its tasks and exit",
            )
            wait_for(lambda slot=slot: slot.alive, timeout=180, what=f"{slot.name}'s replacement")
            done.append(f"{slot.name}:{proc.pid}->{slot.proc.pid}")
        return " ".join(done) or None

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
        return self._redis_down(conn, "redis_restart", down_s)

    def _redis_outage(self, conn: psycopg.Connection) -> str | None:
        """The broker away long enough to matter: 5-30 s (CHAOS_REDIS_OUTAGE_S
        'low,high' narrows it for a short run)."""
        low, high = _range("CHAOS_REDIS_OUTAGE_S", 5.0, 30.0)
        return self._redis_down(conn, "redis_outage", self.rng.uniform(low, high))

    def _redis_down(self, conn: psycopg.Connection, kind: str, down_s: float) -> str:
        sessions = _owned(conn)
        self.redis.stop()
        # Load shape: the broker stays down this long (no condition to wait on).
        self.broker_back_at = float("inf")  # down: no trigger can be anywhere
        self.stop.wait(down_s)
        self.redis.start()
        self.broker_back_at = time.time()
        self.probes.append(Probe(kind, f"redis:{self.redis.port}", time.time(), sessions))
        return f"redis :{self.redis.port} down {down_s:.1f}s"

    def _redis_flushall(self, conn: psycopg.Connection) -> str | None:
        """FLUSHALL: every queued and prefetched trigger, every result and
        marker gone, with the broker up all along. The sweeper must find the
        sessions from PostgreSQL (Redis is a delivery path, not the truth)."""
        import redis as redis_lib

        client = redis_lib.Redis.from_url(self.redis.url, socket_timeout=5)
        try:
            backlog = sum(
                client.llen(k) for k in client.keys("celery*") if client.type(k) == b"list"
            )
            unacked = client.hlen("unacked")
            sessions = _owned(conn)
            client.flushall()
            self.broker_back_at = time.time()
        finally:
            client.close()
        self.probes.append(Probe("redis_flushall", "redis", time.time(), sessions))
        return f"redis FLUSHALL backlog={backlog} unacked={unacked}"

    def _postgres_crash(self, conn: psycopg.Connection) -> str | None:
        """The campaign's own server only (never the machine's shared one):
        `pg_ctl stop -m immediate` or SIGKILL of the postmaster, down for
        0.5-5 s, started again (crash recovery from the WAL)."""
        if self.postgres is None:
            return None
        how = self.rng.choice(["immediate", "sigkill"])
        down_s = self.rng.uniform(0.5, 5.0)
        sessions = _owned(conn)
        conn.close()
        self.postgres.crash(how)
        self.stop.wait(down_s)
        self.postgres.start()
        self.probes.append(Probe("postgres_crash", how, time.time(), sessions))
        return f"postgres {how}, down {down_s:.1f}s"

    def _pg_terminate_backend(self, conn: psycopg.Connection) -> str | None:
        mode = self.rng.choice(["owner", "owner", "one"])
        pids = _worker_backends(conn)
        if mode == "owner":
            owners = conn.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchall()
            pids = [r[0] for r in owners if r[0] in set(pids)] or pids
        if not pids:
            return None
        chosen = [self.rng.choice(pids)]
        for pid in chosen:
            conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        return f"{mode} backends={chosen}"

    def _pg_terminate_all(self, conn: psycopg.Connection) -> str | None:
        """Every backend of the workers and beat at once: every liveness lock
        goes, while every worker is alive and mid-call."""
        pids = _worker_backends(conn)
        if not pids:
            return None
        sessions = _owned(conn)
        conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [pids])
        self.probes.append(Probe("pg_terminate_all", "all", time.time(), sessions))
        return f"all {len(pids)} backends"

    # --- partitions between hosts -------------------------------------------------------

    def _partition(self, conn: psycopg.Connection, kind: str, mode: str) -> str | None:
        """One host's links (its veth to the core, or its proxies to the
        database and the broker) cut, black-holed or slowed for 2-10 s, then
        healed. The other host keeps working and takes the cut host's
        sessions once their liveness locks go; the cut host's claims are
        fenced when it comes back."""
        host = self._cut_host = self.rng.choice(sorted(self.links))
        pids = [p for s in self.workers.slots if s.host == host for p in s.group_pids()]
        sessions = _owned_by(conn, pids)
        low, high = _range("CHAOS_PARTITION_S", 2.0, 10.0)
        hold_s = self.rng.uniform(low, high)
        delay_ms = self.rng.randint(100, 1500)
        if mode == "delay":
            self.slow_link_until = float("inf")
        how = ""
        began = time.time()
        self.link_faulted_until[host] = float("inf")
        try:
            for link in self.links[host]:
                if mode == "cut":
                    link.cut()
                elif mode == "blackhole":
                    link.blackhole()
                else:
                    how = link.delay(delay_ms / 1000) or how  # a veth says how (netem, tbf)
            self.stop.wait(hold_s)
        finally:  # a fault that failed half-applied must not leave a host cut off
            for link in self.links[host]:
                link.heal()
            self.link_faulted_until[host] = time.time()
        if mode == "delay":
            self.slow_link_until = time.time() + 5.0
        self.probes.append(Probe(kind, f"host-{host}", time.time(), sessions, began, pids))
        shown = f" {delay_ms}ms" + (f" ({how})" if how else "") if mode == "delay" else ""
        return f"host {host} {mode}{shown} for {hold_s:.1f}s owned={sessions}"

    def _partition_cut(self, conn: psycopg.Connection) -> str | None:
        return self._partition(conn, "partition_cut", "cut")

    def _partition_blackhole(self, conn: psycopg.Connection) -> str | None:
        return self._partition(conn, "partition_blackhole", "blackhole")

    def _partition_delay(self, conn: psycopg.Connection) -> str | None:
        return self._partition(conn, "partition_delay", "delay")

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


def _range(name: str, low: float, high: float) -> tuple[float, float]:
    raw = os.environ.get(name)
    if not raw:
        return low, high
    a, b = (float(x) for x in raw.split(","))
    return a, b


def _worker_backends(conn: psycopg.Connection) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = %s AND pid <> pg_backend_pid() ORDER BY pid",
        [WORKER_APP],
    ).fetchall()
    return [r[0] for r in rows]


def _owned(conn: psycopg.Connection) -> list[int]:
    rows = conn.execute(
        "SELECT session_id FROM agents_sessionruntime WHERE owner <> '' ORDER BY session_id"
    ).fetchall()
    return [r[0] for r in rows]


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
