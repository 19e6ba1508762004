"""Budgets: a turn that would cross a step, token, cost or wall-clock limit
fails with the reason before the model is called again; a session that would
cross its spend limit pauses until an admin raises it, then carries on.

Model calls are counted at the sandbox, never in our own tables.
"""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Event, Session, Turn
from tests.agents.helpers import assert_invariants, deliver_ticket, wait_turn
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TICKET = {
    "email": "alice.martin@example.com",
    "subject": "Where is my order",
    "body": "Hi, where is my order ORD-1001? It has not arrived.",
    "order_id": "ORD-1001",
}


def _model_requests(sandbox) -> int:
    return sandbox.stats()["model_requests"]["total"]


def _budget_event(session: Session) -> dict:
    return Event.objects.get(session=session, kind="budget.exceeded").data


def _page(user, session: Session) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(f"/sessions/{session.id}/")
    assert response.status_code == 200
    return response.content.decode()


def _failed_by_budget(session: Session, workers) -> Turn:
    turn = wait_turn(session, timeout=60)
    assert turn.status == "failed", workers.logs()
    assert turn.error.startswith("budget: ")
    return turn


def test_the_step_setting_is_the_default_and_step_k_plus_1_is_never_sent(
    sandbox, workers, carol, settings
):
    settings.AGENTDESK_MAX_TURN_STEPS = 2  # read when the session is created
    workers.start()
    session = deliver_ticket(sandbox.ticket(**TICKET))
    assert session.max_turn_steps == 2

    turn = _failed_by_budget(session, workers)

    assert turn.error == "budget: 3 steps > 2 per turn"
    assert turn.steps == 2
    assert _model_requests(sandbox) == 2  # the third call was refused, not made
    event = _budget_event(session)
    assert (event["limit"], event["used"], event["max"]) == ("max_turn_steps", 3, 2)
    assert event["action"] == "failed"
    assert "budget: 3 steps &gt; 2 per turn" in _page(carol, session)
    assert_invariants(session)


def _session_with(sandbox, **limits) -> Session:
    """A ticket's session with the given limits, before its first turn runs."""
    from agents import services

    ticket = sandbox.ticket(**TICKET)
    session = services.session_get_or_create(key=f"ticket:{ticket['id']}")
    Session.objects.filter(pk=session.pk).update(**limits)
    services.message_post(key=session.key, text=TICKET["body"], trigger="customer_message")
    return session


def test_a_token_limit_ends_the_turn_before_the_call_that_would_cross_it(sandbox, workers, carol):
    workers.start()
    session = _session_with(sandbox, max_turn_tokens=3000)

    turn = _failed_by_budget(session, workers)

    event = _budget_event(session)
    assert event["limit"] == "max_turn_tokens"
    assert _model_requests(sandbox) == turn.steps >= 1  # nothing sent after the refusal
    # The refused call was estimated to cross the line; what was spent did not.
    assert turn.input_tokens + turn.output_tokens < 3000
    assert "3,000 tokens per turn" in turn.error
    assert "3,000 tokens per turn" in _page(carol, session)
    assert_invariants(session)


def test_a_cost_limit_ends_the_turn_and_cost_comes_from_the_price_table(
    sandbox, workers, carol, settings
):
    workers.start()
    session = _session_with(sandbox, max_turn_cost_micros=12_000)  # $0.012

    turn = _failed_by_budget(session, workers)

    event = _budget_event(session)
    assert event["limit"] == "max_turn_cost_micros"
    assert _model_requests(sandbox) == turn.steps >= 1
    # claude-sonnet-5 (the sandbox echoes the model asked for): $3 / $15 per MTok.
    expected = sum(
        3 * e.data["usage"]["input"] + 15 * e.data["usage"]["output"]
        for e in Event.objects.filter(session=session, kind="model.replied")
    )
    assert turn.cost_micros == expected < 12_000
    replied = Event.objects.filter(session=session, kind="model.replied").first()
    assert replied.data["model"] == "claude-sonnet-5"
    assert "$0.0120 per turn" in turn.error
    page = _page(carol, session)
    assert "$0.0120 per turn" in page
    assert f"${expected / 1_000_000:,.4f}" in page  # the spend, on the session page


