"""Only a request that may have left the process is in doubt (issue 26).

A slot marks a not-idempotent call `running`; its host is cut off: the call
fails NotSent ("could not connect"), the slot cannot write that it goes back
to wait for a retry, and another host takes the session over (the slot's
liveness lock went with its connections). The new owner sees a running
not-idempotent call and would ask a person whether it happened. But the old
slot knows it never left: when the link heals it leaves that word
(store.note_never_sent), and the call is run, not doubted.

The first test is the whole story with real workers, the link of the first
one cut by the test's proxies (bench/chaos/proxy.py); the others hold each
interleaving to its outcome with the store's own functions, two slots of no
live process claiming by hand (as tests/agents/runtime/test_claims.py does).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest

from agents.errors import Conflict
from agents.models import Event, Session, ToolCall, Turn
from agents.runtime import store
from agents.runtime.ownership import Owner
from agents.runtime.state import CallState, Claimed
from agents.services import toolcall_resolve
from bench.chaos.proxy import Proxy
from tests.agents.helpers import (
    assert_invariants,
    call_running,
    deliver_ticket,
    kinds,
    wait_turn,
)
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# Two slots of no live process (key 0): each claim takes the other's for dead.
HOST_A = Owner(name="host-a:1/1", process=0)
HOST_B = Owner(name="host-b:2/1", process=0)
REFUSED = "Error: escalate_to_human: could not connect to the helpdesk"


def _through(proxy: Proxy, url: str) -> str:
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}"))


def _target(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


@pytest.mark.slow
@pytest.mark.parametrize(
    ("record_retry_s", "met_the_cut"),
    [
        # Back within the slot's retries: its retry finds the claim lost.
        ("20", r"retry of a call never sent lost its connection"),
        # Back after them: the step is given up, and the watchdog says it.
        ("1", r"raised unexpected"),
    ],
    ids=["back-within-the-retries", "back-after-them"],
)
def test_an_escalation_refused_while_its_host_was_cut_off_is_run_not_left_in_doubt(
    sandbox, workers, record_retry_s, met_the_cut
):
    env = workers.env
    database = Proxy(_target(env["DATABASE_URL"], 5432)).start()
    broker = Proxy(_target(env["REDIS_URL"], 6379)).start()
    try:
        # Host a: its database and broker through the proxies (its link);
        # every try of its escalation refused (a 429: nothing happened) for
        # longer than it takes host b to take the session over.
        victim = workers.start(
            "host-a",
            DATABASE_URL=_through(database, env["DATABASE_URL"]),
            REDIS_URL=_through(broker, env["REDIS_URL"]),
            CELERY_BROKER_URL=_through(broker, env["REDIS_URL"]),
            AGENTDESK_TOOL_RETRIES="7",  # eight tries over about 11 s
            AGENTDESK_DB_POOL_TIMEOUT_S="1",
            AGENTDESK_RECORD_RETRY_S=record_retry_s,
        )
        ticket = sandbox.ticket(
            email="dana.kowalski@example.com",
            subject="Manager please",
            body="This is the third time. I want to speak to a manager about order ORD-1007.",
            order_id="ORD-1007",
        )
        escalations = f"/helpdesk/tickets/{ticket['id']}/escalations"
        sandbox.fault(
            target="helpdesk",
            kind="status",
            status=429,
            count=8,
            match={"path_prefix": escalations},
        )
        # The first model call held until host b is up: host a drives the turn.
        held = sandbox.fault(target="messages", kind="hold", count=1, latency_ms=120_000)
        session = deliver_ticket(ticket)
        wait_for(lambda: _holding(sandbox, held["id"]), timeout=60, what="host a's model call")
        workers.start("host-b")
        sandbox.post(f"/_faults/{held['id']}/release", {})

        call = wait_for(
            lambda: ToolCall.objects.filter(
                session=session, name="escalate_to_human", status="running"
            ).first(),
            timeout=60,
            what="host a's escalation running",
        )
        database.cut()  # host a's link: its liveness lock goes, host b takes over
        broker.cut()
        wait_for(
            lambda: ToolCall.objects.get(pk=call.pk).status == "in_doubt",
            timeout=30,
            what="host b to take the running escalation for one in doubt",
        )
        # Host a met the cut when its refused call was to go back to wait
        # (before the fix, its task died there whatever the retries).
        victim.wait_for_log(met_the_cut, 60)
        database.heal()
        broker.heal()

        turn = wait_turn(session, timeout=90)
    finally:
        database.stop()
        broker.stop()

    assert turn.status == "succeeded", workers.logs()
    call.refresh_from_db()
    assert call.status == "succeeded" and call.attempts == 2, call.output
    assert sandbox.stats()["escalations"] == 1  # the refused tries never reached it
    noted = Event.objects.get(session=session, kind="tool.never_sent")
    assert noted.data["then"] == "resumed" and noted.data["attempt"] == 1
    assert noted.actor.split(":")[1].split("/")[0] == str(victim.pid)  # host a's slot said so
    order = kinds(session)
    assert order.index("tool.in_doubt") < order.index("tool.never_sent")
    assert order.index("tool.never_sent") < order.index("turn.resuming")
    assert_invariants(session)


def _holding(sandbox, rule_id: int) -> bool:
    return any(r["id"] == rule_id and r["holding"] for r in sandbox.get("/_faults")["faults"])


# --- Each interleaving, with the store's functions ---------------------------------


def _escalation_running(key: str) -> tuple[Session, Claimed]:
    """Host a's slot has marked the turn's escalation running."""
    return call_running(
        key,
        HOST_A,
        name="escalate_to_human",
        kind="not_idempotent",
        arguments={"reason": "manager"},
    )


def _taken_over(session: Session) -> tuple[Claimed, CallState]:
    """Host b's claim: a recovery that finds the escalation running."""
    claimed = store.claim(session.id, HOST_B)
    assert claimed is not None and claimed.recovered
    (call,) = claimed.calls
    assert call.id in claimed.in_flight_at_claim and call.status == "running"
    return claimed, call


