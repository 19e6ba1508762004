"""Real partitions between hosts: network namespaces linked by veth pairs.

Per campaign run (names carry the campaign's pid, so two runs never meet):

    root (the campaign) --veth-- core (PostgreSQL, Redis, the sandbox, beat)
                                       core --veth-- a (workers of host a)
                                       core --veth-- b (workers of host b)

Every link is a private /30 in 10.226.0.0/16 (root links in 10.226.0.0/17,
one per run by its pid; the host links 10.226.200.0/30 and .4/30, which
only exist inside our namespaces). No namespace has a default route, a
gateway or forwarding: each reaches only the far end of its own veths, so
nothing can leave the machine (`route_problems` checks it at setup).
IPv6 is off on every link, so the IPv4 /30s are the only routes.

A host's link (nemesis.py, through `VethLink`):

- **cut**: the host's end set down. A new connection fails at once
  (ENETUNREACH). Linux does not fail the host's open connections when its
  interface goes down (they retransmit in silence: measured), so the cut
  also aborts them (`ss -K`): the host gets immediate errors, as the proxy's
  cut gave. The core side hears nothing; PostgreSQL's keepalive drops the
  host's connections within seconds (stack.PostgresServer).
- **black hole**: the core's end set down. The veth drops everything in
  silence both ways; with the neighbour entries permanent, not even a
  failed ARP tells the host (a new connection hangs, it is not refused).
- **slow**: `tc netem delay` on both ends when the kernel has sch_netem,
  else a `tbf` rate limit on both ends (one full-size packet per delay),
  probed once at setup (`Topology.slow_kind`).
- **heal**: both ends up, a slowing qdisc drained and removed, the
  neighbour entries back.

Namespaces need root and iproute2 (`unavailable()` says why not); the
campaign then falls back to the loopback proxies (proxy.py). A campaign
that crashed leaves its namespaces behind: `sweep_stale()` at the next
start removes those whose owning pid is gone (and ends what still runs in
them: processes of that dead campaign).
"""

from __future__ import annotations

