"""`python -m bench.instructions`: the engine's instructions per step, counted.

Wall time and CPU time on a shared 2-core machine move with whoever else
runs; an instruction count does not. This runs the engine in-process (the
engine row's workload, S = 50, one process, the fake model and tools) under
`valgrind --tool=callgrind` with instrumentation off until the two warm-up
runs are done, then counts the instructions of this process (every thread:
the step loop, the event publisher, the tool-call threads) over R runs and
reports them per step. PostgreSQL's own work is in its backend, not counted
here. The switch is callgrind's client request, from a ten-line C helper
compiled on the spot (gcc and valgrind's headers), through ctypes.

    python -m bench.instructions [--runs 10] [--keep DIR]

--keep DIR leaves the callgrind file there (callgrind_annotate reads it; the
Python frames all show as the interpreter's eval loop, so use cProfile,
bench.profile, to see which Python function costs what). The count moves by
a percent or two between runs (the publisher's batches, the cancel
watcher's polls and the garbage collector's timing follow the clock and
the threads' interleaving); compare changes larger than that, or repeat.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import pg

S = 50
WARMUPS = (900_000, 900_001)
HELPER_C = """
#include <valgrind/callgrind.h>
void measure_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void measure_stop(void) { CALLGRIND_DUMP_STATS_AT("measured"); CALLGRIND_STOP_INSTRUMENTATION; }
"""


def build_helper(where: Path) -> Path:
    (where / "measure.c").write_text(HELPER_C)
    lib = where / "measure.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(where / "measure.c")], check=True
    )
    return lib


def child(runs: int, helper: str) -> None:
    """The measured process: two warm-up runs, then `runs` runs, counted."""
    import django

    django.setup()
    from agents import events
    from bench import worker

    switch = ctypes.CDLL(helper)
    runner = worker.EngineRuns({"S": S})
    for i in WARMUPS:
        runner.run(i)
    events.flush_published()
    # A full collection walks every object of the process (Django's included):
    # start from the same heap every time, or whether one falls inside the
    # counted runs moves the count by a fifth.
    gc.collect()
    switch.measure_start()
    for i in range(runs):
        runner.run(i)
    events.flush_published()
    switch.measure_stop()


def count(runs: int, where: Path, helper: Path) -> int:
    """Instructions of `runs` runs in one child process (after a reset)."""
    pg.reset()
    pg.redis_flush()
    env = pg.worker_env(PYTHONHASHSEED="0")
    out = where / "callgrind.out"
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        + ["-q", sys.executable, "-m", "bench.instructions", "--child", str(runs), str(helper)],
        cwd=pg.ROOT,
        env=env,
        check=True,
    )
    for path in sorted(where.glob("callgrind.out*")):
        text = path.read_text(errors="replace")
        if "measured" in text.split("\nfn=", 1)[0]:
            match = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if match:
                return int(match.group(1))
    raise SystemExit(f"bench.instructions: no measured dump in {where}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10, help="runs counted (S steps each)")
    parser.add_argument("--keep", help="a directory to leave the callgrind files in")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(int(args.child[0]), args.child[1])
        return
    if shutil.which("valgrind") is None or shutil.which("gcc") is None:
        raise SystemExit("bench.instructions: needs valgrind and gcc")
    os.environ.update(pg.worker_env())
    pg.prepare()
    where = Path(args.keep or tempfile.mkdtemp(prefix="agentdesk-callgrind-"))
    where.mkdir(parents=True, exist_ok=True)
    try:
        total = count(args.runs, where, build_helper(where))
    finally:
        if not args.keep:
            shutil.rmtree(where, ignore_errors=True)
    steps = args.runs * S
    print(f"bench.instructions: engine in-process, S={S}, {args.runs} runs, {steps} steps counted")
    print(f"instructions_per_step={total / steps:,.0f}")


if __name__ == "__main__":
    # The lock keeps two runs from emptying the shared bench database under
    # each other; a database of one's own (BENCH_DATABASE_URL) needs none.
    if "--child" in sys.argv or os.environ.get("BENCH_DATABASE_URL"):
        main()
    else:
        with pg.exclusive("bench.instructions"):
            main()
