"""One campaign: set up, drive tickets under the nemesis, heal, check, report.

    SEED=7 SESSIONS=500 python -m bench.chaos      (make chaos SEED=7 SESSIONS=500)

Defaults: a random seed (printed, so the run can be replayed) and 100
sessions. CHAOS_DATABASE names the database (default agentdesk_chaos; it is
dropped and created again at the start, so two campaigns at once need two
names; CHAOS_KEEP_LOGS=1 keeps the logs of a clean run too). The last line
of the output is the machine-readable summary; the exit status is 0 only
when no invariant was violated.

Other knobs: CHAOS_KINDS (the fault kinds to deal, comma-separated; all by
default), CHAOS_OWN_POSTGRES=0 (use DATABASE_URL's server: no crash of the
database then), CHAOS_WARMUP_S (fault-free start, where the steady level of
connections and memory is measured; 10 s), CHAOS_MAX_OPEN (sessions the
driver keeps open at once; 8), CHAOS_MODEL_TTFT_MS (the model's time to
its first token: a real model's pace; 0), CHAOS_REDIS_OUTAGE_S and CHAOS_PARTITION_S
('low,high' seconds: narrower outages for a short run), CHAOS_FAULTS_PER_KIND
(the faults go on after the last ticket until every kind came up this many
times; 0) within CHAOS_RUN_LIMIT_S (1800).

Partitions: as root with iproute2 (and the campaign's own PostgreSQL),
PostgreSQL, Redis and the sandbox run in a "core" network namespace, each
worker host in one of its own linked to the core by a veth pair, and the
campaign in the root namespace over a veth of its own; beat runs in the
core (netns.py): a partition cuts (the host's end down), black-holes (the
core's end down) or slows (tc netem, else tbf) one host's veth, then heals
it. Elsewhere, or with CHAOS_PARTITIONS=proxy, each host reaches PostgreSQL
and Redis through loopback proxies of its own (proxy.py);
CHAOS_PARTITIONS=netns fails rather than fall back. The output says which
ran ("partitions: ...").
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.chaos import netns, stack
from bench.chaos.proxy import Proxy
from bench.chaos.sampling import IDLE_FAIL_S, Sampling

# Approval limit for the campaign (see _env); a long run asks for less than a
# dollar, so that the demo orders hold its refunds (workload.py).
LIMIT_CENTS = int(os.environ.get("CHAOS_APPROVAL_LIMIT_CENTS") or 2000)
APPROVAL_TTL_S = 15
SETTLE_TIMEOUT_S = 240.0
SETTLE_LIMIT_S = float(os.environ.get("CHAOS_SETTLE_LIMIT_S") or 60)  # invariant 8
KEEP_LOAD_BATCH = 100  # tickets planned at a time when the load outlasts SESSIONS
HOSTS = ("a", "b")  # worker "hosts", each with its own link to PG, Redis and the sandbox


def _env(redis_url: str, sandbox_url: str) -> dict[str, str]:
    """Settings shared by the workers, beat and the campaign process.

    Set on purpose: a short sweep interval and grace (recovery within about
    2.5 s), a short approval TTL so that letting an approval expire happens
    within the run, a short task slice so sessions change hands often, a
    model timeout below the stall the nemesis injects, and an approval limit
    of $20 (or CHAOS_APPROVAL_LIMIT_CENTS), because the sandbox's fifteen
    demo orders must hold every refund of the run (it has no endpoint to add
    orders).
    """
    return {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "REDIS_URL": redis_url,
        "SANDBOX_URL": sandbox_url,
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_BASE_URL": sandbox_url,
        "AGENTDESK_SWEEP_INTERVAL_S": "1",
        "AGENTDESK_SWEEP_GRACE_S": "1.5",
        "AGENTDESK_EXPIRE_INTERVAL_S": "1",
        "AGENTDESK_APPROVAL_TTL_S": str(APPROVAL_TTL_S),
        "AGENTDESK_REFUND_APPROVAL_LIMIT_CENTS": str(LIMIT_CENTS),
        "AGENTDESK_TASK_SLICE_S": "5",
        "AGENTDESK_TASK_MAX_S": "5",  # hand sessions over every 5 s, waiting work or not
        "AGENTDESK_MODEL_TIMEOUT_S": "10",
        "AGENTDESK_MODEL_MAX_RETRIES": "2",
        "AGENTDESK_TOOL_RETRIES": "3",
        "PYTHONUNBUFFERED": "1",
    }


def say(text: str) -> None:
    print(text, flush=True)


def partition_topology(own_postgres: bool) -> tuple[netns.Topology | None, str]:
    """Veth partitions between network namespaces where they can be made
    (CHAOS_PARTITIONS=netns insists), else the loopback proxies
    (CHAOS_PARTITIONS=proxy asks for them); the second value says why."""
    wanted = os.environ.get("CHAOS_PARTITIONS", "").strip()
    if wanted not in ("", "netns", "proxy"):
        raise ValueError(f"CHAOS_PARTITIONS={wanted!r}: netns or proxy")
    why = netns.unavailable()
    if why is None and not own_postgres:
        why = (
            "the database is a shared server (CHAOS_OWN_POSTGRES=0 or no initdb), not ours to move"
        )
    if why is None:
        return netns.Topology(HOSTS), ""
    if wanted == "netns":
        raise RuntimeError(f"CHAOS_PARTITIONS=netns, but {why}")
    return None, f"loopback TCP proxies per host ({why})"


def main() -> int:
    seed = int(os.environ.get("SEED") or random.SystemRandom().randrange(1, 1_000_000))
    sessions = int(os.environ.get("SESSIONS") or 100)
    dbname = os.environ.get("CHAOS_DATABASE", "agentdesk_chaos")
    run_dir = Path(tempfile.mkdtemp(prefix="agentdesk-chaos-"))
    say(f"chaos: seed={seed} sessions={sessions} database={dbname} logs={run_dir}")
    campaign = Campaign(seed, sessions, dbname, run_dir)
    # A SIGTERM (a test's timeout, Ctrl-C's cousin) still tears the stack down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    violations = -1
    try:
        campaign.setup()
        campaign.run()
        campaign.heal()
        violations = campaign.check_and_report()
    finally:
        campaign.teardown(keep=violations != 0 or bool(os.environ.get("CHAOS_KEEP_LOGS")))
    if violations == 0 and not os.environ.get("CHAOS_KEEP_LOGS"):
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        say(f"chaos: logs kept in {run_dir}")
    return 0 if violations == 0 else 1


class Campaign(Sampling):
    def __init__(self, seed: int, sessions: int, dbname: str, run_dir: Path) -> None:
        self.seed = seed
        self.count = sessions
        self.run_dir = run_dir
        self.dbname = dbname
        self.own_postgres = (
            os.environ.get("CHAOS_OWN_POSTGRES", "1") != "0" and stack.postgres_bindir() is not None
        )
        self.topology, self.partitions = partition_topology(self.own_postgres)
        self._make_servers()
        self.links: dict[str, list[Any]] = {}  # host -> its Proxy pair, or its one VethLink
        self.host_by_address: dict[str, str] = {}  # a host's address on its veth -> the host
        self.warmup_s = float(os.environ.get("CHAOS_WARMUP_S") or 10)
        self.samples: list[tuple[str, int, dict[str, float]]] = []  # (phase, conns, rss by slot)
        self.process_deaths: list[str] = []  # redis, postgres, the sandbox: died by themselves
        self.settled_after_s: float | None = None
        self.driver_interruptions = 0
        self.sandbox = None
        self.workers: stack.Workers | None = None
        self.nemesis = None
        self.driver = None
        self.started = time.monotonic()
        self.long_transactions: list[str] = []
        self.link_transactions: list[str] = []  # a faulted link kept them open (noted)
        self.idle_runnable: dict[int, float] = {}  # session -> longest idle seen (s)
        self.idle_untriggered: dict[int, float] = {}  # ...of those, with no trigger queued
        # (backends waiting on a lock, of them behind a faulted link's transaction,
        # the longest wait in s): one per sample while the faults run
        self.lock_waits: list[tuple[int, int, float]] = []
        self.phase_s: dict[str, float] = {}

    def _make_servers(self) -> None:
        """PostgreSQL and Redis: in the core namespace when there is one."""
        topology = self.topology
        core = topology.core_address() if topology else "127.0.0.1"
        prefix = topology.exec_prefix("core") if topology else None
        self.postgres: stack.PostgresServer | None = None
        if self.own_postgres:
            self.postgres = stack.PostgresServer(self.run_dir, host=core, prefix=prefix)
        self.database = stack.Database(self.dbname, self.postgres.url if self.postgres else None)
        self.redis = stack.RedisServer(self.run_dir, host=core, prefix=prefix)

    # --- setup ---------------------------------------------------------------------

    def _network_up(self) -> None:
        """The namespaces and their links (or the reason there are none)."""
        if self.topology is not None:
            swept = netns.sweep_stale()
            if swept:
                say(f"chaos: removed the namespaces of dead campaigns: {', '.join(swept)}")
            try:
                self.topology.up()
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                self.topology.down()
                if os.environ.get("CHAOS_PARTITIONS", "").strip() == "netns":
                    raise
                if self.postgres is not None:  # made for the core: made again for loopback
                    shutil.rmtree(self.postgres.data, ignore_errors=True)
                self.topology = None
                self.partitions = f"loopback TCP proxies per host (namespaces failed: {exc})"
                self._make_servers()
            else:
                self.partitions = _veth_mode(self.topology)
        say(f"chaos: partitions: {self.partitions}")

    def setup(self) -> None:
        t0 = time.monotonic()
        self._network_up()
        if self.postgres is not None:
            self.postgres.init()
            self.postgres.start()
        self.redis.start()
        self.database.recreate(self.run_dir)
        if self.topology is not None:
            self.sandbox, port = stack.start_sandbox_in(
                self.topology.exec_prefix("core"), self.run_dir
            )
            self.sandbox_url = f"http://{self.topology.core_address()}:{port}"
        else:
            self.sandbox, self.sandbox_url = stack.start_sandbox_proc(self.run_dir)
        common = _env(self.redis.url, self.sandbox_url)
        os.environ.update(common, DATABASE_URL=self.database.url(stack.CAMPAIGN_APP))
        import django

        django.setup()
        _log_to(self.run_dir / "campaign.log")  # after Django's LOGGING (console) is set
        users = _users()
        worker_env = {**os.environ, **common, "DATABASE_URL": self.database.url(stack.WORKER_APP)}
        prefixes = {h: self.topology.exec_prefix(h) for h in HOSTS} if self.topology else {}
        self.workers = stack.Workers(
            worker_env,
            self.run_dir,
            stack.worker_slots(solo=3, prefork=1, hosts=HOSTS),
            {host: self._host_env(host, worker_env) for host in HOSTS},
            prefixes,
            # Beat beside the database, where no partition reaches it; in the
            # core, a crashed campaign's sweep (netns.sweep_stale) ends it too.
            self.topology.exec_prefix("core") if self.topology else None,
        )
        self.workers.start_all()
        from bench.chaos.driver import Driver
        from bench.chaos.workload import Planner

        self.planner = Planner(self.seed, LIMIT_CENTS)
        tickets = self.planner.plan(self.count)
        ttft_ms = int(os.environ.get("CHAOS_MODEL_TTFT_MS") or 0)
        if ttft_ms:  # a real model's pace: seconds to the first token
            import requests

            pace = {"ttft_ms": ttft_ms, "tokens_per_s": 0}
            requests.post(f"{self.sandbox_url}/_model_pace", json=pace, timeout=10)
        max_open = int(os.environ.get("CHAOS_MAX_OPEN") or 8)
        self.driver = Driver(tickets, self.sandbox_url, users, max_open=max_open)
        self.phase_s["setup"] = time.monotonic() - t0
        pg = f"own PostgreSQL :{self.postgres.port}" if self.postgres else "shared PostgreSQL"
        where = "in namespaces of their own" if self.topology else "behind proxies"
        say(
            f"chaos: stack up in {self.phase_s['setup']:.1f}s (4 workers: 3 solo, 1 prefork x2, "
            f"on hosts {', '.join(HOSTS)} {where}; beat; {pg}; "
            f"{max_open} sessions open at once, model first token {ttft_ms} ms)"
        )

    def _host_env(self, host: str, worker_env: dict[str, str]) -> dict[str, str]:
        """A host's workers reach PostgreSQL, Redis and the sandbox over
        their own link only: the partition faults cut these, never beat's
        or the campaign's (which stand beside the database and broker)."""
        if self.topology is not None:
            self.links[host] = [self.topology.link(host)]
            self.host_by_address[self.topology.host_links[host].far_ip] = host
            core = self.topology.core_address(host)
            sandbox = f"http://{core}:{urlsplit(self.sandbox_url).port}"
            return {
                **worker_env,
                **_env(f"redis://{core}:{self.redis.port}/0", sandbox),
                "DATABASE_URL": self.database.url(stack.WORKER_APP, host=core),
            }
        pg = Proxy(self.database.address).start()
        broker = Proxy(("127.0.0.1", self.redis.port)).start()
        self.links[host] = [pg, broker]
        return {
            **worker_env,
            "DATABASE_URL": self.database.url(stack.WORKER_APP, port=pg.port),
            "REDIS_URL": f"redis://127.0.0.1:{broker.port}/0",
        }

    # --- the run under the nemesis -------------------------------------------------------

    def run(self) -> None:
        from bench.chaos.nemesis import Nemesis

        t0 = self.started = time.monotonic()
        per_kind = int(os.environ.get("CHAOS_FAULTS_PER_KIND") or 0)
        self.nemesis = Nemesis(
            self.seed,
            self.started,
            self.workers,
            self.redis,
            self.database,
            self.sandbox_url,
            postgres=self.postgres,
            links=self.links,
            warmup_s=self.warmup_s,
            quota=per_kind,
        )
        self.nemesis.start()
        shown = 0
        next_progress = t0 + 10
        next_sample = t0
        limit = t0 + float(os.environ.get("CHAOS_RUN_LIMIT_S") or 1800)
        # CHAOS_KEEP_LOAD=1: the load lasts as long as the faults do. SESSIONS
        # is then the least; more tickets are planned while faults are owed.
        keep_load = os.environ.get("CHAOS_KEEP_LOAD") == "1"
        while not self.driver.idle or (
            not self.nemesis.quota_met(per_kind) and time.monotonic() < limit
        ):
            owed = not self.nemesis.quota_met(per_kind) and time.monotonic() < limit
            if keep_load and owed and self.driver.delivered_all:
                self.driver.add(self.planner.plan(KEEP_LOAD_BATCH))
                self.count = self.planner.planned
            self._guarded(self.driver.step)
            now = time.monotonic()
            shown = self._show_faults(shown)
            if now >= next_sample:
                phase = "warmup" if now - t0 < self.warmup_s else "run"
                self._guarded(lambda phase=phase: self._sample_all(phase))
                next_sample = now + 1.0
            if now >= next_progress:
                self._guarded(self._progress)
                next_progress = now + 10
            time.sleep(0.05)
        self.nemesis.halt()
        self._show_faults(shown)
        self.phase_s["run"] = time.monotonic() - t0

    def _guarded(self, action) -> None:
        """The campaign's own database work is under the faults too (the
        server crashes): a database error ends this pass, not the campaign.
        The connection is dropped and the next pass opens a new one."""
        from django.db import DatabaseError, connections

        try:
            action()
        except DatabaseError as exc:
            self.driver_interruptions += 1
            logging.getLogger("chaos").info("campaign pass interrupted: %r", exc)
            connections.close_all()
            time.sleep(0.2)

    def _show_faults(self, shown: int) -> int:
        lines = self.nemesis.lines
        for line in lines[shown:]:
            say(f"  fault {line}")
        return len(lines)

    def _progress(self) -> None:
        done = self.count - len(self.driver.pending)
        say(
            f"chaos: t=+{time.monotonic() - self.started:.0f}s delivered={done}/{self.count} "
            f"running={self.driver.open_sessions()} faults={sum(self.nemesis.counts.values())}"
        )

    # --- heal --------------------------------------------------------------------------

    def heal(self) -> None:
        """Stop the faults, bring everything back, let the system finish."""
        import requests

        from tests.processes import wait_for

        t0 = time.monotonic()
        requests.delete(f"{self.sandbox_url}/_faults", timeout=10).raise_for_status()
        for proxies in self.links.values():
            for proxy in proxies:
                proxy.heal()
        if not self.redis.up:
            self.redis.start()
        if self.postgres is not None and not self.postgres.alive():
            self.postgres.start()
        self.workers.restart_now()
        wait_for(self.workers.all_alive, timeout=120, what="every worker and beat up again")
        say(
            f"chaos: healed (faults off, all processes up) in {time.monotonic() - t0:.1f}s; settling"
        )
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        next_sample = time.monotonic()
        while time.monotonic() < deadline:
            self._guarded(lambda: self.driver.step(deliver=False))
            # decide what the plan left undecided
            self._guarded(lambda: self.driver.approve_pass(final=True))
            if time.monotonic() >= next_sample:
                self._guarded(lambda: self._sample_all("settling"))
                next_sample = time.monotonic() + 1.0
            if self.driver.idle and _settled():
                self.settled_after_s = time.time() - (self.nemesis.stopped_at or time.time())
                break
            time.sleep(0.2)
        self.phase_s["heal"] = time.monotonic() - t0
        settled = "never" if self.settled_after_s is None else f"{self.settled_after_s:.1f}s"
        say(
            f"chaos: settled={_settled()} after {self.phase_s['heal']:.1f}s "
            f"(faults stop -> every session settled: {settled})"
        )
        # The steady level after the faults: a few samples with nothing to do.
        for _ in range(5):
            self._guarded(lambda: self._sample_all("after"))
            time.sleep(1.0)

    # --- check and report -----------------------------------------------------------------

    def check_and_report(self) -> int:
        from django.conf import settings

        from bench.chaos import report
        from bench.chaos.checks import World, add_run_findings, check_all

        world = World(self.sandbox_url)
        found = check_all(world)
        for line in self.long_transactions:
            found.fail(5, line)
        for session_id, idle_s in sorted(self.idle_untriggered.items()):
            if idle_s > IDLE_FAIL_S:
                found.fail(4, f"session {session_id}: runnable, idle {idle_s:.0f}s, no trigger")
        for problem in self.driver.problems:
            found.fail(4, f"driver: {problem}")
        processes = sum(1 + (2 if slot.extra else 0) for slot in self.workers.slots) + 1
        conn_bound = processes * (settings.AGENTDESK_DB_POOL_SIZE + 2)
        add_run_findings(
            found,
            settled_after_s=self.settled_after_s,
            settle_limit_s=SETTLE_LIMIT_S,
            exits=self.workers.self_exits + self.process_deaths,
            samples=self.samples,
            conn_bound=conn_bound,
        )
        kills = [p for p in self.nemesis.probes if p.kind in report.KILLS]
        windows = self.nemesis.windows
        recovery = report.recovery_times(kills, world, self.run_dir, windows)
        by_kind = report.recovery_by_kind(self.nemesis.probes, world, windows)
        figures = self._figures(world, conn_bound)
        text = report.render(
            seed=self.seed,
            sessions=self.count,
            found=found,
            recovery=recovery,
            faults=self.nemesis.counts,
            driver_counts=self.driver.counts,
            phases=self.phase_s,
            notes=self.nemesis.errors
            + self.workers.restart_failures
            + [f"on a faulted link: {line[:200]}" for line in self.link_transactions],
            idle_runnable=self.idle_runnable,
            idle_untriggered=self.idle_untriggered,
            by_kind=by_kind,
            figures=figures,
        )
        say(text)
        return len(found.violations)

    def _figures(self, world, conn_bound: int) -> dict[str, str]:
        from bench.chaos import report
        from bench.chaos.checks import NOT_IDEMPOTENT, C, _get
        from bench.chaos.nemesis import PARTITION_KINDS

        stats = _get(self.sandbox_url, "/_stats")
        unrecorded = report.completed_unrecorded(stats, world)
        repeats = _get(self.sandbox_url, "/_model_repeats")["repeats"]
        charged = report.repeats_by_kind(repeats, self.nemesis.windows, self.host_by_address)
        db_faults = sum(self.nemesis.counts[k] for k in report.DATABASE_FAULTS)
        twice = sum(charged[k] for k in report.DATABASE_FAULTS)
        cuts = sum(self.nemesis.counts[k] for k in PARTITION_KINDS)
        cut_twice = sum(charged[k] for k in PARTITION_KINDS)
        not_idem = [c for c in world.calls if c.kind == NOT_IDEMPOTENT]
        doubt = sum(1 for c in not_idem if c.status == C.IN_DOUBT)
        conns = [c for phase, c, _ in self.samples if phase != "warmup"]
        after = [c for phase, c, _ in self.samples if phase == "after"]
        warm = [c for phase, c, _ in self.samples if phase == "warmup"]
        rss_after = self.samples[-1][2] if self.samples else {}
        settled = "never" if self.settled_after_s is None else f"{self.settled_after_s:.1f}s"
        per_fault = twice / db_faults if db_faults else 0.0
        per_100 = per_fault * 100 / max(1, self.count)
        per_100_open = per_fault * 100 / max(1, self.driver.max_open)
        by_kind = ", ".join(
            f"{kind} {n} ({n / self.nemesis.counts[kind]:.2f} a fault)"
            if self.nemesis.counts[kind]
            else f"{kind} {n}"  # "no fault"
            for kind, n in charged.most_common()
        )
        return {
            "model calls completed at the provider, not recorded": (
                f"{unrecorded} (a retry after a lost answer, or a turn canceled or ended by then)"
            ),
            "model calls paid twice (the same request completed again)": (
                f"{len(repeats)}; by the fault that lost the answer: {by_kind or 'none'}"
            ),
            "paid twice per database fault": (
                f"{per_fault:.2f} ({twice} over {db_faults} database faults); per 100 sessions "
                f"of the run {per_100:.4f}; per 100 sessions open ({self.driver.max_open}) "
                f"{per_100_open:.2f}"
            ),
            "paid twice per partition (the call's stream cut with the host's link)": (
                f"{cut_twice / cuts if cuts else 0.0:.2f} ({cut_twice} over {cuts} partitions)"
            ),
            "in_doubt per 1,000 not-idempotent calls": (
                f"{doubt * 1000 / max(1, len(not_idem)):.1f} ({doubt} of {len(not_idem)})"
            ),
            "faults stop -> every session settled": f"{settled} (limit {SETTLE_LIMIT_S:.0f}s)",
            "processes exited by themselves": str(
                len(self.workers.self_exits) + len(self.process_deaths)
            ),
            f"worker connections (bound {conn_bound})": (
                f"warm-up max {max(warm, default=0)}, under faults max {max(conns, default=0)} "
                f"median {statistics.median(conns) if conns else 0}, after max {max(after, default=0)}"
            ),
            "worker memory after the faults (MB)": ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(rss_after.items())
            ),
            "campaign passes interrupted by database faults": str(self.driver_interruptions),
            "backends waiting on a lock (sampled while the faults ran)": self._lock_wait_figure(),
            "partitions": self.partitions,
            **self._takeover_figures(world),
        }

    def _lock_wait_figure(self) -> str:
        samples = self.lock_waits
        if not samples:
            return "not sampled"
        waits = sum(n for n, _, _ in samples)
        behind = sum(b for _, b, _ in samples)
        return (
            f"max {max(n for n, _, _ in samples)}, mean {waits / len(samples):.2f} over "
            f"{len(samples)} samples; behind a transaction on a faulted link: {behind} of "
            f"{waits}; longest wait seen {max(w for _, _, w in samples):.1f}s"
        )

    def _takeover_figures(self, world) -> dict[str, str]:
        from bench.chaos import report

        slot_hosts = {slot.name: slot.host for slot in self.workers.slots}
        takeovers = report.partition_takeovers(self.nemesis.probes, world, self.run_dir, slot_hosts)
        return {
            f"{kind} takeovers": (
                f"owned by the faulted host {t.owned}: moved to another process during the "
                f"fault {t.moved}, fenced on the faulted host after it {t.fenced}"
            )
            for kind, t in sorted(takeovers.items())
        }

    def teardown(self, keep: bool = False) -> None:
        if self.nemesis is not None and self.nemesis.thread.is_alive():
            self.nemesis.halt()
        if self.workers is not None:
            self.workers.stop_all()
        if self.sandbox is not None:
            self.sandbox.stop()
        self.redis.stop()
        for proxies in self.links.values():
            for proxy in proxies:
                proxy.stop()
        if self.postgres is not None:
            from django.db import connections

            connections.close_all()
            self.postgres.stop(keep=keep)
            if keep:
                say(f"chaos: PostgreSQL data kept in {self.postgres.data}/db")
        if self.topology is not None:
            left = self.topology.down()
            if left:  # everything above stops its processes: these escaped it
                say(f"chaos: processes still in the namespaces at teardown, killed: {left}")


