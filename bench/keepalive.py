"""In doubt with no fault at all: keep-alive connections the server closed.

    flock /work/coord/bench.lock python -m bench.keepalive [--calls 1000] [--gap 5.0] [--old]

Sends `--calls` non-idempotent escalations to the sandbox's helpdesk through
agents/tools/http.py (the connectors' own plumbing), from `--threads`
threads, each waiting about `--gap` seconds between its calls: the time a
model call takes between two tool calls of a session. The helpdesk's
keep-alive is 5 s, so at a gap near it a pooled connection is often being
closed by the server as we write to it. Prints how each call ended: `ok`,
`not_sent` (safe to send again) and `unknown` (would be `in_doubt`: a person
decides). `--old` lifts the pool's idle limit, as before issue 26.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--gap", type=float, default=5.0, help="seconds between a thread's calls")
    parser.add_argument("--old", action="store_true", help="no idle limit (before issue 26)")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")
    import django

    django.setup()
    import requests

    from agents.tools import http
    from agents.tools.base import NotSent, OutcomeUnknown
    from tests.processes import start_sandbox

    if args.old:
        http.MAX_IDLE_S = float("inf")
    run_dir = Path(tempfile.mkdtemp(prefix="bench-keepalive-"))
    sandbox, url = start_sandbox(run_dir, dict(os.environ))
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    try:
        ticket = requests.post(
            f"{url}/helpdesk/tickets",
            json={"customer_email": "dana.kowalski@example.com", "subject": "x", "body": "y"},
            timeout=10,
        ).json()
        path = f"{url}/helpdesk/tickets/{ticket['id']}/escalations"
        per_thread = max(1, args.calls // args.threads)
        rng = random.Random(7)
        offsets = [rng.uniform(0, args.gap) for _ in range(args.threads)]

        def work(offset: float) -> None:
            time.sleep(offset)  # spread the threads over one gap
            for _ in range(per_thread):
                try:
                    http.call("POST", path, timeout_s=10, json={"reason": "bench"})
                    kind = "ok"
                except NotSent:
                    kind = "not_sent"
                except OutcomeUnknown:
                    kind = "unknown"
                with lock:
                    outcomes[kind] += 1
                time.sleep(args.gap + rng.uniform(-0.2, 0.2))

        started = time.monotonic()
        threads = [threading.Thread(target=work, args=(o,)) for o in offsets]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - started
    finally:
        sandbox.stop()
    total = sum(outcomes.values())
    unknown = outcomes["unknown"]
    print(
        f"keepalive: calls={total} gap_s={args.gap:g} idle_limit="
        f"{'none' if args.old else f'{http.MAX_IDLE_S:g}s'} ok={outcomes['ok']} "
        f"not_sent={outcomes['not_sent']} unknown={unknown} "
        f"in_doubt_per_1000={1000 * unknown / max(total, 1):.1f} took_s={took:.0f}"
    )
    return 0 if unknown == 0 or args.old else 1


if __name__ == "__main__":
    sys.exit(main())
