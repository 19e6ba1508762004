"""A database gone silent is given up on in seconds, at both ends (issue 26).

A host cut off by the network says nothing: no reset, no close. PostgreSQL
runs here in a network namespace of its own (the campaign's core: bench/
chaos/netns.py) with the kernel's keepalive defaults, as a stock
postgres:16 or `make run`'s embedded server would have them without our
configuration; a client process (tests/agents/runtime/db_client.py) runs
with the production settings in a host's namespace, across a veth that the
test black-holes. Every byte stays on the veths of our own namespaces.

- The server frees the silent host's liveness lock within seconds, because
  our connection asked it for keepalives (libpq `options`): else the lock,
  and every session of that host, stay taken for the kernel's 2 hours.
- The client gives up on a query in flight and on a new connection within
  seconds (libpq keepalives, tcp_user_timeout, connect_timeout): else a
  slot, or the re-take of the liveness lock, hangs for the kernel's minutes.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from agents.runtime.ownership import LOCK_CLASS
from bench.chaos import netns
from bench.chaos.stack import PostgresServer, postgres_bindir
from tests.processes import ROOT, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        netns.unavailable() is not None or postgres_bindir() is None,
        reason=f"no veth partitions or no initdb here: {netns.unavailable()}",
    ),
]

# The settings' defaults: 5 s idle, then 3 probes 2 s apart (about 11 s);
# data unacknowledged for 10 s; a connection not made within 5 s.
GIVES_UP_S = 25.0


class Core:
    """The namespaces, and a PostgreSQL in the core left at its defaults."""

    def __init__(self, topology: netns.Topology, server: PostgresServer) -> None:
        self.topology = topology
        self.server = server

    def url_from(self, host: str) -> str:
        return f"postgres://postgres@{self.topology.core_address(host)}:{self.server.port}/postgres"

    def connect(self) -> psycopg.Connection:
        """From this process (the root namespace), over the root link no fault touches."""
        address = self.topology.core_address("root")
        return psycopg.connect(
            host=address, port=self.server.port, user="postgres", dbname="postgres", autocommit=True
        )


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> Iterator[Core]:
    topology = netns.Topology().up()
    try:
        server = PostgresServer(
            tmp_path_factory.mktemp("silent-db"),
            host=topology.core_address("root"),
            prefix=topology.exec_prefix("core"),
            keepalive=False,
        )
        server.init()
        server.start()
        try:
            yield Core(topology, server)
        finally:
            server.stop()
    finally:
        topology.down()


@pytest.fixture
def link(core: Core) -> Iterator[netns.VethLink]:
    veth = core.topology.link("a")
    yield veth
    veth.heal()


class Client:
    """db_client.py in host a's namespace; its lines as they come."""

    def __init__(self, core: Core, mode: str) -> None:
        env = dict(os.environ)
        env.update(DJANGO_SETTINGS_MODULE="config.settings", DATABASE_URL=core.url_from("a"))
        args = [*core.topology.exec_prefix("a"), sys.executable, "-m"]
        args += ["tests.agents.runtime.db_client", mode]
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: queue.Queue[dict] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def next(self, event: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {event!r} from the client within {timeout}s:\n{''.join(self.output)}"
                ) from None
            if line["event"] == event:
                return line
            raise AssertionError(f"expected {event!r}, got {line}:\n{''.join(self.output)}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def client(core: Core) -> Iterator[Callable[[str], Client]]:
    made: list[Client] = []

    def start(mode: str) -> Client:
        made.append(Client(core, mode))
        return made[-1]

    yield start
    for one in made:
        one.stop()


def _lock_held(conn: psycopg.Connection, key: int) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s"
        " AND objsubid = 2 AND objid::bigint = %s AND granted",
        [LOCK_CLASS, key],
    ).fetchone()
    return bool(row[0])


def test_the_server_frees_a_silent_hosts_liveness_lock_within_seconds(core, link, client):
    with core.connect() as conn:
        # The server's own keepalive: the kernel's, after 2 hours.
        assert int(conn.execute("SHOW tcp_keepalives_idle").fetchone()[0]) >= 3600
        worker = client("liveness")
        key = worker.next("locked", timeout=60)["key"]
        assert _lock_held(conn, key)

        link.blackhole()
        started = time.monotonic()
        wait_for(
            lambda: not _lock_held(conn, key),
            timeout=GIVES_UP_S + 15,
            what="the server to free the silent host's liveness lock",
        )
        freed_s = time.monotonic() - started
    print(f"liveness lock freed {freed_s:.1f}s after the link went silent")
    assert freed_s < GIVES_UP_S


def test_a_client_gives_up_on_a_silent_server_within_seconds(core, link, client):
    with core.connect() as conn:
        worker = client("query")
        worker.next("connected", timeout=60)
        wait_for(  # the query is on the server: the client waits on its answer
            lambda: conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)'"
            ).fetchone()[0],
            timeout=10,
            what="the client's query on the server",
        )

        link.blackhole()
        started = time.monotonic()
        failed = worker.next("query_failed", timeout=GIVES_UP_S + 15)
        query_s = time.monotonic() - started
        # Then the liveness lock taken anew, as the watchdog would: its new
        # connection across the black hole gives up at connect_timeout.
        refused = worker.next("connect_failed", timeout=GIVES_UP_S)
    print(
        f"query failed after {query_s:.1f}s ({failed['error']}); connect after {refused['s']:.1f}s"
    )
    assert query_s < GIVES_UP_S
    assert refused["s"] < 10, refused
