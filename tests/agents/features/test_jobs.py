"""Jobs on real workers: a bulk re-triage succeeds once per session; a job
whose target keeps failing ends dead and shows in the desk; a retry from the
desk runs it again."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.features.jobs import job_start
from agents.models import Job, Session, Turn
from tests.dashboard import factories
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CUSTOMER = "alice.martin@example.com"


def _tickets(n: int, **kwargs) -> list[Session]:
    return [factories.session(customer=CUSTOMER, **kwargs) for _ in range(n)]


def _retriage_turns(session: Session) -> list[Turn]:
    return list(Turn.objects.filter(session=session, input__startswith="Please re-triage"))


def _wait_job(job: Job, statuses: tuple[str, ...], timeout: float = 40) -> Job:
    def done():
        job.refresh_from_db()
        return job if job.status in statuses else None

    return wait_for(done, timeout=timeout, what=f"job {job.id} in {statuses}")


def _fast(workers) -> None:
    workers.env.update(AGENTDESK_JOB_BACKOFF_S="0.2", AGENTDESK_JOB_SWEEP_INTERVAL_S="0.5")


def test_a_bulk_retriage_posts_once_into_each_open_ticket(workers, alice):
    _fast(workers)
    workers.start()
    open_ones = _tickets(3, context={})
    closed = factories.session(customer=CUSTOMER, context={"status": "closed"})
    other = factories.session(customer="someone@else.example")

    job, created = job_start(
        kind="retriage_customer", arguments={"customer": CUSTOMER, "reason": "new policy"}
    )
    again, created_again = job_start(
        kind="retriage_customer", arguments={"customer": CUSTOMER, "reason": "new policy"}
    )
    _wait_job(job, ("succeeded",))

    assert created and not created_again and again.id == job.id
    assert job.items_total == 3 and job.items_done == 3 and job.attempts == 1
    for session in open_ones:
        turns = _retriage_turns(session)
        assert len(turns) == 1 and "new policy" in turns[0].input
    assert not _retriage_turns(closed) and not _retriage_turns(other)


def test_a_job_whose_target_keeps_failing_ends_dead_then_a_desk_retry_finishes_it(workers, alice):
    _fast(workers)
    workers.start()
    workers.beat()
    ok, stuck = _tickets(2, context={})
    # `stuck` refuses messages while a turn is open, and its turn waits on a
    # human: every attempt fails on it.
    Session.objects.filter(pk=stuck.pk).update(message_policy="reject")
    factories.parked_call(owner=stuck)

    job, _ = job_start(kind="retriage_customer", arguments={"customer": CUSTOMER})
    _wait_job(job, ("dead",))

    assert job.attempts == job.max_attempts == 3
    assert "a turn is already running" in job.last_error
    assert len(_retriage_turns(ok)) == 1  # done once, not once per attempt
    assert not _retriage_turns(stuck)
    desk = Client()
    desk.force_login(alice)
    page = desk.get("/jobs/?status=dead").content.decode()
    assert f'id="job-{job.id}"' in page and ">Retry</button>" in page

    # A person lets the session queue messages again.
    Session.objects.filter(pk=stuck.pk).update(message_policy="queue")
    response = desk.post(f"/jobs/{job.id}/retry", headers={"HX-Request": "true"})
    assert response.status_code == 200
    _wait_job(job, ("succeeded",))

    assert job.attempts == 4 and job.items_done == 2
    assert len(_retriage_turns(ok)) == 1 and len(_retriage_turns(stuck)) == 1
