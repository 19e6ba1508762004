"""One benchmark process: `python -m bench.worker '<json config>'`.

Modes:
- engine: the runtime in-process, no broker: per run, create the session,
  `message_post` the ticket, then `engine.advance(session_id)` right here;
- floor: plain psycopg, autocommit, one INSERT of the step's delta per step;
- dispatch: a client of the Celery row: per run, create the session,
  `message_post` (which enqueues `advance` for the Celery workers), then
  block until a worker reports that the run's last step is durable.

Protocol with the harness (stdout lines starting with "BENCH "): after its
warm-up runs the process prints `BENCH ready`, waits for a line on stdin
(the release), runs its run indices and prints `BENCH result <json>`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any

from bench import workload


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def say(kind: str, body: Any = None) -> None:
    line = f"BENCH {kind}" + ("" if body is None else " " + json.dumps(body))
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# --- Agentdesk (engine and dispatch modes) -------------------------------------


def django_setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from bench import plugin  # noqa: F401  (registers the profiles)


def create_session(key: str, profile: str, max_steps: int) -> int:
    """First contact, through the service, with a step budget of S
    (Session.max_turn_steps defaults to AGENTDESK_MAX_TURN_STEPS, 40)."""
    from agents.services import session_get_or_create

    return session_get_or_create(key=key, profile=profile, max_turn_steps=max_steps).id


class EngineRuns:
    def __init__(self, config: dict[str, Any]) -> None:
        django_setup()
        from bench import plugin

        self.plugin = plugin
        self.max_steps = config["S"]
        self.profile = config.get("profile") or plugin.profile_name(self.max_steps)
        self.ticket_suffix = config.get("ticket_suffix", "")  # may name {i}
        plugin.RECORDER.install()

    def run(self, run_index: int) -> None:
        from agents.runtime.engine import advance
        from agents.services import message_post

        key = self.key(run_index)
        session_id = create_session(key, self.profile, self.max_steps)
        message_post(key=key, text=self.ticket(run_index))
        advance(session_id)

    def ticket(self, run_index: int) -> str:
        return workload.ticket(run_index) + self.ticket_suffix.format(i=run_index)

    def key(self, run_index: int) -> str:
        prefix = "real" if self.profile == self.plugin.REAL_PROFILE else f"run-{self.max_steps}"
        return f"{prefix}-{run_index:06d}"

    def start(self) -> None:
        recorder = self.plugin.RECORDER
        recorder.latencies.clear()
        recorder.model_s.clear()
        self.refunds_before = dict(self.plugin.TOOLS.executions)

    def result(self) -> dict[str, Any]:
        recorder = self.plugin.RECORDER
        executions = self.plugin.TOOLS.executions
        refunds = {k: n for k, n in executions.items() if k not in self.refunds_before}
        return {"latencies": recorder.latencies, "model_s": recorder.model_s, "refunds": refunds}


class DispatchRuns(EngineRuns):
    """The client side of the Celery row; the steps run in the Celery workers."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        import redis

        self.redis = redis.Redis.from_url(config["report_redis_url"])
        self.reports: list[dict[str, Any]] = []

    def run(self, run_index: int) -> None:
        from agents.services import message_post

        key = self.key(run_index)
        create_session(key, self.profile, self.max_steps)
        message_post(key=key, text=self.ticket(run_index))
        popped = self.redis.blpop([f"bench:done:{key}"], timeout=120)
        if popped is None:
            raise SystemExit(f"bench: no Celery worker finished {key} within 120 s")
        self.reports.append(json.loads(popped[1]))

    def start(self) -> None:
        self.reports.clear()

    def result(self) -> dict[str, Any]:
        latencies = [x for r in self.reports for x in r["latencies"]]
        refunds: dict[str, int] = {}
        for report in self.reports:
            refunds.update(report["refunds"])
        model_s = [sum(r["model_s"] for r in self.reports)]
        last_end = max((r["ended"] for r in self.reports), default=0.0)
        return {
            "latencies": latencies,
            "model_s": model_s,
            "refunds": refunds,
            "last_commit": last_end,
        }


# --- The floor ---------------------------------------------------------------------


class FloorRuns:
    """One round trip and one durable commit per step: the physical limit."""

    SQL = "INSERT INTO bench_floor (run_id, step, delta) VALUES (%s, %s, %s)"

    def __init__(self, config: dict[str, Any]) -> None:
        import psycopg

        self.conn = psycopg.connect(config["dsn"], autocommit=True)
        self.max_steps = config["S"]
        self.tools = workload.FakeTools()
        self.latencies: list[float] = []

    def run(self, run_index: int) -> None:
        s = self.max_steps
        rid = workload.run_id(s, run_index)
        for step in range(1, s + 1):
            reply = workload.fake_model(run_index, step, s)
            model_at = time.perf_counter()
            delta = [reply]
            use = workload.tool_use_of(reply)
            if use is not None:
                key = f"{rid}:{use['id']}"
                result = self.tools(use["name"], use["input"], use["id"], key)
                delta.append(workload.tool_result_message(use["id"], result))
            self.conn.execute(self.SQL, (rid, step, json.dumps(delta)))
            self.latencies.append(time.perf_counter() - model_at)

    def start(self) -> None:
        self.latencies.clear()
        self.tools.executions.clear()

    def result(self) -> dict[str, Any]:
        return {"latencies": self.latencies, "model_s": [], "refunds": self.tools.executions}


MODES = {"engine": EngineRuns, "dispatch": DispatchRuns, "floor": FloorRuns}


def main() -> None:
    config = json.loads(sys.argv[1])
    runner = MODES[config["mode"]](config)
    for run_index in config["warmup"]:
        runner.run(run_index)
    runner.start()
    say("ready")
    sys.stdin.readline()  # the release
    cpu_before, started = cpu_s(), time.perf_counter()
    for run_index in config["runs"]:
        runner.run(run_index)
    ended = time.perf_counter()
    body = runner.result()
    body.update(started=started, ended=ended, cpu_s=cpu_s() - cpu_before, pid=os.getpid())
    say("result", body)


if __name__ == "__main__":
    main()
