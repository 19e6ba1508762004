"""`make run` supervises: a child that dies is started again, the terminal
says so, and only Ctrl-C stops everything (scripts/run.py, issue 26).

The real `scripts/run.py` runs here, on the test database, with its own
embedded Redis, sandbox, web, worker and beat on free ports and its own data
directory; the test SIGKILLs a worker and the Redis it started, SIGTERMs the
sandbox (a deploy-style stop), and checks each comes back while the others
never stopped.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
import requests
from django.db import connection

from bench.chaos.stack import free_port
from config import sizing
from tests.processes import ROOT, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class Run:
    """scripts/run.py as a person starts it, its terminal kept in memory."""

    def __init__(self, env: dict[str, str]) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "run.py")],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in iter(self.popen.stdout.readline, b""):
            self.lines.append(raw.decode(errors="replace").rstrip())

    @property
    def terminal(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float = 60) -> re.Match:
        def found():
            if self.popen.poll() is not None:
                raise AssertionError(f"run.py exited:\n{self.terminal[-5000:]}")
            return re.search(pattern, self.terminal)

        try:
            return wait_for(found, timeout=timeout, what=f"the terminal to say {pattern!r}")
        except AssertionError:
            print(self.terminal[-5000:], file=sys.stderr)
            raise

    def child(self, name: str) -> psutil.Process:
        """The live child started as `name` (its command line says which)."""
        marks = {
            "worker": "worker",
            "redis": "redis-server",
            "sandbox": "sandbox",
            "web": "config.web",
            "beat": " beat",
        }
        for proc in psutil.Process(self.popen.pid).children():
            try:
                if marks[name] in " ".join(proc.cmdline()) and proc.status() != "zombie":
                    return proc
            except psutil.Error:
                continue
        raise LookupError(name)

    def stop(self) -> int:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGINT)
        try:
            return self.popen.wait(90)
        finally:
            if self.popen.poll() is None:
                os.killpg(self.popen.pid, signal.SIGKILL)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=10).ok
    except requests.RequestException:  # still starting, or slow on a loaded machine
        return False


def _pid_of(run: Run, name: str) -> int | None:
    try:
        return run.child(name).pid
    except LookupError:
        return None


def test_a_child_that_dies_is_started_again_and_only_ctrl_c_stops_all(tmp_path: Path):
    db = connection.settings_dict
    web_port, sandbox_port, redis_port = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "AGENTDESK_DATA_DIR": str(tmp_path),
        "AGENTDESK_WEB_PORT": str(web_port),
        "AGENTDESK_REDIS_PORT": str(redis_port),
        "SANDBOX_URL": f"http://127.0.0.1:{sandbox_port}",
        "AGENTDESK_WORKERS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("REDIS_URL", None)  # run.py starts its own, which we may kill
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    run = Run(env)
    try:
        run.wait_for_line(r"Agentdesk is running", timeout=180)
        web_pid = _pid_of(run, "web")
        beat_pid = _pid_of(run, "beat")
        # The web first where they share the cores (config/sizing.worker_nice):
        # the worker runs below it, and comes back below it after a restart.
        # (Relative to the web's: this test may itself run below 0.)
        lower = min(19, run.child("web").nice() + sizing.worker_nice())
        assert sizing.worker_nice() == 10 and lower > run.child("web").nice()
        assert run.child("worker").nice() == lower

        for name, sig in (
            ("worker", signal.SIGKILL),
            ("redis", signal.SIGKILL),
            ("sandbox", signal.SIGTERM),
        ):
            victim = run.child(name)
            victim.send_signal(sig)
            run.wait_for_line(
                rf"{name}\s+exited on its own \((killed by {signal.Signals(sig).name}|"
                rf"exit code -?\d+)\); starting it again in \d+s"
            )
            run.wait_for_line(rf"{name}\s+started again \(pid \d+\)")
            wait_for(
                lambda n=name, old=victim.pid: _pid_of(run, n) not in (None, old),
                timeout=30,
                what=f"a new {name}",
            )

        assert run.child("worker").nice() == lower  # the restarted one too
        # The others never stopped, and the desk answers.
        assert _pid_of(run, "web") == web_pid
        assert _pid_of(run, "beat") == beat_pid
        wait_for(lambda: _answers(f"http://127.0.0.1:{web_port}/login/"), timeout=60, what="web")
        assert run.popen.poll() is None, run.terminal[-3000:]
    finally:
        code = run.stop()
    assert code == 0, run.terminal[-3000:]
    assert "stopped" in run.lines[-1], run.terminal[-2000:]