import ctypes
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "adchaos-"  # namespace names: adchaos-<pid>-core, adchaos-<pid>-a, ...
ROOT_LINKS = ipaddress.ip_network("10.226.0.0/17")  # one /30 per run, in the root namespace
HOST_LINKS = ipaddress.ip_network("10.226.200.0/24")  # core <-> host /30s, inside our namespaces
CLONE_NEWNET = 0x40000000
MTU_BITS = 1500 * 8


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.environ.get("CHAOS_PARTITIONS", "").strip() == "proxy":
        return "CHAOS_PARTITIONS=proxy"
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    for tool in ("ip", "tc", "ss"):
        if shutil.which(tool) is None:
            return f"no `{tool}` (iproute2)"
    return None


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """One iproute2 command; its stderr in the error when it fails."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=20)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def in_ns(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run("ip", "netns", "exec", ns, *args, check=check)


def _namespaces() -> list[str]:
    out = run("ip", "-j", "netns", "list").stdout.strip()
    return [entry["name"] for entry in json.loads(out or "[]")]


def _owner_pid(name: str) -> int | None:
    try:
        return int(name[len(PREFIX) :].split("-", 1)[0])
    except ValueError:
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_namespace(ns: str) -> list[int]:
    """End what still runs in `ns` (ours: the namespace carries our prefix
    and our pid), then delete it; the pids that had to be killed."""
    pids = [int(p) for p in run("ip", "netns", "pids", ns, check=False).stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    run("ip", "netns", "del", ns, check=False)
    return pids


def sweep_stale() -> list[str]:
    """Remove the namespaces (and root-side veths) of campaigns that died
    without their teardown (SIGKILL, a crashed test run)."""
    swept = []
    for ns in _namespaces():
        pid = _owner_pid(ns) if ns.startswith(PREFIX) else None
        if pid is None or _pid_alive(pid):
            continue
        killed = _remove_namespace(ns)
        run("ip", "link", "del", root_veth(pid), check=False)
        swept.append(ns + (f" (ended pids {killed})" if killed else ""))
    return swept


def root_veth(pid: int) -> str:
    return f"adc{pid}"  # at most 10 characters (IFNAMSIZ is 16)


def _root_subnet(pid: int) -> ipaddress.IPv4Network:
    """The run's root link, from its pid: two live campaigns collide only
    when their pids agree modulo 8,192 (checked at setup)."""
    subnets = 2 ** (30 - ROOT_LINKS.prefixlen)
    base = int(ROOT_LINKS.network_address) + 4 * (pid % subnets)
    return ipaddress.ip_network(f"{ipaddress.ip_address(base)}/30")


@dataclass(frozen=True)
class Link:
    """One veth pair: `near` in namespace `near_ns`, `far` in `far_ns`."""

    near_ns: str  # "" is the root namespace
    near: str
    near_ip: str
    far_ns: str
    far: str
    far_ip: str


class Topology:
    """The namespaces of one campaign run, made by `up()` and removed by `down()`."""

    def __init__(self, hosts: tuple[str, ...] = ("a", "b"), owner_pid: int | None = None) -> None:
        self.pid = owner_pid or os.getpid()
        self.core = f"{PREFIX}{self.pid}-core"
        self.hosts = {h: f"{PREFIX}{self.pid}-{h}" for h in hosts}
        root_net = list(_root_subnet(self.pid).hosts())
        self.root_link = Link(
            "", root_veth(self.pid), str(root_net[0]), self.core, "root", str(root_net[1])
        )
        subnets = list(HOST_LINKS.subnets(new_prefix=30))
        self.host_links = {}
        for (host, ns), net in zip(self.hosts.items(), subnets, strict=False):
            core_ip, host_ip = (str(ip) for ip in net.hosts())
            self.host_links[host] = Link(self.core, f"host-{host}", core_ip, ns, "core", host_ip)
        self.slow_kind = "none"  # "netem" or "tbf" once probed
        self.made = False

    # --- addresses -----------------------------------------------------------------------

    def core_address(self, seen_from: str = "root") -> str:
        """Where the core's services are, for the root namespace or a host."""
        if seen_from == "root":
            return self.root_link.far_ip
        return self.host_links[seen_from].near_ip

    def exec_prefix(self, where: str) -> list[str]:
        """argv prefix that runs a command in "core" or in a host's namespace."""
        ns = self.core if where == "core" else self.hosts[where]
        return ["ip", "netns", "exec", ns]

    # --- making and removing ---------------------------------------------------------------

    def up(self) -> Topology:
        problems = self._root_conflicts()
        if problems:
            raise RuntimeError("; ".join(problems))
        self.made = True  # from here on, down() has something to remove
        # The host links' addresses exist only inside our namespaces: from the
        # root namespace they would follow the default route off the machine.
        # Prohibited there, a mistaken connect fails here instead.
        run("ip", "route", "replace", "prohibit", str(HOST_LINKS))
        for ns in (self.core, *self.hosts.values()):
            run("ip", "netns", "add", ns)
            _ipv6_off(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        self._make_link(self.root_link)
        for link in self.host_links.values():
            self._make_link(link)
            pin_neighbours(link)
        problems = self.route_problems()
        if problems:
            raise RuntimeError("a namespace can reach more than its links: " + "; ".join(problems))
        self.slow_kind = self._probe_slow_kind()
        return self

    def down(self) -> list[int]:
        """Remove every namespace and veth of the run; the pids of processes
        that were still inside (their owners should have stopped them)."""
        if not self.made:
            return []
        killed = []
        for ns in (*self.hosts.values(), self.core):
            killed += _remove_namespace(ns)
        run("ip", "link", "del", self.root_link.near, check=False)  # gone with core, normally
        if not any(ns.startswith(PREFIX) for ns in _namespaces()):  # the last campaign out
            run("ip", "route", "del", "prohibit", str(HOST_LINKS), check=False)
        self.made = False
        return killed

    def _root_conflicts(self) -> list[str]:
        """Our root /30 must be new to the root namespace: no other address
        or route of the machine (or of another campaign) overlaps it."""
        net = _root_subnet(self.pid)
        routes = json.loads(run("ip", "-j", "-4", "route", "show", "table", "all").stdout or "[]")
        problems = []
        for route in routes:
            dst = route.get("dst", "")
            if dst in ("default", "") or route.get("type") in ("broadcast", "local"):
                continue
            if ipaddress.ip_network(dst, strict=False).overlaps(net):
                problems.append(f"{net} overlaps the machine's route {dst} dev {route.get('dev')}")
        return problems

    def _make_link(self, link: Link) -> None:
        near, far = _ip(link.near_ns), _ip(link.far_ns)
        run(*near, "link", "add", link.near, "type", "veth", "peer", "name", link.far,
            "netns", link.far_ns)  # fmt: skip
        if not link.near_ns:  # created in the root namespace: IPv6 off on it alone
            Path(f"/proc/sys/net/ipv6/conf/{link.near}/disable_ipv6").write_text("1")
        run(*near, "addr", "add", f"{link.near_ip}/30", "dev", link.near)
        run(*far, "addr", "add", f"{link.far_ip}/30", "dev", link.far)
        run(*near, "link", "set", link.near, "up")
        run(*far, "link", "set", link.far, "up")

    def _probe_slow_kind(self) -> str:
        """netem when the kernel has it, else tbf (a rate limit), else none."""
        link = next(iter(self.host_links.values()))
        for kind, args in (("netem", ["delay", "1ms"]), ("tbf", _tbf(0.1))):
            tc = ["tc", "-n", link.near_ns, "qdisc"]
            if run(*tc, "add", "dev", link.near, "root", kind, *args, check=False).returncode:
                continue
            run(*tc, "del", "dev", link.near, "root", check=False)
            return kind
        return "none"

    # --- what may leave a namespace ----------------------------------------------------------

    def route_problems(self) -> list[str]:
        """Every route of every namespace of ours goes over one of its own
        veths (or lo), with no gateway and no default; no namespace
        forwards; in the root namespace our veth carries our /30 alone.
        Read from the routing tables: no packet is sent to find out."""
        problems = []
        own = {self.core: {"lo", "root", *(link.near for link in self.host_links.values())}}
        for host, ns in self.hosts.items():
            own[ns] = {"lo", self.host_links[host].far}
        for ns, devs in own.items():
            problems += [f"{ns}: {p}" for p in _foreign_routes(ns, devs)]
            forward = in_ns(ns, "cat", "/proc/sys/net/ipv4/ip_forward").stdout.strip()
            if forward != "0":
                problems.append(f"{ns}: forwards (ip_forward={forward})")
        problems += [f"root: {p}" for p in self._root_link_routes()]
        return problems

    def _root_link_routes(self) -> list[str]:
        net = str(_root_subnet(self.pid))
        routes = _routes("", self.root_link.near)
        main = [r for r in routes if r.get("type", "unicast") == "unicast"]
        bad = [r for r in main if r.get("dst") != net or "gateway" in r]
        return [f"unexpected route on {self.root_link.near}: {r}" for r in bad]

    # --- a socket inside a namespace (tests) -------------------------------------------------

    def connect(self, where: str, address: tuple[str, int], timeout: float) -> socket.socket:
        return _in_namespace(self._ns(where), lambda: socket.create_connection(address, timeout))

    def listen(self, where: str, port: int = 0) -> socket.socket:
        def bind() -> socket.socket:
            sock = socket.socket()
            sock.bind(("0.0.0.0", port))  # inside the namespace: its links only
            sock.listen(16)
            return sock

        return _in_namespace(self._ns(where), bind)

    def _ns(self, where: str) -> str:
        return self.core if where == "core" else self.hosts[where]

    def link(self, host: str) -> VethLink:
        return VethLink(self.host_links[host], self.slow_kind)


class VethLink:
    """One host's link to the core, as the nemesis faults it (cut,
    blackhole, delay, heal: the proxy's interface, proxy.py)."""

    def __init__(self, link: Link, slow_kind: str) -> None:
        self.link = link
        self.slow_kind = slow_kind

    def cut(self) -> None:
        run("ip", "-n", self.link.far_ns, "link", "set", self.link.far, "down")
        # The host's open connections to the core fail now, not after minutes
        # of silent retransmission: the interface is gone, so is the flow.
        in_ns(self.link.far_ns, "ss", "-K", "-t", "dst", self.link.near_ip, check=False)

    def blackhole(self) -> None:
        run("ip", "-n", self.link.near_ns, "link", "set", self.link.near, "down")

    def delay(self, seconds: float) -> str:
        """Slow both directions; says how (netem delay, or tbf's rate)."""
        if self.slow_kind == "none":
            raise RuntimeError("no qdisc to slow a link with (neither netem nor tbf)")
        args = ["delay", f"{int(seconds * 1000)}ms"] if self.slow_kind == "netem" else _tbf(seconds)
        for ns, dev in ((self.link.near_ns, self.link.near), (self.link.far_ns, self.link.far)):
            run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", self.slow_kind, *args)
        return f"{self.slow_kind} {' '.join(args[:2])}"

    def heal(self) -> None:
        ends = ((self.link.near_ns, self.link.near), (self.link.far_ns, self.link.far))
        for ns, dev in ends:
            run("ip", "-n", ns, "link", "set", dev, "up")
        for ns, dev in ends:
            _unslow(ns, dev)
        # A link set down loses its neighbour entries, permanent ones too.
        pin_neighbours(self.link)

    def stop(self) -> None:
        """Nothing of its own to stop: Topology.down() removes the link."""


def _unslow(ns: str, dev: str) -> None:
    """Remove a slowing qdisc, after letting what it holds through: deleting
    it with packets queued drops them, and their flows would then wait out a
    TCP retransmission timeout (seconds) that a healed link does not cause."""
    shown = json.loads(run("tc", "-n", ns, "-j", "-s", "qdisc", "show", "dev", dev).stdout)
    kind = shown[0].get("kind") if shown else None
    if kind not in ("netem", "tbf"):
        return
    fast = (
        ["delay", "0ms"]
        if kind == "netem"
        else ["rate", "10gbit", "burst", "64kb", "latency", "5s"]
    )
    run("tc", "-n", ns, "qdisc", "change", "dev", dev, "root", kind, *fast, check=False)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and _backlog(ns, dev):
        time.sleep(0.01)
    run("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)


def _backlog(ns: str, dev: str) -> int:
    shown = json.loads(run("tc", "-n", ns, "-j", "-s", "qdisc", "show", "dev", dev).stdout)
    return sum(q.get("qlen", 0) for q in shown)


def _tbf(seconds: float) -> list[str]:
    """A rate at which one full-size packet takes `seconds` on the wire
    (0.1-1.5 s: 120-8 kbit/s), a burst of one packet, and a queue that
    holds up to 5 s of traffic before it drops (a slow link; a congested
    one loses packets too, as a real one does)."""
    kbit = max(8, int(MTU_BITS / seconds / 1000))
    return ["rate", f"{kbit}kbit", "burst", "1600", "latency", "5s"]


def _routes(ns: str, dev: str | None = None) -> list[dict]:
    routes = []
    for family in ("-4", "-6"):
        cmd = ["ip", "-j", family] + (["-n", ns] if ns else []) + ["route", "show", "table", "all"]
        routes += json.loads(run(*cmd, *(["dev", dev] if dev else [])).stdout or "[]")
    return routes


def _foreign_routes(ns: str, own_devs: set[str]) -> list[str]:
    problems = []
    for route in _routes(ns):
        if route.get("dst") == "default" or "gateway" in route or "via" in route:
            problems.append(f"route off its links: {route}")
        elif route.get("dev") not in own_devs:
            problems.append(f"route over a device not its own: {route}")
    return problems


def _ip(ns: str) -> list[str]:
    return ["ip", "-n", ns] if ns else ["ip"]


def pin_neighbours(link: Link) -> None:
    """Permanent neighbour entries both ways: a black-holed host then
    learns nothing, not even from a failed ARP ("no route to host")."""
    near_mac, far_mac = _mac(link.near_ns, link.near), _mac(link.far_ns, link.far)
    for ns, dev, ip, mac in (
        (link.near_ns, link.near, link.far_ip, far_mac),
        (link.far_ns, link.far, link.near_ip, near_mac),
    ):
        run(*_ip(ns), "neigh", "replace", ip, "lladdr", mac, "dev", dev, "nud", "permanent")


def _mac(ns: str, dev: str) -> str:
    return json.loads(run(*_ip(ns), "-j", "link", "show", "dev", dev).stdout)[0]["address"]


def _ipv6_off(ns: str) -> None:
    """No IPv6 on our links: no link-local routes beside the /30s."""
    if os.path.exists("/proc/sys/net/ipv6"):
        script = (
            "for k in all default lo; do echo 1 > /proc/sys/net/ipv6/conf/$k/disable_ipv6; done"
        )
        in_ns(ns, "sh", "-c", script)


def _in_namespace(ns: str, make):
    """Run `make` on a thread of its own that joined namespace `ns`: a
    socket it makes lives there, whichever thread then uses it. Only for a
    socket used as it is: a client library that reconnects would open its
    new socket from the calling thread, in the root namespace, whose
    default route leads off the machine."""
    libc = ctypes.CDLL(None, use_errno=True)
    result: dict = {}

    def enter() -> None:
        try:
            with open(f"/run/netns/{ns}") as handle:
                if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns {ns}")
            result["value"] = make()
        except BaseException as exc:  # noqa: BLE001 (handed to the caller)
            result["error"] = exc

    thread = threading.Thread(target=enter, name=f"in-{ns}")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
