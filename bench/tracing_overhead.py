"""`python -m bench.tracing_overhead`: what the observability hooks cost the
step loop. Engine in-process (as bench.whatif), S = 50, R = 80, one process;
each variant in a fresh process, the sequence run BENCH_TRACING_ROUNDS times
(default 3): the best and median steps/s (the machine is shared) and the
median CPU per step.

- bare: the engine's observe hooks replaced by no-ops (no metrics, no log
  context, no spans): the floor the others are compared to;
- off: as shipped with tracing not configured (metrics and log context on);
- on, no-op export: tracing on, spans through a BatchSpanProcessor into an
  exporter that drops them (the SDK's cost without the network);
- on, in memory: tracing on, every span kept by an InMemorySpanExporter
  (SimpleSpanProcessor, synchronous: an upper bound on the SDK's cost).

Prometheus counters are in-process here (no PROMETHEUS_MULTIPROC_DIR); with
it they write to an mmap'd file instead of a dict: the same order of cost.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

from bench import pg

VARIANTS = ("bare", "off", "on, no-op export", "on, in memory")
S, R = 50, 80
ROUNDS = int(os.environ.get("BENCH_TRACING_ROUNDS", "3"))


class _NullStep:
    def replied(self, reply) -> None:
        pass

    def end(self, outcome, error=None) -> None:
        pass


def apply(variant: str) -> object | None:
    from agents.observability import observe, tracing

    if variant == "bare":
        null = _NullStep()
        observe.turn = lambda claimed: contextlib.nullcontext()
        observe.model_step = lambda claimed: null
        observe.tool_step = lambda claimed, call: null
        tracing.configure(None)
        return None
    if variant == "off":
        tracing.configure(None)
        return None
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if variant == "on, no-op export":

        class Drop(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        tracing.configure(processor=BatchSpanProcessor(Drop()))
        return None
    exporter = InMemorySpanExporter()
    tracing.configure(processor=SimpleSpanProcessor(exporter))
    return exporter


def child(variant: str) -> None:
    import resource

    os.environ.update(pg.worker_env())
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    import django

    django.setup()
    exporter = apply(variant)
    from bench import worker

    runner = worker.EngineRuns({"S": S})
    for i in (900_000, 900_001):
        runner.run(i)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    started = time.perf_counter()
    for i in range(R):
        runner.run(i)
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - cpu0
    body = {"steps_s": R * S / wall, "cpu_ms": cpu / (R * S) * 1000}
    if exporter is not None:
        body["spans"] = len(exporter.get_finished_spans())
    print("BENCH " + json.dumps(body), flush=True)


def main() -> None:
    pg.prepare()
    results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for _ in range(ROUNDS):
        for variant in VARIANTS:
            pg.wait_quiet(float(os.environ.get("BENCH_QUIET_WAIT_S", "60")))
            pg.reset()
            pg.redis_flush()
            out = subprocess.run(
                [sys.executable, "-m", "bench.tracing_overhead", variant],
                cwd=pg.ROOT,
                env=pg.worker_env(),
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            line = next(x for x in out.splitlines() if x.startswith("BENCH "))
            results[variant].append(json.loads(line[6:]))
            print(f"  {variant}: {results[variant][-1]}", file=sys.stderr, flush=True)
    print(f"bench.tracing_overhead: engine in-process, S={S}, R={R}, 1 process, {ROUNDS} rounds")
    print(f"   {'variant':18} {'best steps/s':>12} {'median steps/s':>14} {'CPU ms/step':>12}")
    for variant, runs in results.items():
        best = max(r["steps_s"] for r in runs)
        median = statistics.median(r["steps_s"] for r in runs)
        cpu = statistics.median(r["cpu_ms"] for r in runs)
        print(f"   {variant:18} {best:12.0f} {median:14.0f} {cpu:12.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1])
    else:
        with pg.exclusive("bench.tracing_overhead"):
            main()
