"""Real processes for tests: the sandbox, Celery workers, Celery beat.

Nothing here stands in for our own runtime: workers are `celery worker`
processes running the production task code against the test database and
Redis; the sandbox is the same process `make run` starts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# How long a process we start may take to say it is ready. A deadline, not a
# wait: a worker is ready in 2-4 s on a quiet machine, but on 2 cores under
# pytest-xdist (or beside other suites) its imports can take far longer, and
# a start-up that is merely slow is not what any test here checks.
STARTUP_S = float(os.environ.get("AGENTDESK_TEST_STARTUP_S", "120"))


def wait_for(
    condition: Callable[[], Any], *, timeout: float = 20.0, what: str = "condition"
) -> Any:
    """Poll `condition` until it returns something truthy, or fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Proc:
    """A child process whose output goes to a log file we can read and show."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.log_file = open(log_path, "wb")  # noqa: SIM115 (closed in stop())
        self.popen = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: signals reach its children too
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_log(self, pattern: str, timeout: float = 30.0) -> re.Match:
        def found():
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.name} exited early:\n{self.log()[-3000:]}")
            return re.search(pattern, self.log())

        try:
            return wait_for(found, timeout=timeout, what=f"{self.name} to log {pattern!r}")
        except AssertionError:
            print(f"--- {self.name} log ---\n{self.log()[-5000:]}", file=sys.stderr)
            raise

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a worker and any children)."""
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is None:
            self.kill(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self.popen.wait(5)
        self.log_file.close()


def start_sandbox(data_dir: Path, env: dict[str, str], *extra: str) -> tuple[Proc, str]:
    args = [sys.executable, "-m", "sandbox", "--host", "127.0.0.1", "--port", "0"]
    args += ["--data", str(data_dir / "sandbox.sqlite3"), "--seed-demo", *extra]
    proc = Proc("sandbox", args, env, data_dir / "sandbox.log")
    match = proc.wait_for_log(r"sandbox: listening on (http://\S+)", timeout=STARTUP_S)
    return proc, match.group(1)


def start_worker(name: str, env: dict[str, str], log_dir: Path, *extra: str) -> Proc:
    """A worker in the production mode (settings: a thread pool of slots) unless
    `extra` says otherwise (`--pool=prefork`)."""
    env = pool_env(env, extra)
    args = [sys.executable, "-m", "celery", "-A", "config", "worker"]
    args += ["--loglevel=INFO", "-n", f"{name}@%h", "--without-gossip", "--without-mingle"]
    args += ["--without-heartbeat", *extra]
    proc = Proc(name, args, env, log_dir / f"{name}-{time.monotonic_ns()}.log")
    proc.wait_for_log(r"\bready\.", timeout=STARTUP_S)
    return proc


def pool_env(env: dict[str, str], extra: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Celery reads `--pool=prefork` as "the default pool" and then takes the
    configured one (settings: threads), so a prefork worker is asked for by
    AGENTDESK_WORKER_POOL as well."""
    for arg in extra:
        if arg.startswith("--pool="):
            return {**env, "AGENTDESK_WORKER_POOL": arg.split("=", 1)[1]}
    return env


def start_beat(env: dict[str, str], log_dir: Path) -> Proc:
    schedule = log_dir / f"beat-{time.monotonic_ns()}"
    args = [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel=INFO"]
    args += ["--schedule", str(schedule)]
    proc = Proc("beat", args, env, log_dir / f"beat-{time.monotonic_ns()}.log")
    proc.wait_for_log(r"beat: Starting", timeout=STARTUP_S)
    return proc
