"""The desk at scale: server time and query count of its pages.

    python bench/desk_scale.py [--sessions 10000] [--big] [--repeat 15] [--keep]

Builds its data with bulk inserts (generate_series, bulk_create) in a
database of its own, `agentdesk_deskscale` on the server of
BENCH_DATABASE_URL / DATABASE_URL (default 127.0.0.1:5432), migrates it,
measures, and drops it again (unless --keep).

What is measured: each page through Django's full request path in-process
(django.test.Client: middleware, view, selectors, template rendering), so
"server time" is everything but the network. Median and p95 of --repeat
requests after one warm-up request; the query count of one more request
(CaptureQueriesContext). Shown with few rows and with many, because the
query count must not grow with the rows a page shows:

- the sessions list (first page of 100, what needs a human first) with 100
  and with --sessions sessions; filtered by status; searched;
- a session page with 50 and with 500 events (50 turns of 10 events: the
  input, four model replies, three tool calls, one of them approved): the
  page shows the latest 20 turns, and all 50 with ?turns=all;
- that session's history (admin) and its JSON export;
- with --big: the sessions list with 100,000 sessions and 2,000,000 events.

Prints a table and a final line `desk_scale: {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DBNAME = "agentdesk_deskscale"


def _server_url() -> str:
    return os.environ.get("BENCH_DATABASE_URL") or os.environ.get(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
    )


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _admin_sql(*statements: str) -> None:
    import psycopg

    with psycopg.connect(_with_db(_server_url(), "postgres"), autocommit=True) as admin:
        for sql in statements:
            admin.execute(sql)


def setup_django() -> None:
    os.environ["DATABASE_URL"] = _with_db(_server_url(), DBNAME)
    # Only read here (the text a running turn has streamed); a db of its own.
    os.environ["REDIS_URL"] = os.environ.get("BENCH_REDIS_URL") or _with_db(
        os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), "14"
    )
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    import django

    django.setup()


# --- Data -------------------------------------------------------------------------------

SESSIONS_SQL = """
INSERT INTO agents_session (key, profile, status, message_policy, title, customer, context,
    created_at, updated_at, max_turn_steps, max_turn_tokens)
SELECT 'ticket:' || g, 'support_triage',
    CASE WHEN g %% 100 = 0 THEN 'in_doubt' WHEN g %% 100 < 4 THEN 'waiting_for_approval'
         WHEN g %% 100 < 6 THEN 'failed' WHEN g %% 100 < 11 THEN 'running'
         WHEN g %% 100 < 15 THEN 'canceled' ELSE 'idle' END,
    'queue', 'Ticket ' || g || ': my order has a problem',
    'customer' || (g %% 7919) || '@example.com',
    jsonb_build_object('id', g, 'subject', 'Ticket ' || g, 'order_id', 'ORD-' || g),
    now() - make_interval(secs => g), now() - make_interval(secs => g), 40, 400000
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
"""

RUNTIMES_SQL = """
INSERT INTO agents_sessionruntime (session_id, fence, owner, last_seq, transcript_len,
    current_turn_id, cancel_requested, step_attempts, wake_at, turn_steps, turn_input_tokens,
    turn_output_tokens, input_tokens, output_tokens, updated_at)
SELECT s.id, 1, '', %(events)s, 0, NULL, false, 0, NULL, 0, 0, 0, 4000, 300, now()
FROM agents_session s LEFT JOIN agents_sessionruntime r ON r.session_id = s.id
WHERE r.session_id IS NULL
"""

EVENTS_SQL = """
INSERT INTO agents_event (session_id, seq, turn_id, kind, data, actor, created_at)
SELECT s.id, g, NULL, CASE WHEN g %% 10 = 1 THEN 'turn.accepted' ELSE 'tool.finished' END,
    '{"name": "lookup_order", "status": "succeeded", "ms": 12}'::jsonb, 'w1', now()
