"""Prometheus metrics, named `agentdesk_*`.

Counters and histograms are counted where things happen (the engine in the
workers, decisions in web). Workers and web are separate processes, so with
PROMETHEUS_MULTIPROC_DIR set (scripts/run.py and the test fixtures set it;
it must be in the environment before prometheus_client is imported) each
process writes its values to memory-mapped files there and `/metrics` sums
them. Without it, each process keeps its own (fine for a single process).
In docker-compose.yml web and the workers are separate containers sharing
one such directory (a volume); every container's first process is pid 1, so
a file is named by host name and pid, not by pid alone.

Gauges about durable state (pending approvals, in-doubt calls, sessions by
status, the Celery queue) are not counted anywhere: `StateCollector`
computes them at scrape time with a few cheap, index-backed queries, so they
are right even after a crash or a restart.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


def _host_and_pid() -> str:
    return f"{_HOST}-{os.getpid()}"


_HOST = socket.gethostname()
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # Before any metric below exists: each takes the value class when made.
    # Distinct across containers on one volume (a container's host name is
    # its own); a fork gets a new pid, hence a file of its own, as before.
    values.ValueClass = values.MultiProcessValue(_host_and_pid)

# Latency buckets from 1 ms (a fast tool) to 2 min (a slow model reply).
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600)

STEPS = Counter(
    "agentdesk_steps",
    "Engine steps by kind (model, tool) and outcome",
    ["kind", "outcome"],
)
MODEL_CALLS = Counter(
    "agentdesk_model_calls",
    "Model calls by outcome (ok, unavailable, aborted)",
    ["outcome"],
)
TOOL_CALLS = Counter(
    "agentdesk_tool_calls",
    "Tool calls by tool and outcome (the call's status once the step ends)",
    ["tool", "outcome"],
)
STEP_SECONDS = Histogram(
    "agentdesk_step_seconds",
    "Wall time of one step, I/O and its commit, by kind",
    ["kind"],
    buckets=_BUCKETS,
)
MODEL_SECONDS = Histogram(
    "agentdesk_model_call_seconds",
    "Wall time of one model call (request to the last streamed byte)",
    buckets=_BUCKETS,
)
TOKENS = Counter(
    "agentdesk_model_tokens",
    "Tokens used by model calls, by direction (input, output)",
    ["direction"],
)
TURNS = Counter(
    "agentdesk_turns_finished",
    "Turns finished, by final status",
    ["status"],
)
RECOVERIES = Counter(
    "agentdesk_recoveries",
    "Claims that found a dead previous owner (a worker died mid-turn)",
)
IN_DOUBT = Counter(
    "agentdesk_in_doubt",
    "Tool calls marked in doubt (outcome unknown, handed to a human)",
)
LOGIN_FAILURES = Counter(
    "agentdesk_login_failures",
    "Failed log-ins (wrong user name or password, or refused while locked out)",
)
LOGIN_LOCKOUTS = Counter(
    "agentdesk_login_lockouts",
    "Log-in lockouts: a user name or client address reached AXES_FAILURE_LIMIT",
)
# The broker (config/broker.py): a worker loses Redis, goes on, comes back.
BROKER_DISCONNECTS = Counter(
    "agentdesk_broker_disconnects",
    "Broker connections lost, by process kind (the process lived on)",
    ["process"],
)
BROKER_RECONNECTS = Counter(
    "agentdesk_broker_reconnects",
    "Broker connections made again after a loss, by process kind",
    ["process"],
)
TRIGGERS_RUN_HERE = Counter(
    "agentdesk_triggers_run_here",
    "Triggers a worker could not send (the broker away) and ran on a slot of its own",
)
BROKER_DOWN = Gauge(
    "agentdesk_broker_down",
    "Live processes without their broker connection now, by process kind",
    ["process"],
    multiprocess_mode="livesum",
)
APPROVAL_SECONDS = Histogram(
    "agentdesk_approval_decision_seconds",
    "Time from an approval request to its decision, by decision",
    ["decision"],
    buckets=_WAIT_BUCKETS,
)

# label() children looked up once: the engine counts on every step, and
# labels() (validation, a lock, a dict) costs more than the increment.
# Many slots per process: two threads racing on a missing key both store the
# child prometheus_client hands out for those labels (its own dict, under its
# own lock), so the race is benign; increments are atomic in the client.
_children: dict[tuple[int, tuple[str, ...]], Any] = {}


def child(metric: Any, *labels: str) -> Any:
    key = (id(metric), labels)
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(*labels)
    return found


def step(kind: str, outcome: str, seconds: float) -> None:
    child(STEPS, kind, outcome).inc()
    child(STEP_SECONDS, kind).observe(seconds)


# --- Scrape time ---------------------------------------------------------------------

# Pending approvals: approval_pending_idx (partial, created_at WHERE pending).
_APPROVALS_SQL = """
    SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)
    FROM approvals_approval WHERE status = 'pending'
