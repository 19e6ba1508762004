"""Issue 26's faults in the campaign: the new kinds at small scale, and the
new invariants, each shown able to fail on a history made bad on purpose.

The short campaign is its own process (`python -m bench.chaos`) with its
own PostgreSQL (initdb; the one the nemesis crashes), a private Redis and
two worker "hosts", so it shares nothing with the test database or the
Redis the other tests use. As root with iproute2 its partitions are real:
each host in a network namespace of its own, linked by a veth pair to the
namespace of the database, broker and sandbox (bench/chaos/netns.py,
tests/chaos/test_netns.py); elsewhere, loopback proxies (proxy.py, tested
below).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from types import SimpleNamespace

import pytest

from agents.models import Event
from bench.chaos import netns
from bench.chaos.checks import (
    attempts_sent,
    self_exit_problems,
    seq_problems,
    settle_problems,
    steady_problems,
)
from bench.chaos.nemesis import KINDS, Nemesis, Probe, Window
from bench.chaos.proxy import Proxy
from bench.chaos.report import recovery_times, repeats_by_kind
from bench.chaos.stack import postgres_bindir
from tests.processes import ROOT, wait_for

NEW_KINDS = [
    "redis_outage",
    "redis_flushall",
    "postgres_crash",
    "pg_terminate_all",
    "rolling_deploy",
    "partition_cut",
    "partition_blackhole",
    "partition_delay",
]
SUMMARY = re.compile(
    r"^chaos: seed=\d+ sessions=(?P<sessions>\d+) faults=(?P<faults>\d+) refunds=\d+ "
    r"duplicate_effects=(?P<duplicate>\d+) lost_effects=(?P<lost>\d+) "
    r"violations=(?P<violations>\d+) ",
    re.MULTILINE,
)


# --- the invariants fail on bad histories ------------------------------------------------


def test_a_gap_or_a_duplicate_seq_is_named():
    assert seq_problems([1, 2, 3, 4]) == []
    assert seq_problems([]) == []
    assert seq_problems([1, 2, 4]) == ["gaps: seqs [3] missing below 4"]
    assert seq_problems([1, 2, 2, 3]) == ["seqs recorded more than once: [2]"]
    assert seq_problems([2, 1, 3]) == ["seqs out of order: [2, 1, 3]"]


def test_only_attempts_that_may_have_left_count_as_sends():
    """Invariant 7: a not-idempotent call sent twice is a violation, but an
    attempt put back because it certainly never left (its provider refused
    every try; the slot that lost its claim said so) was not a send."""

    def event(kind: str, **data) -> Event:
        return Event(kind=kind, data={"tool_use_id": "toolu_1", **data})

    assert attempts_sent(1, []) == 1
    assert attempts_sent(2, []) == 2  # sent twice
    assert attempts_sent(2, [event("tool.unavailable")]) == 1
    assert attempts_sent(2, [event("tool.in_doubt"), event("tool.never_sent", then="resumed")]) == 1
    assert attempts_sent(2, [event("tool.never_sent", then="settled")]) == 2  # said too late


def test_a_turn_left_unsettled_a_minute_after_the_faults_is_a_violation():
    assert settle_problems(12.5, limit_s=60) == []
    assert settle_problems(75.0, limit_s=60) == [
        "every session settled 75.0s after the faults stopped (> 60s)"
    ]
    assert settle_problems(None, limit_s=60)  # never settled


def test_a_process_that_died_by_itself_is_a_violation():
    assert self_exit_problems([]) == []
    exit_line = "solo2 pid=41 exited by itself (status 1) at t=+12.0s"
    assert self_exit_problems([exit_line]) == [f"process died by itself: {exit_line}"]


def test_connections_past_the_bound_or_memory_that_stays_up_are_violations():
    steady = [
        ("warmup", 10, {"solo1": 150.0}),
        ("run", 20, {"solo1": 180.0}),
        ("after", 12, {"solo1": 160.0}),
    ]
    assert steady_problems(steady, conn_bound=30) == []

    leak = [*steady[:2], ("run", 45, {"solo1": 300.0}), ("after", 44, {"solo1": 900.0})]
    problems = steady_problems(leak, conn_bound=30)
    assert any("more worker connections than the bound 30 (worst 45" in p for p in problems)
    assert "44 worker connections after the faults (bound 30)" in problems
    assert "solo1: 900 MB after the faults, 150 MB in the warm-up" in problems
    assert steady_problems(steady[:2], conn_bound=30) == [
        "no sample after the faults: the steady level was not measured"
    ]


def test_a_call_paid_twice_is_charged_to_the_fault_that_lost_its_answer():
    windows = [Window("worker_sigkill", 100.0, 100.1), Window("postgres_crash", 110.0, 113.0)]
    repeats = [
        {"lost_at": 99.5, "at": 102.0},  # completed just before the kill, never recorded
        {"lost_at": 111.0, "at": 115.0},  # completed while the database was down
        {"lost_at": 116.0, "at": 118.0},  # a record retried until just after it came back
        {"lost_at": 140.0, "at": 141.0},  # nothing near: the runtime lost it by itself
    ]
    assert repeats_by_kind(repeats, windows) == {
        "worker_sigkill": 1,
        "postgres_crash": 2,
        "no fault": 1,
    }


def test_a_cut_hosts_lost_answers_are_its_cuts_not_a_crash_that_began_a_moment_later():
    """Host b is cut off; answers it got meanwhile are fenced when it comes
    back (host a took its sessions). A crash begun a moment after is the
    latest fault near them, but they were lost to the cut; host a's answer
    lost in the crash is the crash's, whatever host b's link did."""
    windows = [
        Window("partition_cut", 100.0, 108.0, host="b"),
        Window("postgres_crash", 107.0, 108.5),
    ]
    hosts = {"10.0.0.2": "a", "10.0.0.3": "b"}
    repeats = [
        {"lost_at": 106.0, "lost_by": "10.0.0.3", "at": 112.0},  # b's, fenced after the cut
        {"lost_at": 107.5, "lost_by": "10.0.0.2", "at": 111.0},  # a's, lost in the crash
        {"lost_at": 104.0, "lost_by": "10.0.0.2", "at": 104.5},  # a's, nothing of its own near
    ]
    assert repeats_by_kind(repeats, windows, hosts) == {
        "partition_cut": 1,
        "postgres_crash": 1,
        "no fault": 1,
    }
    # Without knowing the hosts, the latest fault near each takes it.
    assert repeats_by_kind(repeats, windows) == {"postgres_crash": 2, "partition_cut": 1}


def test_a_recovery_another_fault_overlapped_is_told_apart():
    """A kill inside a Redis outage waits for the broker, whatever the
    runtime does: its sample counts in the p99, and the report says which
    samples no other fault overlapped."""
    kill = Probe("worker_sigkill", "solo1", 100.0, [1, 2])
    windows = [
        Window("worker_sigkill", 99.9, 100.0),  # its own
        Window("redis_restart", 101.0, 113.0),  # the broker away for 12 s
    ]
    at = {1: 101.0, 2: 114.0}  # session 1 recovered before the outage; 2 after it
    world = SimpleNamespace(
        events={
            sid: [SimpleNamespace(kind="recovery", created_at=datetime.fromtimestamp(t))]
            for sid, t in at.items()
        }
    )
    recovery = recovery_times([kill], world, windows=windows)
    assert recovery.samples == pytest.approx([1.0, 14.0])
    assert recovery.alone == pytest.approx([1.0])


def test_with_a_quota_the_decks_after_the_first_hold_only_the_kinds_still_short(monkeypatch):
    """CHAOS_FAULTS_PER_KIND: a rare kind (weight 1) reaches its count in
    as few faults as can be dealt, not one a deck of every weight."""
    monkeypatch.delenv("CHAOS_KINDS", raising=False)
    nothing = dict(workers=None, redis=None, database=None, sandbox_url="")
    nemesis = Nemesis(seed=3, started=0.0, quota=2, **nothing)
    first = [nemesis._deal() for _ in range(sum(nemesis.kinds.values()))]
    assert sorted(set(first[: len(nemesis.kinds)])) == sorted(nemesis.kinds)  # one of each first
    second = [nemesis._deal() for _ in range(len(nemesis.kinds))]
    assert sorted(second) == sorted(nemesis.kinds)  # then each short kind once, weight or not
    nemesis.counts.update({kind: 2 for kind in nemesis.kinds if kind != "rolling_deploy"})
    assert {nemesis._deal() for _ in range(5)} == {"rolling_deploy"}
    assert KINDS["rolling_deploy"] == 1


# --- the partition's proxy: a black hole is silent, and healing resets -------------------


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_a_black_holed_link_delivers_nothing_says_nothing_and_heals_with_a_reset():
    server, port = _echo_server()
    proxy = Proxy(("127.0.0.1", port)).start()
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        client.sendall(b"ping")
        assert client.recv(16) == b"ping"

        proxy.blackhole(server_notices_s=0.2)
        client.settimeout(0.5)
        client.sendall(b"lost")
        with pytest.raises(TimeoutError):  # no answer, and no error either
            client.recv(16)

        proxy.heal()
        client.settimeout(5)
        try:  # the old connection is over: what went into the hole is lost
            ended = client.recv(16) == b""
        except ConnectionResetError:
            ended = True
        assert ended
        fresh = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        fresh.sendall(b"back")
        assert fresh.recv(16) == b"back"
        fresh.close()
    finally:
        proxy.stop()
        server.close()


def test_a_slow_link_delivers_late():
    server, port = _echo_server()
    proxy = Proxy(("127.0.0.1", port)).start()
    try:
        proxy.delay(0.3)
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        started = time.monotonic()
        client.sendall(b"slow")
        assert wait_for(lambda: client.recv(16), timeout=5, what="the echo") == b"slow"
        assert time.monotonic() - started >= 0.55  # held each way
        client.close()
    finally:
        proxy.stop()
        server.close()


# --- the short campaign with the new kinds ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(postgres_bindir() is None, reason="no initdb: the campaign's own PostgreSQL")
def test_the_new_faults_lose_nothing_double_nothing_and_kill_no_process():
    """Each new kind at least once over a few tickets (outages narrowed to
    a few seconds so the run stays short), then all ten invariants."""
    env = {
        **os.environ,
        "SEED": "26",
        "SESSIONS": "8",
        "CHAOS_DATABASE": "agentdesk_chaos_faults_ci",
        "CHAOS_KINDS": ",".join(NEW_KINDS),
        "CHAOS_FAULTS_PER_KIND": "1",
        "CHAOS_REDIS_OUTAGE_S": "5,6",
        # Longer than PostgreSQL takes to drop a silent host's connections
        # (~5 s: stack.PostgresServer), so the other host takes sessions over.
        "CHAOS_PARTITION_S": "8,9",
        "CHAOS_WARMUP_S": "3",
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    env.pop("REDIS_URL", None)  # the campaign starts its own
    done = subprocess.run(
        [sys.executable, "-m", "bench.chaos"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    output = done.stdout + done.stderr
    match = SUMMARY.search(done.stdout)
    assert match, f"no summary line; output:\n{output[-6000:]}"
    report = done.stdout[done.stdout.find("== chaos report") :]
    assert int(match["violations"]) == 0, report
    assert int(match["duplicate"]) == 0 and int(match["lost"]) == 0, report
    assert done.returncode == 0, output[-6000:]
    for kind in NEW_KINDS:
        assert re.search(rf"^    {kind}: [1-9]", report, re.MULTILINE), (
            f"{kind} never ran\n{report}"
        )
    assert "processes exited by themselves: 0" in report, report
    if netns.unavailable() is None:  # the partitions were veth links, not proxies
        assert "partitions: veth pairs between network namespaces" in report, report
