"""Peak memory of Daphne while it serves one session's history.json.

    python -m bench.export_memory [EVENTS]      (default 100000)

Builds a session with EVENTS events (tool.finished rows with a ~400-byte
payload, as a long triage session writes them) in the bench database
(bench/pg.py), starts Daphne on it (config.settings, DEBUG off), logs in as
an admin and downloads the export, sampling Daphne's RSS every 10 ms. Prints
the RSS before the request, the peak while serving, the bytes and the time.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from bench import pg

EVENT_SQL = """
    INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at, role)
    SELECT %s, n, NULL, 'tool.finished',
        json_build_object('tool_use_id', 'toolu_' || n, 'name', 'lookup_order',
            'status', 'succeeded', 'output', repeat('x', 300)),
        'w1', now(), ''
    FROM generate_series(1, %s) AS n
"""


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def build(events: int) -> tuple[int, str]:
    """The session and an admin (in this process, through the ORM)."""
    from django.contrib.auth import get_user_model

    from agents.models import Session, SessionRuntime
    from dashboard.roles import ensure_roles

    Session.objects.filter(key="bench:export").delete()
    session = Session.objects.create(key="bench:export", title="Export bench")
    SessionRuntime.objects.create(session=session, last_seq=events)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(EVENT_SQL, [session.id, events])
    groups = ensure_roles()
    user_model = get_user_model()
    user_model.objects.filter(username="export-bench").delete()
    user = user_model.objects.create_user(username="export-bench", password="export-bench-pw")
    user.groups.add(groups["admin"])
    return session.id, "export-bench"


def main() -> int:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    pg.prepare()
    env = pg.worker_env()
    os.environ.update(DJANGO_SETTINGS_MODULE="config.settings", DATABASE_URL=env["DATABASE_URL"])
    import django

    django.setup()
    session_id, username = build(events)

    log = Path(tempfile.mkstemp(prefix="agentdesk-bench-export-", suffix=".log")[1])
    args = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", "0", "config.asgi:application"]
    with open(log, "wb") as out:
        daphne = subprocess.Popen(
            args, cwd=pg.ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"Listening on TCP address (\S+)", log.read_text())):
            if daphne.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daphne did not start:\n{log.read_text()}")
            time.sleep(0.05)
        base = f"http://{found.group(1)}"
        client = requests.Session()
        client.get(f"{base}/login/").raise_for_status()
        client.post(
            f"{base}/login/",
            data={"username": username, "password": "export-bench-pw"},
            headers={"X-CSRFToken": client.cookies["csrftoken"], "Referer": f"{base}/login/"},
        ).raise_for_status()
        client.get(f"{base}/").raise_for_status()  # warm: templates, the first queries
        time.sleep(0.5)
        before = rss_kib(daphne.pid)
        peak = [before]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], rss_kib(daphne.pid))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        size = 0
        with client.get(f"{base}/sessions/{session_id}/history.json", stream=True) as response:
            response.raise_for_status()
            for chunk in response.iter_content(65536):
                size += len(chunk)
        seconds = time.monotonic() - started
        done.set()
        sampler.join()
        print(
            f"history.json, {events} events: {size / 1e6:.1f} MB in {seconds:.1f} s;"
            f" daphne RSS {before / 1024:.0f} MiB before, peak {peak[0] / 1024:.0f} MiB"
            f" (+{(peak[0] - before) / 1024:.0f} MiB)"
        )
    finally:
        os.killpg(daphne.pid, signal.SIGTERM)
        daphne.wait(20)
        log.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
