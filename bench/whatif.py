"""`python -m bench.whatif`: how fast the engine would go without each cost
the profile points at — measured, not guessed. Engine in-process, S = 50,
R = 80, one process; each variant in a fresh process, the sequence run three
times: the best steps/s (the machine is shared) and the median CPU per step. The variants patch from outside, for this measurement only:

- baseline: as shipped;
- validator: Tool.validate with a validator compiled once per schema
  (jsonschema.validate re-checks the schema against its metaschema on every
  call);
- +no publish: the same, and events.publish / publish_built / publish_delta
  do nothing (what the event publisher thread costs the step loop through
  the GIL);
- +server binding: the same, and Django's psycopg backend with
  OPTIONS["server_side_binding"] = True (parameters bound by the server, so
  psycopg prepares the repeated record statements and the server stops
  planning them on every step).

These are not proposals to drop validation or live pushes; they size them.
Since 0e645f9 the runtime itself compiles validators and binds parameters on
the server, so those two variants now match the baseline (a check that they
stay in); "+no publish" still sizes the event publisher.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from bench import pg

VARIANTS = ("baseline", "validator", "+no publish", "+server binding")
S, R = 50, 80
ROUNDS = int(os.environ.get("BENCH_WHATIF_ROUNDS", "3"))


def apply(variant: str) -> None:
    level = VARIANTS.index(variant)
    from django.conf import settings

    if level >= 3:  # before the first connection is made
        settings.DATABASES["default"].setdefault("OPTIONS", {})["server_side_binding"] = True
    if level >= 1:
        import jsonschema

        from agents.tools.base import Tool

        compiled: dict[int, object] = {}

        def validate(self, arguments):
            if not isinstance(arguments, dict):
                return "tool input must be a JSON object"
            validator = compiled.get(id(self))
            if validator is None:
                cls = jsonschema.validators.validator_for(self.input_schema)
                cls.check_schema(self.input_schema)
                validator = compiled[id(self)] = cls(self.input_schema)
            error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
            if error is None:
                return None
            where = "/".join(str(p) for p in error.absolute_path) or "input"
            return f"{where}: {error.message}"

        Tool.validate = validate
    if level >= 2:
        from agents import events

        events.publish = lambda *a, **k: None
        events.publish_built = lambda *a, **k: None
        events.publish_delta = lambda *a, **k: None


def child(variant: str) -> None:
    import resource

    os.environ.update(pg.worker_env())
    import django

    django.setup()
    apply(variant)
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
    lat = sorted(runner.plugin.RECORDER.latencies[-R * S :])
    body = {"steps_s": R * S / wall, "cpu_ms": cpu / (R * S) * 1000}
    body["p50_ms"] = lat[len(lat) // 2] * 1000
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
                [sys.executable, "-m", "bench.whatif", variant],
                cwd=pg.ROOT,
                env=pg.worker_env(),
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            line = next(x for x in out.splitlines() if x.startswith("BENCH "))
            results[variant].append(json.loads(line[6:]))
            print(f"  {variant}: {results[variant][-1]}", file=sys.stderr, flush=True)
    print(f"bench.whatif: engine in-process, S={S}, R={R}, 1 process, {ROUNDS} rounds")
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
        with pg.exclusive("bench.whatif"):
            main()