def _veth_mode(topology: netns.Topology) -> str:
    slow = {
        "netem": "slow link: tc netem delay",
        "tbf": "slow link: a tbf rate limit (this kernel has no sch_netem)",
        "none": "no slow link (neither netem nor tbf in this kernel)",
    }[topology.slow_kind]
    names = ", ".join([topology.core, *topology.hosts.values()])
    return f"veth pairs between network namespaces ({names}); {slow}"


def _log_to(path: Path) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    # The report goes to stdout; everything logged (ours, and the runtime's
    # own complaints while Redis is down) to the file.
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def _settled() -> bool:
    """Nothing runnable is left: every open turn waits on a human (a pending
    approval, an in_doubt call), directly or queued behind one that does."""
    from agents.models import Session, Turn
    from approvals.models import Approval
    from bench.chaos.checks import blocked_sessions

    if Session.objects.filter(status=Session.Status.RUNNING).exists():
        return False
    if Approval.objects.filter(status=Approval.Status.PENDING).exists():
        return False
    blocked = blocked_sessions()
    open_turns = Turn.objects.filter(
        status__in=["accepted", "running", "resuming", "waiting_for_approval"]
    )
    return not open_turns.exclude(session_id__in=blocked).exists()


def _users() -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from dashboard.roles import ensure_roles

    groups = ensure_roles()
    model = get_user_model()
    users = {}
    for name, role in (("alice", "support"), ("bob", "approver")):
        user = model.objects.create_user(username=name, password=f"{name}-pw")
        user.groups.add(groups[role])
        users[name] = model.objects.get(pk=user.pk)
    return users


if __name__ == "__main__":
    sys.exit(main())