def _never_sent(claimed: Claimed) -> str:
    """Host a, back on its link: its retry cannot be written (LostClaim), so
    it leaves word that the call never left."""
    with pytest.raises(store.LostClaim):
        store.retry_call_later(claimed, claimed.calls[0], "pending", REFUSED)
    return store.note_never_sent(claimed, claimed.calls[0], status="pending", reason=REFUSED)


def test_a_call_the_new_owner_has_not_judged_yet_is_run_not_doubted(broker):
    session, host_a = _escalation_running("ticket:never-sent-1")
    host_b, call = _taken_over(session)

    assert _never_sent(host_a) == "to_run"
    # Host b now judges the call it found running: not in doubt after all.
    assert store.mark_in_doubt(host_b, call, "may or may not have happened") is False
    assert call.status == "pending"
    store.mark_running(host_b, call)  # and it runs it, as a new attempt

    row = ToolCall.objects.get(pk=call.id)
    assert (row.status, row.attempts) == ("running", 2)
    assert row.output.startswith(store.evidence.NEVER_SENT)
    assert Session.objects.get(pk=session.pk).status == "running"
    # A second note (its first answer lost) writes nothing more.
    assert store.note_never_sent(host_a, host_a.calls[0], status="pending", reason=REFUSED) == (
        "noted"
    )
    (noted,) = Event.objects.filter(session=session, kind="tool.never_sent")
    assert noted.data["then"] == "to_run" and noted.actor == HOST_A.name


def test_a_call_already_in_doubt_goes_back_to_run_and_its_turn_resumes(broker, alice):
    session, host_a = _escalation_running("ticket:never-sent-2")
    host_b, call = _taken_over(session)
    assert store.mark_in_doubt(host_b, call, "may or may not have happened") is True
    assert Session.objects.get(pk=session.pk).status == "in_doubt"

    assert _never_sent(host_a) == "resumed"

    row = ToolCall.objects.get(pk=call.id)
    assert (row.status, row.attempts) == ("approved", 1)
    assert "did not happen" in row.output
    assert Turn.objects.get(pk=host_b.turn_id).status == "resuming"
    assert Session.objects.get(pk=session.pk).status == "running"
    order = kinds(session)
    assert order[-3:] == ["tool.in_doubt", "tool.never_sent", "turn.resuming"]
    # A person who opens the call now finds it settled: their resolution is refused.
    with pytest.raises(Conflict) as refused:
        toolcall_resolve(tool_call_id=call.id, user=alice, resolution="failed", note="gone")
    assert refused.value.current == "approved"
    # The next claim runs it.
    resumed = store.claim(session.id, HOST_B)
    assert resumed is not None and resumed.calls[0].status == "approved"


def test_a_person_who_resolves_the_call_first_keeps_their_decision(broker, alice):
    session, host_a = _escalation_running("ticket:never-sent-3")
    host_b, call = _taken_over(session)
    store.mark_in_doubt(host_b, call, "may or may not have happened")
    toolcall_resolve(
        tool_call_id=call.id, user=alice, resolution="succeeded", note="Saw it in the helpdesk."
    )

    assert _never_sent(host_a) == "settled"

    row = ToolCall.objects.get(pk=call.id)
    assert row.status == "succeeded" and row.output.startswith("Resolved by")
    noted = Event.objects.get(session=session, kind="tool.never_sent")
    assert noted.data["then"] == "settled" and noted.data["status"] == "succeeded"


def test_word_about_an_earlier_attempt_leaves_a_later_one_alone(broker, alice):
    """A person retried the call, and its new attempt went in doubt for its
    own reason (an answer lost): the word that attempt 1 never left says
    nothing about attempt 2."""
    session, host_a = _escalation_running("ticket:never-sent-4")
    host_b, call = _taken_over(session)
    store.mark_in_doubt(host_b, call, "may or may not have happened")
    toolcall_resolve(tool_call_id=call.id, user=alice, resolution="retry", note="Not there.")
    again = store.claim(session.id, HOST_B)
    assert again is not None
    (retried,) = again.calls
    store.mark_running(again, retried)
    store.mark_in_doubt(again, retried, "Outcome unknown: the answer was lost")

    assert _never_sent(host_a) == "settled"

    row = ToolCall.objects.get(pk=call.id)
    assert (row.status, row.attempts) == ("in_doubt", 2)
    assert row.output == "Outcome unknown: the answer was lost"
