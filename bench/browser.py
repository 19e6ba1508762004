"""Browser sessions (issue 25): what storing the state costs, what a context weighs.

    flock /work/coord/bench.lock python -m bench.browser [CONTEXTS] [SAVES]

Against DATABASE_URL (migrated; it writes one session per run, key
`bench:browser:<pid>`), with Chromium at AGENTDESK_BROWSER_EXECUTABLE:

1. Overhead per action for storing the state: `state.save` (seal with
   AES-GCM + the compare-and-set UPDATE, its own commit) of a realistic
   state (Playwright storage state with a session cookie and local storage,
   URL, history, a filled form), SAVES times; and the same with the step's
   event (a ~25 KB thumbnail) under the session lock, as every action
   writes it. Median and p95 in ms.
2. Memory per open context: the process's Host (one Chromium) opens
   CONTEXTS contexts, each on its own copy of a small form page served by a
   loopback server (every request through the guard, as in production);
   the proportional set size (PSS, so shared pages count once) of the
   Chromium process tree is read before and after, every 5 contexts.
   Prints MiB per context, and how many fit in 1.5 GiB next to the browser.
"""

from __future__ import annotations

import http.server
import os
import statistics
import sys
import threading
import time
from pathlib import Path

PAGE = (
    b"<!doctype html><html><head><title>Claim</title></head><body><h1>Lost parcel claim</h1>"
    b"<form id=claim method=post action=/claims><input type=hidden name=form_token value=x>"
    b"<label>Tracking <input name=tracking value=TRK1002></label>"
    b"<label>What happened <textarea name=description></textarea></label>"
    b"<button>Submit claim</button></form><script>localStorage.setItem('seen', '1')</script>"
    b"</body></html>"
)


def pss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def chromium_pids() -> list[int]:
    import psutil

    me = psutil.Process()
    return [p.pid for p in me.children(recursive=True)]


def serve() -> str:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("set-cookie", "carrier_session=abc; Path=/")
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def state_overhead(saves: int) -> None:
    from agents import services
    from capabilities.browser import state

    session = services.session_get_or_create(key=f"bench:browser:{os.getpid()}")
    loaded = state.Loaded(session.id)
    loaded.data = {
        "storage": {
            "cookies": [
                {
                    "name": "carrier_session",
                    "value": "x" * 24,
                    "domain": "127.0.0.1",
                    "path": "/carrier",
                    "expires": -1,
                    "httpOnly": True,
                    "secure": False,
                    "sameSite": "Lax",
                }
            ],
            "origins": [
                {
                    "origin": "http://127.0.0.1:8100",
                    "localStorage": [{"name": "seen", "value": "1"}],
                }
            ],
        },
        "url": "http://127.0.0.1:8100/carrier/claims/new?tracking=TRK1002",
        "history": [f"http://127.0.0.1:8100/carrier/page{i}" for i in range(8)],
        "forms": {"claim": {"description": "The customer reports the parcel never arrived."}},
    }
    thumb = "data:image/jpeg;base64," + "A" * 25_000
    step = {
        "action": "fill",
        "url": loaded.data["url"],
        "read": "x" * 1500,
        "thumb": thumb,
        "refused": [],
        "target": {},
        "title": "Claim",
        "tool_use_id": "toolu_bench",
    }
    for label, with_step in (("state only", None), ("state + step event", step)):
        times = []
        for _ in range(saves):
            started = time.perf_counter()
            state.save(loaded, step=with_step, turn_id=None)
            times.append((time.perf_counter() - started) * 1000)
        times.sort()
        p95 = times[int(len(times) * 0.95) - 1]
        print(
            f"store per action ({label}): median {statistics.median(times):.2f} ms, "
            f"p95 {p95:.2f} ms over {saves}"
        )
    from django.db import connection, transaction

    from agents.models import Session

    # The bench's own session goes; its events are append-only but for
    # retention, which says so for its transaction (agents' audit trigger).
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL agentdesk.allow_prune = on")
        Session.objects.filter(pk=session.id).delete()


def context_memory(contexts: int) -> None:
    from capabilities.browser import host as hosting
    from capabilities.browser import page as pages
    from capabilities.browser.config import BrowserConfig

    base = serve()
    config = BrowserConfig(allow=(base + "/",))
    host = hosting.host()
    time.sleep(1)
    idle = pss_kib(chromium_pids())
    print(f"chromium with no context: {idle / 1024:.0f} MiB PSS")
    slots = []

    async def open_one(i: int):
        slot = await host.lease(f"bench:{i}", 0, None, config)
        await pages.go(slot.page, f"{base}/claim/{i}", 20_000)
        await slot.page.fill("textarea", "never arrived")
        return slot

    opened = 0
    per = 0.0
    for i in range(contexts):
        slots.append(host.run(lambda i=i: open_one(i), timeout=60))
        opened += 1
        if opened % 5 == 0 or opened == contexts:
            time.sleep(0.5)
            now = pss_kib(chromium_pids())
            per = (now - idle) / opened
            print(
                f"{opened:3d} contexts open: {now / 1024:.0f} MiB PSS, "
                f"{per / 1024:.1f} MiB per context"
            )
    budget = 1.5 * 1024 * 1024
    print(f"contexts within 1.5 GiB (browser included): {int((budget - idle) / per)}")
    print(
        f"bound in force: AGENTDESK_BROWSER_MAX_CONTEXTS contexts per process; this run held {opened}"
    )


def main() -> int:
    contexts = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    saves = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")
    os.environ.setdefault("AGENTDESK_BROWSER_MAX_CONTEXTS", str(contexts))
    import django

    django.setup()
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} (shared with others)")
    state_overhead(saves)
    context_memory(contexts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