FROM agents_session s, generate_series(1, %(events)s::int) AS g
WHERE s.key LIKE 'ticket:%%'
"""


def add_sessions(first: int, last: int, events_each: int = 0) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(SESSIONS_SQL, {"first": first, "last": last})
        cursor.execute(RUNTIMES_SQL, {"events": events_each})
        if events_each:
            cursor.execute(EVENTS_SQL, {"events": events_each})
        cursor.execute("ANALYZE")


def busy_session(turns: int, key: str):
    """A session with `turns` turns of 10 events each, in the shape the
    runtime writes: 8 transcript rows, 3 tool calls (one approved)."""
    from django.utils import timezone

    from agents.models import Event, Session, SessionRuntime, ToolCall, Turn
    from approvals.models import Approval, arguments_hash

    now = timezone.now()
    session = Session.objects.create(
        key=key,
        title="A long conversation",
        customer="vip@example.com",
        context={"id": key, "subject": "A long conversation", "order_id": "ORD-1002"},
    )
    made = Turn.objects.bulk_create(
        Turn(
            session=session,
            number=n + 1,
            status="succeeded",
            trigger="customer_message",
            input=f"Message {n + 1}: where is my refund for ORD-1002?",
            steps=4,
            input_tokens=4000,
            output_tokens=300,
            started_at=now,
            finished_at=now,
        )
        for n in range(turns)
    )
    calls, events, pos, seq = [], [], 0, 0
    names = ["lookup_customer", "lookup_order", "issue_refund"]

    def event(kind, turn, data, role="", content=None):
        """An event; with `content`, the transcript row it adds (as the runtime writes)."""
        nonlocal seq, pos
        seq += 1
        events.append(
            Event(
                session=session,
                seq=seq,
                turn_id=turn.id,
                kind=kind,
                data=data,
                actor="w1",
                created_at=now,
                position=pos if content is not None else None,
                role=role,
                content=content,
            )
        )
        if content is not None:
            pos += 1

    for turn in made:
        event("turn.accepted", turn, {"number": turn.number, "trigger": "customer_message"})
        text = [{"type": "text", "text": turn.input}]
        event("turn.started", turn, {"number": turn.number}, "user", text)
        for i, name in enumerate(names):
            use_id = f"toolu_{turn.number}_{i}"
            args = (
                {"order_id": "ORD-1002", "amount_cents": 18900}
                if name == "issue_refund"
                else {"order_id": "ORD-1002"}
            )
            calls.append(
                ToolCall(
                    session=session,
                    turn=turn,
                    tool_use_id=use_id,
                    idempotency_key=f"{key}:{use_id}",
                    name=name,
                    kind="idempotent_by_key",
                    status="succeeded",
                    input=args,
                    result_position=pos + 1,
                    attempts=1,
                    message_position=pos,
                    created_at=now,
                    started_at=now,
                    finished_at=now,
                )
            )
            event(
                "model.replied",
                turn,
                {
                    "stop_reason": "tool_use",
                    "usage": {"input": 1000, "output": 75},
                    "ms": 800,
                    "tool_calls": [{"name": name}],
                },
                "assistant",
                [
                    {"type": "text", "text": f"Step {i + 1}: I will call {name} now. " * 3},
                    {"type": "tool_use", "id": use_id, "name": name, "input": args},
                ],
            )
            result = json.dumps({"ok": True, "order": "ORD-1002", "items": ["grinder"] * 5})
            event(
                "tool.finished",
                turn,
                {
                    "tool_use_id": use_id,
                    "name": name,
                    "status": "succeeded",
                    "ms": 40,
                    "attempt": 1,
                },
                "user",
                [{"type": "tool_result", "tool_use_id": use_id, "content": result}],
            )
        event(
            "model.replied",
            turn,
            {
                "stop_reason": "end_turn",
                "usage": {"input": 1000, "output": 75},
                "ms": 800,
                "tool_calls": [],
            },
            "assistant",
            [{"type": "text", "text": "Done: refunded and replied to the customer. " * 4}],
        )
        event("turn.succeeded", turn, {"number": turn.number})
    ToolCall.objects.bulk_create(calls)
    Event.objects.bulk_create(events)
    approvals = [
        Approval(
            tool_call=c,
            session=session,
            turn=c.turn,
            status="approved",
            policy="refund_over_limit",
            policy_detail="Refund of $189.00 is above the $100.00 limit",
            tool_name=c.name,
            arguments=c.input,
            arguments_hash=arguments_hash(c.input),
            reasoning="Refund due.",
            reason="ok",
            decided_at=now,
            expires_at=now,
        )
        for c in ToolCall.objects.filter(session=session, name="issue_refund")
    ]
    Approval.objects.bulk_create(approvals)
    SessionRuntime.objects.create(
        session=session,
        last_seq=seq,
        transcript_len=pos,
        input_tokens=4000 * turns,
        output_tokens=300 * turns,
    )
    return session, seq


# --- Measuring ----------------------------------------------------------------------------


def measure(client, url: str, repeat: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def get():
        response = client.get(url)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert response.status_code == 200, (url, response.status_code)
        return body

    get()  # warm: templates compiled, connection open
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        get()
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as queries:
        body = get()
    times.sort()
    return {
        "ms_p50": round(statistics.median(times), 1),
        "ms_p95": round(times[min(len(times) - 1, int(len(times) * 0.95))], 1),
        "queries": len(queries),
        "kb": round(len(body) / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument(
        "--big", action="store_true", help="also 100,000 sessions, 2,000,000 events"
    )
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="leave the database for a look")
    args = parser.parse_args()

    _admin_sql(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)', f'CREATE DATABASE "{DBNAME}"')
    try:
        setup_django()
        run(args)
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            _admin_sql(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)')


def run(args) -> None:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from dashboard.roles import ensure_roles

    started = time.monotonic()
    call_command("migrate", verbosity=0)
    admin = get_user_model().objects.create_user(username="scale-admin")
    admin.groups.add(ensure_roles()["admin"])
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(admin)

    rows: list[tuple[str, dict]] = []

    def row(label: str, url: str) -> None:
        rows.append((label, {"url": url, **measure(client, url, args.repeat)}))
        print(f"  measured {label}", file=sys.stderr)

    small, _ = busy_session(5, "chat:small")
    big, big_events = busy_session(50, "chat:big")
    add_sessions(1, 100 - 2)
    row("sessions list, 100 sessions", "/")
    add_sessions(99, args.sessions - 2)
    n = args.sessions
    row(f"sessions list, {n:,} sessions", "/")
    row(f"  filtered: waiting, {n:,}", "/?status=waiting_for_approval")
    row(f"  searched: 'customer42@', {n:,}", "/?q=customer42%40")
    row(f"  page 50 of the list, {n:,}", "/?page=50")
    row("session page, 50 events", f"/sessions/{small.id}/")
    row(f"session page, {big_events} events", f"/sessions/{big.id}/")
    row(f"  all 50 turns shown, {big_events} events", f"/sessions/{big.id}/?turns=all")
    row(f"history, {big_events} events", f"/sessions/{big.id}/history")
    row(f"history JSON export, {big_events} events", f"/sessions/{big.id}/history.json")
    if args.big:
        t = time.monotonic()
        add_sessions(args.sessions - 1, 100_000 - 2, events_each=20)
        print(
            f"  100,000 sessions and 2,000,000 events in {time.monotonic() - t:.0f} s",
            file=sys.stderr,
        )
        row("sessions list, 100,000 sessions / 2M events", "/")
        row("  filtered: in doubt, 100,000", "/?status=in_doubt")
        row("  searched: 'ticket:4242', 100,000", "/?q=ticket%3A4242")
        row(f"session page, {big_events} events (2M in table)", f"/sessions/{big.id}/")

    print()
    print(f"{'page':52} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'KiB':>8}")
    for label, r in rows:
        print(f"{label:52} {r['ms_p50']:8.1f} {r['ms_p95']:8.1f} {r['queries']:8d} {r['kb']:8.1f}")
    by = dict(rows)
    flat = {
        "sessions": n,
        "sessions_page_ms_p50": by[f"sessions list, {n:,} sessions"]["ms_p50"],
        "sessions_page_queries": by[f"sessions list, {n:,} sessions"]["queries"],
        "sessions_page_queries_100": by["sessions list, 100 sessions"]["queries"],
        "session_page_events": big_events,
        "session_page_ms_p50": by[f"session page, {big_events} events"]["ms_p50"],
        "session_page_queries": by[f"session page, {big_events} events"]["queries"],
        "session_page_queries_50": by["session page, 50 events"]["queries"],
        "setup_and_run_s": round(time.monotonic() - started, 1),
        "rows": {label.strip(): r for label, r in rows},
    }
    grows = (
        flat["sessions_page_queries"] != flat["sessions_page_queries_100"]
        or flat["session_page_queries"] != flat["session_page_queries_50"]
    )
    print(f"\nqueries grow with rows shown: {'YES (a bug)' if grows else 'no'}")
    print("desk_scale: " + json.dumps(flat, separators=(",", ":")))


if __name__ == "__main__":
    main()
