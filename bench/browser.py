"""Browser sessions (issue 25): what storing the state costs, what a context weighs.

    /work/coord/bench python -m bench.browser [CONTEXTS] [SAVES]

Against DATABASE_URL (migrated; it writes one session per run, key
`bench:browser:<pid>`), with Chromium at AGENTDESK_BROWSER_EXECUTABLE:

1. Overhead per action for storing the state: `state.save` (seal with
   AES-GCM + the compare-and-set UPDATE, its own commit) of a realistic
   state (Playwright storage state with a session cookie and local storage,
   URL, history, a filled form), SAVES times; and the same with the step's
   event (a ~25 KB thumbnail) under the session lock, as every action
   writes it. Median and p95 in ms, and the median CPU time of the thread
   (load moves the wall time; it barely moves the CPU time).
2. Memory per open context: the process's Host (one Chromium) opens
   CONTEXTS contexts, each with a live page on its own copy of a small form
   page served by a loopback server (every request through the guard, as
   in production); the proportional set size (PSS, so shared pages count
   once) of the browser (Playwright's node driver and the Chromium process
   tree) is read before and after, every 5 contexts, with the sum by
   process kind (browser, renderer, gpu-process, utility:network...).
   Prints MiB per context, how many fit in 1.5 GiB next to the browser,
   and next to the browser and this Python process (a worker holds Django
   and Playwright's client as this one does, and Celery besides).
3. The alternatives measured, not used: the same contexts with their pages
   closed between actions, and what an action would then pay first to
   restore its page (a new page in the kept context, or a new context from
   the stored state), median over 30.

The bench lock (`/work/coord/bench python -m bench.browser 24 300`): the
timings move with the machine's load; PSS barely does.
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
    """Playwright's driver (node) and the Chromium it started: the browser."""
    import psutil

    me = psutil.Process()
    return [p.pid for p in me.children(recursive=True)]


def kind(pid: int) -> str:
    """browser, renderer, gpu-process, utility:network, zygote, node..."""
    try:
        # Chromium rewrites its command line as one space-separated string.
        words = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().split()
    except OSError:
        return "gone"
    typed = [w[7:] for w in words if w.startswith("--type=")]
    if not typed:
        return "browser" if "chrom" in words[0] else words[0].rsplit("/", 1)[-1]
    sub = [w.split("=", 1)[1].split(".")[0] for w in words if w.startswith("--utility-sub-type=")]
    return typed[0] + (f":{sub[0]}" if sub else "")


def by_kind() -> str:
    """PSS in MiB by process kind, with the count of each: where memory goes."""
    sums: dict[str, list[int]] = {}
    for pid in chromium_pids():
        entry = sums.setdefault(kind(pid), [0, 0])
        entry[0] += pss_kib([pid])
        entry[1] += 1
    return ", ".join(
        f"{name} {kib / 1024:.0f}" + (f" ({n})" if n > 1 else "")
        for name, (kib, n) in sorted(sums.items(), key=lambda item: -item[1][0])
    )


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
        times, cpu = [], []
        for _ in range(saves):
            started, started_cpu = time.perf_counter(), time.thread_time()
            state.save(loaded, step=with_step, turn_id=None)
            times.append((time.perf_counter() - started) * 1000)
            cpu.append((time.thread_time() - started_cpu) * 1000)
        times.sort()
        p95 = times[int(len(times) * 0.95) - 1]
        # The wall time moves with the machine's load; this thread's CPU
        # (seal, JSON, the driver's side of the round trips) barely does.
        print(
            f"store per action ({label}): median {statistics.median(times):.2f} ms, "
            f"p95 {p95:.2f} ms over {saves}; this thread's CPU: median "
            f"{statistics.median(cpu):.2f} ms"
        )
    from django.db import connection, transaction

    from agents.models import Session

    # The bench's own session goes; its events are append-only but for
    # retention, which says so for its transaction (agents' audit trigger).
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL agentdesk.allow_prune = on")
        Session.objects.filter(pk=session.id).delete()


MIB = 1024
BUDGET_KIB = 1.5 * 1024 * 1024


