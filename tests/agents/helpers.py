"""Helpers for runtime tests: deliver tickets, wait on durable state, check invariants."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection
from django.test import Client

from agents.models import Event, Message, Session, ToolCall, Turn
from agents.runtime import store
from agents.runtime.ownership import Owner
from agents.runtime.state import CallState, Claimed
from api.inbound import sign
from tests.processes import wait_for


def deliver_ticket(ticket: dict, kind: str = "ticket.created", message: str = "") -> Session:
    """POST the helpdesk's signed webhook for `ticket` to our inbound endpoint."""
    body = json.dumps(
        {
            "id": f"evt_{secrets.token_hex(8)}",
            "type": kind,
            "created": int(time.time()),
            "ticket": ticket,
            "message": {"body": message or ticket["body"]},
        }
    ).encode()
    signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()))
    response = Client().post(
        "/api/inbound/helpdesk",
        body,
        content_type="application/json",
        headers={"Agentdesk-Signature": signature},
    )
    assert response.status_code == 202, response.content
    return Session.objects.get(key=f"ticket:{ticket['id']}")


def wait_turn(session: Session, number: int = 1, statuses=None, timeout: float = 30) -> Turn:
    statuses = statuses or Turn.TERMINAL

    def done():
        turn = Turn.objects.filter(session=session, number=number).first()
        return turn if turn and turn.status in statuses else None

    return wait_for(done, timeout=timeout, what=f"turn {number} of {session.key} in {statuses}")


def assert_invariants(session: Session) -> None:
    """The durable log is whole: seqs 1..n with no gap, and every tool_use in
    the transcript has exactly one tool_result, recorded once."""
    seqs = list(Event.objects.filter(session=session).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1)), f"event seqs have gaps: {seqs}"
    uses, results = [], []
    for row in Message.objects.filter(session=session).order_by("position"):
        for block in row.content:
            if block.get("type") == "tool_use":
                uses.append(block["id"])
            elif block.get("type") == "tool_result":
                results.append(block["tool_use_id"])
    assert len(uses) == len(set(uses)), "a tool_use was recorded twice"
    assert sorted(results) == sorted(uses), f"tool_use/tool_result mismatch: {uses} {results}"
    calls = ToolCall.objects.filter(session=session, parent__isnull=True)  # not inner steps
    assert sorted(c.tool_use_id for c in calls) == sorted(uses)


def kinds(session: Session) -> list[str]:
    return list(
        Event.objects.filter(session=session).order_by("seq").values_list("kind", flat=True)
    )


