"""First contact (services.session_get_or_create): one statement writes the
session and its runtime row with the models' defaults, or nothing at all when
the key is taken."""

from __future__ import annotations

import pytest

from agents.models import Session, SessionRuntime
from agents.services import session_get_or_create
from tests.agents.helpers import at_once


@pytest.mark.django_db
def test_a_new_key_gets_a_session_and_its_runtime_with_the_model_defaults(settings):
    session = session_get_or_create(key="ticket:first", title="T" * 400, context={"id": 7})

    stored = Session.objects.get(key="ticket:first")
    assert session.pk == stored.pk and not session._state.adding
    assert stored.title == "T" * 300  # cut to the column, as before
    assert stored.context == {"id": 7} and stored.status == Session.Status.IDLE
    assert stored.max_turn_steps == settings.AGENTDESK_MAX_TURN_STEPS
    assert stored.created_at is not None and stored.updated_at is not None
    runtime = SessionRuntime.objects.get(session_id=session.pk)
    assert (runtime.fence, runtime.last_seq, runtime.owner, runtime.cost_micros) == (0, 0, "", 0)


@pytest.mark.django_db
def test_a_step_budget_can_be_given_on_first_contact():
    session = session_get_or_create(key="ticket:budget", max_turn_steps=7)
    assert Session.objects.get(pk=session.pk).max_turn_steps == 7


@pytest.mark.django_db
def test_a_taken_key_returns_that_session_and_writes_nothing():
    first = session_get_or_create(key="ticket:taken", title="first")
    again = session_get_or_create(key="ticket:taken", title="second", max_turn_steps=3)

    assert again.pk == first.pk and again.title == "first"
    assert Session.objects.filter(key="ticket:taken").count() == 1
    assert SessionRuntime.objects.filter(session_id=first.pk).count() == 1
    assert Session.objects.get(pk=first.pk).max_turn_steps != 3


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_contacts_reach_one_session():
    ids = at_once(lambda: session_get_or_create(key="ticket:race").pk)

    assert len(ids) == 4 and len(set(ids)) == 1
    assert SessionRuntime.objects.filter(session_id=ids[0]).count() == 1
