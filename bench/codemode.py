"""`python bench/codemode.py [--pace-ms 2000] [--tickets 3] [--calls 30]`:
classic tools against Code Mode (issue 24), on the same work.

The work: six lookups (the customer, five orders) and one refund under the
approval limit, then a reply to the customer. Classic: the sandbox's model
asks for each tool in turn (the scripted `[[call:...]]` mode), so every
lookup is a model round trip that resends the profile's 30 tool schemas.
Code Mode: the same calls in one program (the fenced ```python rule), then
the reply program. The model answers at --pace-ms per call (the sandbox's
time to first token), as a real model would.

Printed per mode (median over --tickets): model calls, input tokens and
wall time per ticket. Then Code Mode's own costs, from --calls host calls
of a program against a tool that answers at once: the overhead per host
call (the snapshot dumped, the call's result and the next call begun in
one commit with it in Postgres, the call's hop: the program's time with N
calls less its time with none, over N), the time to load a snapshot in a
fresh interpreter, and the snapshot's size (median of the inner steps'
stored snapshots). DEBUG is off, as in production (bench/__init__.py
makes up its secrets): with it on, Django logs every query it sends.

Sessions are advanced in this process (agents.runtime.engine.advance, the
Celery task's body) against a sandbox it starts; DATABASE_URL / REDIS_URL
(or BENCH_DATABASE_URL / BENCH_REDIS_URL) name a migrated database. Run it
inside `flock /work/coord/bench.lock`; the machine is shared, say so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import bench  # noqa: E402, F401  (made-up secrets for DEBUG off, also when run as a script)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "0")
for name in ("DATABASE_URL", "REDIS_URL"):
    if os.environ.get(f"BENCH_{name}"):
        os.environ[name] = os.environ[f"BENCH_{name}"]

import django  # noqa: E402

django.setup()

import requests  # noqa: E402
from django.conf import settings  # noqa: E402

from agents import services  # noqa: E402
from agents.models import Event, Session, ToolCall, Turn  # noqa: E402
from agents.runtime import engine  # noqa: E402
from agents.tools.base import Kind, Tool, ToolOutput  # noqa: E402
from agents.tools.profile import Profile  # noqa: E402
from capabilities.codemode import pool as cm_pool  # noqa: E402
from capabilities.codemode import with_code_mode  # noqa: E402
from capabilities.connectors import SUPPORT_TOOLS  # noqa: E402
from capabilities.registry import SUPPORT_SYSTEM_PROMPT, register_profile  # noqa: E402
from tests.processes import start_sandbox  # noqa: E402

ORDERS = ["ORD-1001", "ORD-1002", "ORD-1013", "ORD-1014", "ORD-1003"]
EMAIL = "alice.martin@example.com"
RUN = secrets.token_hex(4)


def filler_tools(count: int) -> list[Tool]:
    """Tools the profile offers and this ticket never needs, with schemas of
    the size real connectors have (a CRM, an inventory, a shipping API)."""

    def run(ctx, arguments):
        return ToolOutput(json.dumps({"ok": True}))

    tools = []
    for i in range(count):
        schema = {
            "type": "object",
            "properties": {
                "record_id": {"type": "string", "description": "The record's id, as shown."},
                "fields": {"type": "array", "items": {"type": "string"}},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "include_archived": {"type": "boolean"},
            },
            "required": ["record_id"],
            "additionalProperties": False,
        }
        tools.append(
            Tool(
                name=f"crm_lookup_{i:02d}",
                description=(
                    f"Look up records of kind {i} in the CRM (accounts, contacts, cases): "
                    "returns the record's fields, its owner and its recent activity."
                ),
                input_schema=schema,
                kind=Kind.READ_ONLY,
                run=run,
            )
        )
    return tools


def echo_tool() -> Tool:
    return Tool(
        name="echo",
        description="Return its argument (a host call that costs nothing).",
        input_schema={
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"],
            "additionalProperties": False,
        },
        kind=Kind.READ_ONLY,
        run=lambda ctx, arguments: ToolOutput(json.dumps(arguments["x"])),
    )


def profiles(tool_count: int) -> tuple[str, str, str]:
    tools = (*SUPPORT_TOOLS, *filler_tools(tool_count - len(SUPPORT_TOOLS)))
    classic = Profile("bench_classic", SUPPORT_SYSTEM_PROMPT, tools)
    register_profile(classic)
    register_profile(dataclasses.replace(with_code_mode(classic), name="bench_codemode"))
    noop = Profile("bench_noop", "Run programs.", (echo_tool(),))
    register_profile(dataclasses.replace(with_code_mode(noop), name="bench_noop_codemode"))
    return "bench_classic", "bench_codemode", "bench_noop_codemode"


def classic_text() -> str:
    calls = [f'[[call:lookup_customer {{"email": "{EMAIL}"}}]]']
    calls += [f'[[call:lookup_order {{"order_id": "{o}"}}]]' for o in ORDERS]
    calls.append(
        '[[call:issue_refund {"order_id": "ORD-1001", "amount_cents": 1450, '
        '"reason": "requested_by_customer"}]]'
    )
    calls.append('[[call:send_reply {"body": "Your refund of $14.50 is on its way."}]]')
    return "Please refund the damaged mug. " + " ".join(calls)


def codemode_text() -> str:
    program = f"""customer = lookup_customer(email={EMAIL!r})
statuses = {{}}
for order_id in {ORDERS!r}:
    statuses[order_id] = lookup_order(order_id=order_id)['status']
