"""Seconds from a worker SIGKILL to that session advancing again.

`python bench/recovery.py [KILLS]` (default 5): a real sandbox, Celery worker
and beat on a scratch database (`agentdesk_recovery`, created and migrated
here) and Redis db 14. Each round starts a refund ticket whose refund request
is held in flight at the payment provider, SIGKILLs the worker that owns the
session, starts a fresh worker, and measures from the kill to the first
event the new owner commits for that session (its `recovery` event). Prints
each round, the median and the max.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DB = os.environ.get(
    "RECOVERY_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agentdesk_recovery"
)
REDIS = os.environ.get("RECOVERY_REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ.update(DJANGO_SETTINGS_MODULE="config.settings", DATABASE_URL=DB, REDIS_URL=REDIS)


def main() -> None:
    import subprocess

    import psycopg

    admin = psycopg.connect(DB.rsplit("/", 1)[0] + "/postgres", autocommit=True)
    name = DB.rsplit("/", 1)[1]
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)

    import django

    django.setup()
    import redis
    import requests

    from agents.models import Event, Session
    from tests.agents.helpers import deliver_ticket
    from tests.processes import start_beat, start_sandbox, start_worker, wait_for

    redis.Redis.from_url(REDIS).flushdb()
    run_dir = Path(tempfile.mkdtemp(prefix="agentdesk-recovery-"))
    sandbox, url = start_sandbox(run_dir, dict(os.environ))
    from django.conf import settings

    settings.SANDBOX_URL = settings.HELPDESK_URL = settings.STRIPE_API_BASE = url
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]  # deliver_ticket's client
    interval = os.environ.get("AGENTDESK_SWEEP_INTERVAL_S", "2")  # the defaults
    grace = os.environ.get("AGENTDESK_SWEEP_GRACE_S", "2")
    env = dict(
        os.environ,
        SANDBOX_URL=url,
        AGENTDESK_SWEEP_INTERVAL_S=interval,
        AGENTDESK_SWEEP_GRACE_S=grace,
        PYTHONUNBUFFERED="1",
    )
    kills = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    beat = start_beat(env, run_dir)
    procs = [sandbox, beat]
    seconds = []
    try:
        for round_ in range(kills):
            worker = start_worker(f"victim{round_}", env, run_dir)
            procs.append(worker)
            requests.post(
                f"{url}/_faults",
                json={
                    "target": "payments",
                    "kind": "latency",
                    "phase": "in_flight",
                    "latency_ms": 1500,
                    "match": {"path_prefix": "/v1/refunds"},
                },
                timeout=5,
            )
            ticket = requests.post(
                f"{url}/helpdesk/tickets",
                json={
                    "customer_email": "alice.martin@example.com",
                    "subject": "Chipped",
                    "body": "The mugs from order ORD-1001 arrived chipped. Please refund $1.",
                    "order_id": "ORD-1001",
                },
                timeout=5,
            ).json()
            session = deliver_ticket(ticket)
            wait_for(
                lambda: requests.get(f"{url}/_stats", timeout=5).json()["idempotency"]["in_flight"],
                timeout=30,
                what="refund in flight",
            )
            last = Event.objects.filter(session=session).order_by("-seq").first().seq
            worker.kill(signal.SIGKILL)
            killed = time.time()
            worker.popen.wait(10)
            procs.append(start_worker(f"rescuer{round_}", env, run_dir))
            event = wait_for(
                lambda s=session, n=last: (
                    Event.objects.filter(session=s, seq__gt=n).order_by("seq").first()
                ),
                timeout=60,
                what="the session advancing",
            )
            seconds.append(event.created_at.timestamp() - killed)
            wait_for(
                lambda s=session: Session.objects.get(pk=s.pk).status == "idle",
                timeout=60,
                what="the turn finishing",
            )
            print(f"round {round_ + 1}: {seconds[-1]:.2f} s to {event.kind} (seq {event.seq})")
            for proc in procs[2:]:
                proc.stop()
            del procs[2:]
    finally:
        for proc in procs:
            proc.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
    print(
        f"recovery after SIGKILL: median {statistics.median(seconds):.2f} s, "
        f"max {max(seconds):.2f} s over {len(seconds)} kills "
        f"(sweep interval {interval} s, grace {grace} s)"
    )


if __name__ == "__main__":
    main()
