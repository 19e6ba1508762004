"""`python bench/pubcost.py [N] [SPACING_S]`: CPU the event publisher costs a
process per published commit (agents/events.py), measured, not timed.

Publishes N single-event batches shaped like the engine's `tool.finished`
(a 300-character tool result riding along), SPACING_S apart as an engine's
commits are (default 1.5 ms), then once more back to back (batches merge),
and prints process CPU per publish minus the loop's own (sleep-only) CPU.
Redis: REDIS_URL (default db 10 on 127.0.0.1).
"""

from __future__ import annotations

import os
import resource
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/10")

import django  # noqa: E402

django.setup()

from agents import events  # noqa: E402

BLOCK = {"type": "tool_result", "tool_use_id": "toolu_0001", "content": "x" * 300}
DATA = {"tool_use_id": "toolu_0001", "name": "lookup_order", "status": "succeeded", "ms": 0}
EVENT = {"seq": 1, "kind": "tool.finished", "turn_id": 7, "data": DATA, "actor": "host:123"}
PAYLOAD = [{**EVENT, "at": "2026-11-29T14:00:00+00:00", "block": BLOCK}]


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def per_publish_ms(n: int, spacing: float, publish: bool) -> float:
    before = cpu_s()
    for i in range(n):
        if publish:
            events.publish(i % 50 + 1, PAYLOAD)
        if spacing:
            time.sleep(spacing)
    events.flush_published(30)
    time.sleep(0.05)  # the last batch leaves the queue before it is sent
    return (cpu_s() - before) * 1000 / n


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    spacing = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0015
    events.publish(1, PAYLOAD)  # start the thread and connect
    events.flush_published()
    loop = per_publish_ms(n, spacing, publish=False)
    spaced = per_publish_ms(n, spacing, publish=True) - loop
    burst = per_publish_ms(n, 0, publish=True)
    print(f"publisher CPU per publish: spaced {spacing * 1000:.1f} ms apart {spaced:.3f} ms")
    print(f"publisher CPU per publish: back to back {burst:.3f} ms (batches merge)")


if __name__ == "__main__":
    main()
