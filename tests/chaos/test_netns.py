"""The campaign's real partitions (bench/chaos/netns.py): namespaces made and
removed, and what a host sees of each fault on its veth.

Sockets are opened inside the namespaces (a thread that joined one), so
every byte here stays on the veths of our own namespaces; that nothing can
leave the machine is shown from the routing tables, never by sending a
packet anywhere else.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import threading
import time

import pytest

from bench.chaos import netns
from tests.processes import wait_for

pytestmark = pytest.mark.skipif(
    netns.unavailable() is not None,
    reason=f"no veth partitions here: {netns.unavailable()}",
)


@pytest.fixture
def topology():
    made = netns.Topology().up()
    yield made
    made.down()


@pytest.fixture
def echo(topology):
    """An echo server in the core namespace; its port."""
    server = topology.listen("core")

    def serve(conn) -> None:
        with conn:
            try:
                while data := conn.recv(65536):
                    conn.sendall(data)
            except OSError:
                return

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _echoed(sock, data: bytes) -> bytes:
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def _namespaces() -> set[str]:
    return set(
        subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    )


def _links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_the_topology_is_made_and_removed():
    topology = netns.Topology().up()
    names = {topology.core, *topology.hosts.values()}
    try:
        assert names <= _namespaces()
        assert f" {topology.root_link.near}@" in _links()
    finally:
        topology.down()
    assert not names & _namespaces()
    assert f" {topology.root_link.near}@" not in _links()


def test_no_namespace_has_a_route_off_the_machine(topology):
    assert topology.route_problems() == []
    for ns in (topology.core, *topology.hosts.values()):
        routes = netns._routes(ns)
        assert routes, ns
        assert not [r for r in routes if r.get("dst") == "default" or "gateway" in r], ns
        unicast = {r["dst"] for r in routes if r.get("type", "unicast") == "unicast"}
        assert all(dst.startswith("10.226.") and dst.endswith("/30") for dst in unicast), unicast

    # From the root namespace the host links' addresses are prohibited, not
    # left to the machine's default route (read from the table, not tried).
    root = json.loads(
        subprocess.run(
            ["ip", "-j", "route", "show", str(netns.HOST_LINKS)], capture_output=True, text=True
        ).stdout
    )
    assert [r.get("type") for r in root] == ["prohibit"], root

    # The check bites: a default route over a host's own veth is caught
    # (added and removed again; nothing is sent).
    host = topology.hosts["a"]
    subprocess.run(["ip", "-n", host, "route", "add", "default", "dev", "core"], check=True)
    try:
        assert any("route off its links" in p for p in topology.route_problems())
    finally:
        subprocess.run(["ip", "-n", host, "route", "del", "default"], check=True)
    assert topology.route_problems() == []


def test_a_cut_link_refuses_at_once_and_heals(topology, echo):
    core = (topology.core_address("a"), echo)
    client = topology.connect("a", core, timeout=5)
    assert _echoed(client, b"ping") == b"ping"
    link = topology.link("a")

    link.cut()
    started = time.monotonic()
    with pytest.raises(OSError) as refused:
        topology.connect("a", core, timeout=5)
    assert refused.value.errno == errno.ENETUNREACH
    with pytest.raises(OSError):  # the open connection fails too, at once
        _echoed(client, b"lost")
    assert time.monotonic() - started < 1.0
    # Host b's link is its own: untouched.
    other = topology.connect("b", (topology.core_address("b"), echo), timeout=5)
    assert _echoed(other, b"b is fine") == b"b is fine"

    link.heal()
    fresh = topology.connect("a", core, timeout=5)
    assert _echoed(fresh, b"back") == b"back"


def test_a_black_hole_is_silent_and_heals(topology, echo):
    core = (topology.core_address("a"), echo)
    client = topology.connect("a", core, timeout=5)
    assert _echoed(client, b"ping") == b"ping"
    link = topology.link("a")

    link.blackhole()
    client.settimeout(1.0)
    client.sendall(b"into the hole")
    with pytest.raises(TimeoutError):  # no answer, and no error either
        client.recv(64)
    with pytest.raises(TimeoutError):  # a new connection is not refused: it hangs
        topology.connect("a", core, timeout=1.5)

    link.heal()
    # The echo server never forgot the connection: TCP delivers what waited.
    client.settimeout(10)
    got = wait_for(lambda: client.recv(64), timeout=10, what="the held echo")
    assert got == b"into the hole"


def test_a_slow_link_delivers_late(topology, echo):
    core = (topology.core_address("a"), echo)
    client = topology.connect("a", core, timeout=30)
    payload = b"x" * 6000
    started = time.monotonic()
    assert _echoed(client, payload) == payload
    fast_s = time.monotonic() - started
    link = topology.link("a")

    how = link.delay(0.3)
    assert how.startswith(topology.slow_kind)
    started = time.monotonic()
    assert _echoed(client, payload) == payload
    slow_s = time.monotonic() - started
    assert slow_s >= 0.5 > fast_s, (how, slow_s, fast_s)

    link.heal()
    started = time.monotonic()
    assert _echoed(client, payload) == payload
    assert time.monotonic() - started < 0.5


def test_namespaces_of_a_dead_campaign_are_swept():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    stale = netns.Topology(owner_pid=pid).up()
    names = {stale.core, *stale.hosts.values()}
    try:
        swept = netns.sweep_stale()
        assert {s.split(" ")[0] for s in swept} >= names
        assert not names & _namespaces()
        assert f" {stale.root_link.near}@" not in _links()
    finally:
        stale.down()
