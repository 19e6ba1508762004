"""The desk's follow-ups, jobs, storage and fork: pages and POSTs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.features.followups import followup_schedule
from agents.models import Event, FollowUp, Job, Session
from tests.dashboard import factories

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}
HOSTILE = '<script>alert("x")</script>\u202e'


def _followup(session: Session, note: str = "Nudge the customer.") -> FollowUp:
    row, _ = followup_schedule(
        session_key=session.key,
        key=f"{session.key}:toolu_{FollowUp.objects.count()}",
        note=note,
        due_at=timezone.now() + timedelta(hours=24),
    )
    return row


def test_the_session_page_lists_followups_storage_and_escapes_the_note(client, alice, broker):
    session = factories.session()
    factories.turn(session)
    _followup(session, note=HOSTILE)
    client.force_login(alice)

    body = client.get(f"/sessions/{session.id}/").content.decode()

    assert 'id="followups"' in body and "Cancel follow-up" in body
    assert "<script>alert" not in body and "&lt;script&gt;" in body
    assert "\\u202e" in body  # the invisible override is shown, not obeyed
    assert 'aria-label="Storage"' in body and "transcript" in body
    assert "Fork into a new session" not in body  # support may not fork


def test_cancel_a_followup_from_the_desk_then_again_is_a_409(client, alice, broker):
    session = factories.session()
    row = _followup(session)
    client.force_login(alice)
    url = f"/sessions/{session.id}/followups/cancel"

    first = client.post(url, {"followup_id": row.id}, headers=HX)
    again = client.post(url, {"followup_id": row.id}, headers=HX)

    assert first.status_code == 200 and "Follow-up canceled." in first.content.decode()
    row.refresh_from_db()
    assert row.status == "canceled" and row.canceled_by == "alice"
    assert again.status_code == 409 and "already canceled" in again.content.decode()
    kinds = Event.objects.filter(session=session, kind="followup.canceled").count()
    assert kinds == 1


def test_a_plain_form_cancel_redirects_back_to_the_session(client, alice, broker):
    session = factories.session()
    row = _followup(session)
    client.force_login(alice)
    response = client.post(f"/sessions/{session.id}/followups/cancel", {"followup_id": row.id})
    assert response.status_code == 303 and response["Location"] == f"/sessions/{session.id}/"


def test_another_sessions_followup_is_a_404(client, alice, broker):
    mine, other = factories.session(), factories.session()
    row = _followup(other)
    client.force_login(alice)
    response = client.post(f"/sessions/{mine.id}/followups/cancel", {"followup_id": row.id})
    assert response.status_code == 404
    row.refresh_from_db()
    assert row.status == "pending"


def test_the_jobs_page_shows_a_dead_job_with_a_retry_button(client, alice):
    dead = Job.objects.create(
        kind="retriage_customer",
        arguments={"customer": HOSTILE},
        status="dead",
        attempts=3,
        last_error="JobItemFailed: ticket:1: a turn is already running",
    )
    Job.objects.create(kind="retriage_customer", arguments={"customer": "b@x"}, status="succeeded")
    client.force_login(alice)

    body = client.get("/jobs/").content.decode()

    assert f'id="job-{dead.id}"' in body and "Retry" in body and "a turn is already running" in body
    assert body.count(">Retry</button>") == 1  # only the dead one
    assert "<script>alert" not in body
    only_dead = client.get("/jobs/?status=dead").content.decode()
    assert f'id="job-{dead.id}"' in only_dead and "b@x" not in only_dead


def test_retry_a_dead_job_queues_it_again_once(client, alice, broker):
    dead = Job.objects.create(kind="retriage_customer", arguments={}, status="dead", attempts=3)
    client.force_login(alice)

    first = client.post(f"/jobs/{dead.id}/retry", headers=HX)
    again = client.post(f"/jobs/{dead.id}/retry", headers=HX)

    assert first.status_code == 200 and "Queued again." in first.content.decode()
    assert again.status_code == 409
    dead.refresh_from_db()
    assert dead.status == "queued" and dead.max_attempts == 6


def test_retriage_from_the_session_page_queues_one_job_on_a_double_click(client, alice, broker):
    session = factories.session(customer="alice.martin@example.com")
    client.force_login(alice)
    url = f"/sessions/{session.id}/retriage"

    first = client.post(url, headers=HX)
    second = client.post(url, headers=HX)

    assert first.status_code == second.status_code == 200
    assert Job.objects.count() == 1
    job = Job.objects.get()
    assert job.arguments["customer"] == "alice.martin@example.com" and job.created_by == alice
    assert "Already queued" in second.content.decode()


def test_only_admins_see_and_use_the_fork(client, alice, carol, broker):
    session = factories.session()
    factories.turn(session)
    client.force_login(alice)
    assert client.post(f"/sessions/{session.id}/fork", {"upto": 2}).status_code == 403
    client = Client()
    client.force_login(carol)
    assert "Fork into a new session" in client.get(f"/sessions/{session.id}/").content.decode()

    response = client.post(f"/sessions/{session.id}/fork", {"upto": 2})

    fork = Session.objects.get(key=f"{session.key}/fork-1")
    assert response.status_code == 303 and response["Location"] == f"/sessions/{fork.id}/"
    assert client.get(response["Location"]).status_code == 200


def test_the_admin_shows_a_sessions_storage(client, carol, broker):
    from dashboard.roles import ADMIN, assign_role

    assign_role(carol, ADMIN)  # staff: the Django admin is part of the role
    session = factories.session()
    factories.turn(session)
    client.force_login(carol)
    body = client.get(f"/admin/agents/session/{session.id}/change/").content.decode()
    assert "Storage (rows, bytes as stored)" in body and "transcript: 2 rows" in body
    assert client.get("/admin/agents/job/").status_code == 200
    assert client.get("/admin/agents/followup/").status_code == 200
