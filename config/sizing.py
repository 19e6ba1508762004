"""How many processes of each kind one machine runs: web and workers.

`python -m config.web` (one listening socket, several Daphne processes),
`make run` (scripts/run.py) and the benchmarks that copy its layout
(bench/intake.py) ask here, so the layout a person runs is the one measured.
README "Sizing" has the figures behind each number.
"""

from __future__ import annotations

import os
import shutil

WEB_MAX = 4
WORKERS_MAX = 8


def web_processes() -> int:
    """AGENTDESK_WEB_PROCESSES, else one Daphne per core (at most WEB_MAX):
    one Daphne runs its requests on one interpreter, so a burst of webhooks
    takes turns on one GIL there."""
    return _count("AGENTDESK_WEB_PROCESSES", WEB_MAX)


def worker_processes() -> int:
    """AGENTDESK_WORKERS, else one worker process per core (at most
    WORKERS_MAX), each with many slots (AGENTDESK_WORKER_SLOTS, 1,000).

    A burst of 2,000 tickets at a real model's pace needs 2,000 slots on
    the machine, and they are as fast as one process per core as two:
    measured on 2 cores (bench.latency, 2,000 tickets at 10 s a model
    call), 2 processes x 1,000 slots took 1.39, 1.49 and 1.52x the floor,
    4 x 500 took 1.48 and 2.71x (the runs move that much on a shared
    machine). One per core holds half the Postgres connections (each
    process has a pool and a liveness lock) and less memory (each process
    carries Django, the SDKs and a pool of its own)."""
    return _count("AGENTDESK_WORKERS", WORKERS_MAX)


def worker_nice() -> int:
    """AGENTDESK_WORKER_NICE (10, 0 to 19): how far below the web processes
    a worker's CPU priority is, where they share a machine.

    The web answers people and senders (a webhook's sender waits, and
    retries when we are slow); a worker's sessions wait seconds on a model
    anyway. Under a burst both want every core: at equal priority the web
    took 234 webhooks a second with 1,000 sessions in flight (p95 176 ms),
    with the workers at nice 10, 361 (p95 123 ms), and the workers took the
    accepted tickets up as the burst passed (bench.intake). Their work is not
    cut, only ordered: an idle core is theirs at any niceness."""
    raw = os.environ.get("AGENTDESK_WORKER_NICE", "").strip()
    return min(19, max(0, int(raw))) if raw else 10


def worker_command(args: list[str]) -> list[str]:
    """`args` (a worker's command line) run at worker_nice()."""
    nice = worker_nice()
    if nice and shutil.which("nice"):
        return ["nice", "-n", str(nice), *args]
    return args


def _count(variable: str, most: int) -> int:
    raw = os.environ.get(variable, "").strip()
    if raw:
        return max(1, int(raw))
    return max(1, min(most, os.cpu_count() or 1))