"""
# Sessions by status: one pass over session_status_idx (status, updated_at).
_SESSIONS_SQL = "SELECT status, count(*) FROM agents_session GROUP BY status"
# In-doubt calls that wait on a human: only sessions in_doubt hold them (a
# call left in_doubt by an ended turn waits on nobody). Sessions by status
# index, turns by (session, number), calls by turn: no scan of the calls.
_IN_DOUBT_SQL = """
    SELECT count(*) FROM agents_session s
    JOIN agents_turn t ON t.session_id = s.id
    JOIN agents_toolcall c ON c.turn_id = t.id
    WHERE s.status = 'in_doubt' AND t.status = 'waiting_for_approval' AND c.status = 'in_doubt'
"""


# Collectors other apps register at start (AppConfig.ready), computed per scrape.
SCRAPE_COLLECTORS: list[Collector] = []


class StateCollector(Collector):
    """Gauges computed from Postgres and Redis when /metrics is scraped."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(_APPROVALS_SQL)
            pending, oldest = cursor.fetchone()
            cursor.execute(_SESSIONS_SQL)
            sessions = cursor.fetchall()
            cursor.execute(_IN_DOUBT_SQL)
            (in_doubt,) = cursor.fetchone()
        yield GaugeMetricFamily(
            "agentdesk_approvals_pending", "Approvals waiting for a decision", value=pending
        )
        yield GaugeMetricFamily(
            "agentdesk_approval_oldest_pending_seconds",
            "Age of the oldest pending approval (0 when none)",
            value=float(oldest),
        )
        yield GaugeMetricFamily(
            "agentdesk_tool_calls_in_doubt",
            "Tool calls in doubt that wait on a human",
            value=in_doubt,
        )
        by_status = GaugeMetricFamily("agentdesk_sessions", "Sessions by status", labels=["status"])
        for status, count in sessions:
            by_status.add_metric([status], count)
        yield by_status
        yield from _queue_depth()


def _queue_depth() -> Iterator[GaugeMetricFamily]:
    """Messages waiting in the Celery queue. With Redis priorities the queue
    is one list per priority step: `celery` (step 0) and `celery\\x06\\x16<n>`."""
    import redis
    from django.conf import settings

    steps = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("priority_steps", [0])
    names = {0: "celery"} | {n: f"celery\x06\x16{n}" for n in steps if n}
    family = GaugeMetricFamily(
        "agentdesk_queue_depth", "Celery messages waiting, by priority", labels=["priority"]
    )
    try:
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2)
        pipe = client.pipeline(transaction=False)
        for key in names.values():
            pipe.llen(key)
        depths = pipe.execute()
        client.close()
    except redis.RedisError:
        return  # no broker: no figure, rather than a wrong one (and /metrics still answers)
    for priority, depth in zip(names, depths, strict=True):
        family.add_metric([str(priority)], depth)
    yield family
    yield GaugeMetricFamily(
        "agentdesk_queue_depth_total", "Celery messages waiting, all priorities", sum(depths)
    )


def render() -> tuple[bytes, str, float]:
    """The exposition text, its content type and how long it took."""
    started = time.perf_counter()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        registry.register(_Default())
    registry.register(StateCollector())
    for collector in SCRAPE_COLLECTORS:  # apps add theirs at start (approvals: SLA)
        registry.register(collector)
    body = generate_latest(registry)
    return body, CONTENT_TYPE_LATEST, time.perf_counter() - started


class _Default(Collector):
    """This process's own metrics (no multiprocess directory)."""

    def collect(self):
        return REGISTRY.collect()