refund = issue_refund(order_id='ORD-1001', amount_cents=1450, reason='requested_by_customer')
{{'customer': customer['name'], 'orders': statuses, 'refund': refund['refund_id']}}
"""
    return f"Please refund the damaged mug.\n```python\n{program}```\n"


def run_ticket(sandbox_url: str, profile: str, text: str, label: str) -> dict:
    ticket = requests.post(
        f"{sandbox_url}/helpdesk/tickets",
        json={"customer_email": EMAIL, "subject": label, "body": text},
        timeout=10,
    ).json()
    # The ticket's session (`ticket:<id>/...` acts on ticket <id>), under a key of
    # this run's: the sandbox starts afresh, its ticket ids too.
    key = f"ticket:{ticket['id']}/bench-{RUN}"
    started = time.monotonic()
    session = services.session_get_or_create(key=key, profile=profile)
    services.message_post(key=key, text=text)
    deadline = started + 600
    while time.monotonic() < deadline:
        engine.advance(session.id)
        turn = Turn.objects.filter(session=session).first()
        if turn and turn.is_terminal:
            break
        time.sleep(0.05)
    wall = time.monotonic() - started
    replies = Event.objects.filter(session=session, kind="model.replied")
    calls = [e.data for e in replies]
    return {
        "status": Turn.objects.get(session=session).status,
        "model_calls": len(calls),
        "input_tokens": sum(c["usage"]["input"] for c in calls),
        "wall_s": wall,
        "session": session,
    }


def compare(sandbox_url: str, classic: str, codemode: str, tickets: int) -> None:
    for label, profile, text in (
        ("classic", classic, classic_text()),
        ("codemode", codemode, codemode_text()),
    ):
        runs = [run_ticket(sandbox_url, profile, text, f"{label}-{i}") for i in range(tickets)]
        bad = [r["status"] for r in runs if r["status"] != "succeeded"]
        print(
            f"{label:9s} model calls {statistics.median(r['model_calls'] for r in runs):4.0f}"
            f"   input tokens {statistics.median(r['input_tokens'] for r in runs):7.0f}"
            f"   wall {statistics.median(r['wall_s'] for r in runs):6.2f} s"
            f"   (n={tickets}{', not succeeded: ' + ', '.join(bad) if bad else ''})"
        )


def program_ms(sandbox_url: str, profile: str, calls: int) -> tuple[float, Session]:
    code = f"total = 0\nfor i in range({calls}):\n    total += echo(x=i)\ntotal\n"
    run = run_ticket(sandbox_url, profile, f"Run it.\n```python\n{code}```\n", f"noop-{calls}")
    session = run["session"]
    first = ToolCall.objects.filter(session=session, name="run_code").order_by("id").first()
    finished = Event.objects.filter(session=session, kind="tool.finished")  # `json`: no lookups
    ms = next(e.data["ms"] for e in finished if e.data.get("tool_use_id") == first.tool_use_id)
    return ms, session


def overhead(sandbox_url: str, profile: str, calls: int) -> None:
    without, _ = program_ms(sandbox_url, profile, 0)
    with_calls, session = program_ms(sandbox_url, profile, calls)
    sizes = [
        len(bytes(row.snapshot))
        for row in ToolCall.objects.filter(session=session, parent__isnull=False)
        if row.snapshot is not None
    ]
    # Per call: from one host call's `tool.step_began` to the next one's, for a
    # call that costs nothing: the snapshot dumped, the call sent (its thread
    # hop), the program resumed to its next call, the call's result with its
    # snapshot and the next call begun (one commit).
    began = [
        e.created_at
        for e in Event.objects.filter(session=session, kind="tool.step_began").order_by("seq")
    ][:calls]
    gaps = [(b - a).total_seconds() * 1000 for a, b in zip(began, began[1:], strict=False)]
    print(
        f"host call overhead: median {statistics.median(gaps):.2f} ms per call "
        f"(n={len(gaps)}; program with {calls} calls {with_calls} ms, with none {without} ms, "
        f"so {(with_calls - without) / calls:.2f} ms per call on average)"
    )
    if sizes:
        print(f"snapshot size: median {statistics.median(sizes):,.0f} bytes (n={len(sizes)})")
        blob = bytes(
            ToolCall.objects.filter(session=session, parent__isnull=False, snapshot__isnull=False)
            .order_by("-step")
            .first()
            .snapshot
        )
        loads = []
        for _ in range(10):  # a loaded dump brings its own limits and type-check state
            program = cm_pool.Program(cm_pool.Limits(), "")
            with program:
                started = time.perf_counter()
                program.load(blob)
                loads.append((time.perf_counter() - started) * 1000)
        print(f"snapshot load: median {statistics.median(loads):.2f} ms (n={len(loads)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pace-ms", type=int, default=2000, help="model time per call")
    parser.add_argument("--tickets", type=int, default=3)
    parser.add_argument("--tools", type=int, default=30, help="tools in the profile")
    parser.add_argument("--calls", type=int, default=30, help="host calls for the overhead")
    args = parser.parse_args()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-codemode-"))
    proc, url = start_sandbox(run_dir, dict(os.environ))
    try:
        settings.SANDBOX_URL = settings.HELPDESK_URL = settings.STRIPE_API_BASE = url
        settings.ANTHROPIC_BASE_URL = url
        from agents.llm import forget_model_client

        forget_model_client()
        classic, codemode, noop = profiles(args.tools)
        program_ms(url, noop, 1)  # warm up: the model client, the interpreter pool
        print(
            f"Code Mode against classic tools, {args.tools} tools, {args.pace_ms} ms per model call"
        )
        requests.post(f"{url}/_model_pace", json={"ttft_ms": args.pace_ms}, timeout=5)
        compare(url, classic, codemode, args.tickets)
        requests.post(f"{url}/_model_pace", json={"ttft_ms": 0}, timeout=5)
        overhead(url, noop, args.calls)
    finally:
        proc.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