def at_once(work: Callable[[], Any], threads: int = 4, timeout: float = 60) -> list[Any]:
    """Run `work` on `threads` threads released together, each on its own
    database connection; their results. An error in any of them fails here."""
    results: list[Any] = []
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run() -> None:
        try:
            start.wait(timeout)
            results.append(work())
        except BaseException as exc:  # noqa: BLE001 (raised below, in the test's thread)
            errors.append(exc)
        finally:
            connection.close()

    running = [threading.Thread(target=run) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(timeout)
    assert not errors, errors
    assert len(results) == threads, "a thread did not finish in time"
    return results


class triggers_bypassed:
    """What a database superuser can do: run a transaction with every
    trigger off (session_replication_role = replica), the append-only and
    hash-chain triggers of the audit trail included. For tests that fake
    history (time, tampering); the application never does this."""

    def __enter__(self):
        from django.db import transaction

        self._atomic = transaction.atomic()
        self._atomic.__enter__()
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
        return self

    def __exit__(self, *exc):
        return self._atomic.__exit__(*exc)


def take_over_liveness(owner: str, process_key: int) -> None:
    """Cut the liveness connection of `owner`'s worker (its name is
    host:pid/slot) and keep its key from it until it has drawn a new one, as
    when another process drew the same key: then every session it held under
    the old key is seen ownerless and taken over. (Left alone, a worker takes
    its own key back: agents/runtime/ownership.py.)"""
    import psycopg

    from agents.runtime.ownership import LOCK_CLASS

    pid = owner.split(":")[1].split("/")[0]
    db = connection.settings_dict
    params = {"dbname": db["NAME"], "user": db["USER"], "host": db["HOST"], "port": db["PORT"]}
    # pg_locks is the whole server's: other test databases (pytest-xdist's
    # other workers) hold liveness keys of their own, often the same numbers.
    where = (
        "l.locktype = 'advisory' AND l.classid = %s AND l.objsubid = 2"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    with psycopg.connect(**params, autocommit=True) as holder, connection.cursor() as cursor:
        queued = threading.Thread(
            target=holder.execute,
            args=("SELECT pg_advisory_lock(%s, %s)", [LOCK_CLASS, process_key]),
            daemon=True,
        )
        queued.start()

        def count(sql: str, *args: Any) -> int:
            cursor.execute(f"SELECT count(*) FROM pg_locks l {sql}", [LOCK_CLASS, *args])  # noqa: S608 (constants)
            return cursor.fetchone()[0]

        wait_for(
            lambda: count(f"WHERE {where} AND l.objid::bigint = %s AND NOT l.granted", process_key),
            timeout=10,
            what="our request for the worker's liveness key to queue",
        )
        terminate = f"SELECT pg_terminate_backend(l.pid) FROM pg_locks l WHERE {where}"  # noqa: S608
        cursor.execute(
            f"{terminate} AND l.objid::bigint = %s AND l.granted", [LOCK_CLASS, process_key]
        )
        assert cursor.fetchall(), "no liveness lock for that process"
        queued.join(10)
        assert not queued.is_alive(), "did not get the worker's liveness key"
        wait_for(  # the worker under a new key: now the old one may go free
            lambda: count(
                "JOIN pg_stat_activity a ON a.pid = l.pid "
                f"WHERE {where} AND l.granted AND l.objid::bigint <> %s "
                "AND a.application_name = %s",
                process_key,
                f"agentdesk pid={pid}",
            ),
            timeout=20,
            what="the worker to draw a new liveness key",
        )


def call_running(
    key: str, owner: Owner, *, name: str, kind: str, arguments: dict[str, Any] | None = None
) -> tuple[Session, Claimed]:
    """A session whose turn's reply asked for one call, claimed by `owner`
    by hand and the call marked running, as recording a reply marks its
    first call: for tests of the store's transitions without a model."""
    from agents.services import message_post, session_get_or_create

    session = session_get_or_create(key=key)
    message_post(key=key, text="Hello, I need help.")
    claimed = store.claim(session.id, owner)
    assert claimed is not None
    use_id = f"toolu_{name}"
    arguments = arguments or {}
    call = {
        "tool_use_id": use_id,
        "idempotency_key": f"{key}:{use_id}",
        "name": name,
        "kind": kind,
        "status": "running",
        "input": arguments,
        "output": "",
        "attempts": 1,
    }
    _, ids = store.record_reply(
        claimed,
        content=[{"type": "tool_use", "id": use_id, "name": name, "input": arguments}],
        calls=[call],
        approvals=[],
        event_list=[{"kind": "model.replied", "data": {"stop_reason": "tool_use"}}],
        in_tokens=10,
        out_tokens=5,
        finish=False,
    )
    claimed.calls = [CallState.from_recorded(call, ids[use_id])]
    return session, claimed


def drain_broker(broker) -> None:
    """Empty the broker's queue (every priority's list): the triggers taken."""
    for key in broker.scan_iter("celery*"):
        broker.delete(key)


def queued_triggers(broker) -> int:
    """Triggers waiting in the broker (every priority's list)."""
    return sum(
        broker.llen(key) for key in broker.scan_iter("celery*") if broker.type(key) == b"list"
    )


def order_ticket(sandbox, directive: str = "") -> dict:
    """A "where is my order" ticket in the sandbox's helpdesk; `directive`
    (`max_tokens`, `thinking`, ...) tells the sandbox's model how to reply."""
    tail = f" [[sandbox:{directive}]]" if directive else ""
    return sandbox.ticket(
        email="alice.martin@example.com",
        subject="Where is it?",
        body=f"Hi, could you tell me where order ORD-1002 is?{tail}",
        order_id="ORD-1002",
    )


def model_stops(session: Session) -> list[str]:
    """The stop reason of each model reply of the session, in order."""
    return [
        e.data["stop_reason"]
        for e in Event.objects.filter(session=session, kind="model.replied").order_by("seq")
    ]
