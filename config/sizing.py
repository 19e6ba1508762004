"""How many processes of each kind one machine runs: web and workers.

`python -m config.web` (one listening socket, several Daphne processes),
`make run` (scripts/run.py) and the benchmarks that copy its layout
(bench/intake.py) ask here, so the layout a person runs is the one measured.
README "Sizing" has the figures behind each number.
"""

from __future__ import annotations

import os

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


def _count(variable: str, most: int) -> int:
    raw = os.environ.get(variable, "").strip()
    if raw:
        return max(1, int(raw))
    return max(1, min(most, os.cpu_count() or 1))
