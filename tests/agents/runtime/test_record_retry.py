"""A record whose answer was lost is written again only once the database
has said it did not land (store/retry.py). The record commits, its answer
is lost, and the check that asks whether it landed cannot reach the
database; the database comes back just as that check is refused. Before,
the next step was to write again, and the tool's result went on the
transcript twice; now the check is asked again, finds the row, and the
record is given up as done (Recorded). Real Postgres, through a TCP proxy of
the test's own that refuses connections while cut."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import OperationalError, connection

from agents.models import Event
from agents.runtime import store
from agents.runtime.ownership import Owner
from agents.runtime.store.retry import Recorded
from bench.chaos.proxy import Proxy
from tests.agents.helpers import call_running

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def through_proxy(monkeypatch):
    """This process's connections go through a proxy the test can cut."""
    s = connection.settings_dict
    proxy = Proxy((s["HOST"] or "127.0.0.1", int(s["PORT"] or 5432))).start()
    connection.close()
    connection.close_pool()
    monkeypatch.setitem(s, "HOST", "127.0.0.1")
    monkeypatch.setitem(s, "PORT", str(proxy.port))
    yield proxy
    proxy.heal()
    connection.close()
    connection.close_pool()
    proxy.stop()


def _heal_after_a_refusal(proxy: Proxy) -> None:
    deadline = time.monotonic() + 20
    while proxy.refused == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    proxy.heal()


def test_a_result_whose_answer_was_lost_is_not_recorded_twice(through_proxy):
    owner = Owner(name="vm:1/1", process=0)
    session, claimed = call_running(
        "ticket:lost-answer", owner, name="lookup_order", kind="read_only"
    )
    call = claimed.calls[0]
    tries = []

    def record():
        tries.append(1)
        store.record_tool_result(
            claimed,
            call,
            content='{"status": "shipped"}',
            is_error=False,
            status="succeeded",
            data={"tool_use_id": call.tool_use_id, "name": call.name},
            next_call=None,
        )
        if len(tries) == 1:  # committed; then the answer never comes back
            through_proxy.cut()
            threading.Thread(target=_heal_after_a_refusal, args=(through_proxy,)).start()
            raise OperationalError("server closed the connection unexpectedly")

    with pytest.raises(Recorded):
        store.record_retrying(claimed, record)
    assert len(tries) == 1  # never written again
    results = Event.objects.filter(session=session, kind="tool.finished")
    assert results.count() == 1


def test_the_read_between_a_paid_reply_and_its_record_waits_out_a_lost_connection(
    through_proxy,
):
    """A reply that would end the turn first asks which of the turn's
    actions could not be done (engine._undone): given up on a lost
    connection, the reply was lost and the model paid again."""
    owner = Owner(name="vm:1/1", process=0)
    _, claimed = call_running("ticket:undone-read", owner, name="lookup_order", kind="read_only")
    through_proxy.cut()
    threading.Thread(target=_heal_after_a_refusal, args=(through_proxy,)).start()

    assert store.undone_actions(claimed) == []
    assert through_proxy.refused > 0  # it was tried while cut, and again once healed


def test_a_slot_that_could_not_let_go_at_its_slice_end_lets_go_once_the_database_is_back(
    through_proxy,
):
    """A slot whose time slice ran out lets go (store.release) and sends its
    own trigger. When the release failed (the database away), its name and
    its live process's key stayed on the session, which no slot drove and no
    sweeper looked at. Now it is let go the way a dead owner's is (abandon):
    at once if it can, else by the watchdog once the database is back."""
    from agents.models import SessionRuntime
    from agents.runtime import engine

    owner = Owner(name="vm:1/1", process=4242)  # a live process's key, as far as this goes
    session, claimed = call_running(
        "ticket:slice-away", owner, name="lookup_order", kind="read_only"
    )
    through_proxy.cut()
    threading.Thread(target=_heal_after_a_refusal, args=(through_proxy,)).start()
    with pytest.raises(OperationalError):
        engine._release(claimed)

    store.abandon_pending()  # the watchdog's next look, if it could not at once
    runtime = SessionRuntime.objects.get(session_id=session.id)
    assert (runtime.owner, runtime.owner_process) == ("vm:1/1", 0)  # a dead owner's: swept