def test_wall_clock_is_measured_from_the_durable_start_of_the_turn(sandbox, workers, carol):
    workers.start()
    ticket = sandbox.ticket(**{**TICKET, "body": TICKET["body"] + " [[sandbox:slow]]"})
    from agents import services

    session = services.session_get_or_create(key=f"ticket:{ticket['id']}")
    Session.objects.filter(pk=session.pk).update(max_turn_seconds=4)
    services.message_post(key=session.key, text=ticket["body"], trigger="customer_message")

    turn = _failed_by_budget(session, workers)

    event = _budget_event(session)
    assert event["limit"] == "max_turn_seconds" and event["used"] >= 4
    # Each slow reply takes > 3 s: the turn ends after one or two of its ~5
    # calls, and the call after the limit is never sent.
    assert 1 <= turn.steps <= 2
    assert _model_requests(sandbox) == turn.steps
    assert (turn.finished_at - turn.started_at).total_seconds() >= 4
    assert "s &gt;= 4 s" in _page(carol, session)
    assert "recovery" not in list(
        Event.objects.filter(session=session).values_list("kind", flat=True)
    )


def test_a_session_spend_limit_pauses_and_an_admin_raise_resumes(sandbox, workers, alice, carol):
    workers.start()
    session = _session_with(sandbox, max_total_tokens=2500)

    paused = wait_for(
        lambda: Session.objects.filter(pk=session.pk, status="paused").first(),
        timeout=60,
        what="the session paused by its budget",
    )
    turn = Turn.objects.get(session=session, number=1)
    assert turn.status == "waiting_for_approval"
    assert "paused until an admin raises the budget" in turn.error
    event = _budget_event(session)
    assert (event["scope"], event["action"]) == ("session", "paused")
    sent = _model_requests(sandbox)
    assert sent == turn.steps if turn.steps else sent >= 1
    page = _page(carol, paused)
    assert 'id="budget-paused"' in page and "Raise budget and resume" in page
    assert "Raise budget" not in _page(alice, paused)  # support staff cannot raise it

    support = Client()
    support.force_login(alice)
    assert (
        support.post(f"/sessions/{session.id}/budget", {"max_total_tokens": ""}).status_code == 403
    )
    admin = Client()
    admin.force_login(carol)
    too_low = admin.post(f"/sessions/{session.id}/budget", {"max_total_tokens": "10"})
    assert too_low.status_code == 409
    response = admin.post(f"/sessions/{session.id}/budget", {"max_total_tokens": "1000000"})
    assert response.status_code == 303

    turn = wait_turn(session, timeout=60)
    assert turn.status == "succeeded", workers.logs()
    assert turn.error == ""
    assert _model_requests(sandbox) > sent
    assert Session.objects.get(pk=session.pk).max_total_tokens == 1_000_000
    kinds = list(Event.objects.filter(session=session).values_list("kind", flat=True))
    assert kinds.index("budget.exceeded") < kinds.index("budget.raised")
    assert kinds.index("budget.raised") < kinds.index("turn.resuming")
    assert_invariants(session)


def test_prices_follow_the_price_table_setting_when_it_is_replaced(settings):
    """The longest matching prefix wins, else "*"; a replaced table is what counts."""
    from agents import budgets

    settings.AGENTDESK_PRICES = {"claude-": [3, 15], "claude-haiku": [1, 5], "*": [10, 10]}
    assert budgets.prices_for("claude-haiku-4") == (1.0, 5.0)  # the longest prefix
    assert budgets.prices_for("claude-sonnet-4") == (3.0, 15.0)
    assert budgets.prices_for("other") == (10.0, 10.0)
    assert budgets.cost_micros("claude-haiku-4", 1000, 100) == 1500

    settings.AGENTDESK_PRICES = {"claude-haiku": [2, 8]}
    assert budgets.prices_for("claude-haiku-4") == (2.0, 8.0)
    assert budgets.prices_for("other") is None
