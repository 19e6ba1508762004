"""A step that must be tried again later is not given up for a connection
blip (issue 26).

When the model fails (or every try of a tool call is refused before it
leaves), the slot notes it, releases the session and says when to try again
(store.note_step_failure, store.retry_call_later). When the database
connection is lost under that note, it is tried again on a new one while
the fence holds, as a record is (store/retry.py): before, the task crashed
with OperationalError, and the next claim was a recovery, counted toward
the poison-step cap. A real worker reaches the database through the test's
proxy (bench/chaos/proxy.py), which the test cuts while the step is out.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest

from agents.models import Event, SessionRuntime, ToolCall
from agents.runtime import store
from agents.runtime.ownership import Owner
from bench.chaos.proxy import Proxy
from tests.agents.helpers import assert_invariants, call_running, deliver_ticket, kinds, wait_turn
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# The worker met the cut in its note: retried (or, before, the task died).
MET_THE_CUT = r"{what} lost its connection|raised unexpected"


@pytest.fixture
def database(workers):
    """A proxy in front of the test database; the worker's URL through it."""
    url = urlsplit(workers.env["DATABASE_URL"])
    proxy = Proxy((url.hostname or "127.0.0.1", url.port or 5432)).start()
    proxy.url = urlunsplit(url._replace(netloc=f"{url.username}@127.0.0.1:{proxy.port}"))
    yield proxy
    proxy.stop()


def _where_is_my_order(sandbox) -> dict:
    return sandbox.ticket(
        email="alice.martin@example.com",
        subject="Where is my order ORD-1002?",
        body="Hi, could you tell me where order ORD-1002 is? Thanks",
        order_id="ORD-1002",
    )


@pytest.mark.slow
def test_a_model_failure_met_by_a_lost_connection_is_noted_once_it_is_back(
    sandbox, workers, database
):
    worker = workers.start(
        "blip",
        DATABASE_URL=database.url,
        AGENTDESK_MODEL_TIMEOUT_S="3",  # the held model call is cut here...
        AGENTDESK_DB_POOL_TIMEOUT_S="1",  # ...and its note finds no connection
    )
    held = sandbox.fault(target="messages", kind="hold", count=1, latency_ms=60_000)
    session = deliver_ticket(_where_is_my_order(sandbox))
    wait_for(
        lambda: any(
            r["id"] == held["id"] and r["holding"] for r in sandbox.get("/_faults")["faults"]
        ),
        timeout=60,
        what="the model call held",
    )

    database.cut()
    worker.wait_for_log(MET_THE_CUT.format(what="note of a failed step"), timeout=60)
    database.heal()
    turn = wait_turn(session, timeout=90)

    assert turn.status == "succeeded", workers.logs()
    (failed,) = Event.objects.filter(session=session, kind="model.failed")
    assert "no reply within 3s" in failed.data["reason"]
    assert "recovery" not in kinds(session)  # a step noted, not a slot taken for dead
    assert "raised unexpected" not in worker.log()
    assert_invariants(session)


@pytest.mark.slow
def test_a_refused_call_met_by_a_lost_connection_goes_back_to_wait_once_it_is_back(
    sandbox, workers, database
):
    worker = workers.start(
        "blip",
        DATABASE_URL=database.url,
        AGENTDESK_TOOL_RETRIES="5",  # six tries, over about 7 s
        AGENTDESK_DB_POOL_TIMEOUT_S="1",
    )
    ticket = _where_is_my_order(sandbox)
    sandbox.fault(
        target="helpdesk",
        kind="status",
        status=429,
        count=6,
        match={"path_prefix": f"/helpdesk/tickets/{ticket['id']}/replies"},
    )
    session = deliver_ticket(ticket)
    wait_for(
        lambda: ToolCall.objects.filter(
            session=session, name="send_reply", status="running"
        ).exists(),
        timeout=60,
        what="the reply being tried",
    )

    database.cut()
    worker.wait_for_log(MET_THE_CUT.format(what="retry of a call never sent"), timeout=60)
    database.heal()
    turn = wait_turn(session, timeout=90)

    assert turn.status == "succeeded", workers.logs()
    reply = ToolCall.objects.get(session=session, name="send_reply")
    assert (reply.status, reply.attempts) == ("succeeded", 2)
    assert kinds(session).count("tool.unavailable") == 1
    assert "recovery" not in kinds(session)
    assert sandbox.stats()["replies"] == 1
    assert_invariants(session)


# --- Safe to run twice: the first commit may land with its answer lost ------------

SLOT = Owner(name="test-worker:1/1", process=0)  # claims by hand


def test_a_note_of_a_failed_step_made_twice_counts_once(broker):
    session, claimed = call_running(
        "ticket:noted-twice", SLOT, name="send_reply", kind="idempotent_by_key"
    )
    first = store.note_step_failure(claimed, "model.failed", "overloaded")
    again = store.note_step_failure(claimed, "model.failed", "overloaded")

    runtime = SessionRuntime.objects.get(pk=session.pk)
    assert (runtime.step_attempts, runtime.owner) == (1, "")
    assert 0 < again <= first
    assert kinds(session).count("model.failed") == 1


def test_a_call_put_back_twice_is_put_back_once(broker):
    session, claimed = call_running(
        "ticket:put-back-twice", SLOT, name="send_reply", kind="idempotent_by_key"
    )
    (call,) = claimed.calls
    store.retry_call_later(claimed, call, "pending", "429")
    store.retry_call_later(claimed, call, "pending", "429")

    runtime = SessionRuntime.objects.get(pk=session.pk)
    assert (runtime.step_attempts, runtime.owner) == (1, "")
    assert ToolCall.objects.get(pk=call.id).status == "pending"
    assert kinds(session).count("tool.unavailable") == 1
