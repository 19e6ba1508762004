"""Memory: a long session writes a summary snapshot; later model calls send
the summary plus the recent rows only; a worker killed during or after the
summary leaves exactly one snapshot; the desk still shows every row."""

from __future__ import annotations

import json
import signal

import pytest
from django.test import Client

from agents.models import Event, MemorySnapshot, Message, Session
from agents.runtime.engine import build_messages
from agents.services import message_post
from tests.agents.helpers import assert_invariants, deliver_ticket, wait_turn
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# Small enough that a few triage turns cross it (a turn is ~1,000 tokens).
MEMORY_ENV = {"AGENTDESK_MEMORY_TRIGGER_TOKENS": "2500", "AGENTDESK_MEMORY_KEEP_TOKENS": "800"}
TICKET = {
    "email": "alice.martin@example.com",
    "subject": "Where is my order",
    "body": "Hi, where is my order ORD-1001? It has not arrived.",
    "order_id": "ORD-1001",
}
FOLLOW_UPS = [
    "Any news on ORD-1001? I am still waiting.",
    "Could you check the tracking for ORD-1001 again please?",
    "Still nothing for ORD-1001. Please check once more.",
]


def _run_turns(sandbox, first_body: str = TICKET["body"]) -> Session:
    session = deliver_ticket(sandbox.ticket(**{**TICKET, "body": first_body}))
    assert wait_turn(session, number=1, timeout=60).status == "succeeded"
    for number, text in enumerate(FOLLOW_UPS, start=2):
        message_post(key=session.key, text=text, trigger="customer_message")
        assert wait_turn(session, number=number, timeout=90).status == "succeeded"
    return session


def _requests(sandbox, last: int = 100) -> list[dict]:
    return sandbox.get("/_model_requests", last=last)["requests"]


def _is_summary(body: dict) -> bool:
    return not body.get("tools")


def test_a_long_session_sends_the_summary_and_only_recent_messages(sandbox, workers, carol):
    workers.start(**MEMORY_ENV)
    session = _run_turns(sandbox)

    snapshot = MemorySnapshot.objects.filter(session=session).order_by("-upto_position").first()
    assert snapshot is not None, workers.logs()
    event = Event.objects.filter(session=session, kind="memory.snapshot").last()
    assert event.data["upto_position"] == snapshot.upto_position and event.data["created"]
    # The cut is at a turn's opening message: no tool_use left without its result.
    cut_row = Message.objects.get(session=session, position=snapshot.upto_position)
    assert cut_row.role == "user" and cut_row.content[0]["type"] == "text"

    last = [b for b in _requests(sandbox) if not _is_summary(b)][-1]
    assert snapshot.summary in last["system"]
    rows = Message.objects.filter(session=session).order_by("position")
    recent = [
        {"role": r.role, "content": r.content}
        for r in rows
        if snapshot.upto_position <= r.position < rows.last().position
    ]
    assert last["messages"] == build_messages(recent)
    everything = build_messages([{"role": r.role, "content": r.content} for r in rows][:-1])
    sent, full = len(json.dumps(last["messages"])), len(json.dumps(everything))
    print(f"last request: {sent} characters of messages; without memory {full}")
    assert sent < full / 2

    # The desk still shows the whole transcript, summarized rows included.
    client = Client()
    client.force_login(carol)
    page = client.get(f"/sessions/{session.id}/?turns=all").content.decode()
    for text in [TICKET["body"], *FOLLOW_UPS]:
        assert text in page
    assert "memory.snapshot" in page
    assert_invariants(session)


def test_a_worker_killed_mid_summary_leaves_one_snapshot(sandbox, workers):
    victim = workers.start("victim", **MEMORY_ENV)
    workers.beat()
    session = deliver_ticket(
        sandbox.ticket(**{**TICKET, "body": TICKET["body"] + " [[sandbox:slow_summary]]"})
    )
    assert wait_turn(session, number=1, timeout=60).status == "succeeded"
    for text in FOLLOW_UPS:
        message_post(key=session.key, text=text, trigger="customer_message")
    wait_for(
        lambda: sandbox.stats()["model_requests"]["summaries"].get("requests"),
        timeout=120,
        what="the summary request at the sandbox",
    )
    victim.kill(signal.SIGKILL)  # the summary streams for ~3 s: killed mid-stream
    victim.popen.wait(10)
    assert not MemorySnapshot.objects.filter(session=session).exists()
    workers.start("rescuer", **MEMORY_ENV)

    last = len(FOLLOW_UPS) + 1
    assert wait_turn(session, number=last, timeout=120).status == "succeeded", workers.logs()
    snapshots = list(MemorySnapshot.objects.filter(session=session))
    summaries = sandbox.stats()["model_requests"]["summaries"]["requests"]
    assert summaries == len(snapshots) + 1  # the killed one was asked again, once
    kinds = list(Event.objects.filter(session=session).values_list("kind", flat=True))
    assert kinds.count("memory.snapshot") == len(snapshots) >= 1
    assert "recovery" in kinds
    assert_invariants(session)


def test_a_worker_killed_after_the_summary_does_not_write_it_again(sandbox, workers):
    victim = workers.start("victim", **MEMORY_ENV)
    workers.beat()
    session = deliver_ticket(sandbox.ticket(**TICKET))
    assert wait_turn(session, number=1, timeout=60).status == "succeeded"
    for text in FOLLOW_UPS:
        message_post(key=session.key, text=text, trigger="customer_message")
    wait_for(
        lambda: Event.objects.filter(session=session, kind="memory.snapshot").exists(),
        timeout=120,
        what="the first memory snapshot",
    )
    victim.kill(signal.SIGKILL)
    victim.popen.wait(10)
    workers.start("rescuer", **MEMORY_ENV)

    last = len(FOLLOW_UPS) + 1
    assert wait_turn(session, number=last, timeout=120).status == "succeeded", workers.logs()
    snapshots = MemorySnapshot.objects.filter(session=session)
    positions = [s.upto_position for s in snapshots]
    assert len(positions) == len(set(positions)) >= 1
    summaries = sandbox.stats()["model_requests"]["summaries"]["requests"]
    assert summaries == len(positions)  # none re-asked after its snapshot committed
    assert_invariants(session)