def context_memory(contexts: int) -> None:
    from capabilities.browser import host as hosting
    from capabilities.browser import page as pages
    from capabilities.browser.config import BrowserConfig

    base = serve()
    config = BrowserConfig(allow=(base + "/",))
    host = hosting.host()
    time.sleep(1)
    idle = pss_kib(chromium_pids())
    print(f"chromium with no context: {idle / MIB:.0f} MiB PSS ({by_kind()})")

    async def open_one(i: int):
        slot = await host.lease(f"bench:{i}", 0, None, config)
        await pages.go(slot.page, f"{base}/claim/{i}", 20_000)
        await slot.page.fill("textarea", "never arrived")
        await host.give_back(slot, version=1)
        return slot

    slots, per = [], 0.0
    for i in range(contexts):
        slots.append(host.run(lambda i=i: open_one(i), timeout=60))
        if len(slots) % 5 == 0 or len(slots) == contexts:
            time.sleep(0.5)
            now = pss_kib(chromium_pids())
            per = (now - idle) / len(slots)
            print(
                f"{len(slots):3d} contexts open: {now / MIB:.0f} MiB PSS, {per / MIB:.1f} per context"
            )
    print(f"  by process, MiB: {by_kind()}")
    own = pss_kib([os.getpid()])
    print(f"this process (Python, Django, Playwright's client): {own / MIB:.0f} MiB PSS")
    print(f"contexts within 1.5 GiB, browser included: {int((BUDGET_KIB - idle) / per)}")
    print(f"  ... and this process too: {int((BUDGET_KIB - idle - own) / per)}")
    pageless(host, slots, idle)
    restore_cost(host, config, base)


def pageless(host, slots, idle: int) -> None:
    """The same contexts with their pages closed (cookies and storage kept)."""

    async def close_pages():
        for slot in slots:
            await slot.page.close()

    host.run(close_pages, timeout=60)
    time.sleep(1)
    now = pss_kib(chromium_pids())
    per = (now - idle) / len(slots)
    print(
        f"the {len(slots)} contexts without their pages: {now / MIB:.0f} MiB PSS, "
        f"{per / MIB:.1f} per context ({by_kind()})"
    )


def restore_cost(host, config, base: str, rounds: int = 30) -> None:
    """What an action would pay first if no page were kept between actions:
    a new page in the kept context, or a context made from the stored state
    (what a restore on another worker costs); both load the page again and
    fill back what was filled."""
    from capabilities.browser import page as pages

    url = f"{base}/claim/restore"
    forms = {"claim": {"description": "never arrived"}}
    kept = host.run(lambda: host.lease("bench:kept", 0, None, config), timeout=60)
    host.run(lambda: pages.go(kept.page, url, 20_000), timeout=60)
    stored = {"storage": host.run(kept.context.storage_state, timeout=60), "url": url}

    async def new_page():
        await kept.page.close()
        kept.guard.main_page = None  # the guard closes any other page: a pop-up
        kept.page = kept.guard.main_page = await kept.context.new_page()
        await pages.go(kept.page, url, 20_000)
        await pages.refill(kept, forms)

    async def new_context(i: int):
        slot = await host.lease(f"bench:restore:{i}", 0, stored, config)
        await pages.go(slot.page, url, 20_000)
        await pages.refill(slot, forms)
        await host.give_back(slot, version=1, close=True)

    for label, work in (
        ("a new page in the kept context", lambda i: new_page()),
        ("a new context from the stored state", new_context),
    ):
        times = []
        for i in range(rounds):
            started = time.perf_counter()
            host.run(lambda i=i, work=work: work(i), timeout=60)
            times.append((time.perf_counter() - started) * 1000)
        print(
            f"restore per action, {label}: median {statistics.median(times):.1f} ms "
            f"(max {max(times):.1f}) over {rounds}"
        )


def main() -> int:
    contexts = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    saves = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")
    os.environ.setdefault("AGENTDESK_BROWSER_MAX_CONTEXTS", str(contexts + 2))
    import django

    django.setup()
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} (shared with others)")
    state_overhead(saves)
    from capabilities.browser import host as hosting

    try:
        context_memory(contexts)
    finally:
        hosting.host().stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
