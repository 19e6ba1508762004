"""/metrics: counters from real workers, gauges from Postgres and Redis,
and the bearer token when one is configured."""

from __future__ import annotations

import re
import time

import pytest
import requests
from django.test import Client

from agents.models import Session, ToolCall
from tests.agents.helpers import deliver_ticket, wait_turn
from tests.observability.conftest import REFUND, TICKET
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _value(text: str, name: str, **labels: str) -> float:
    """The sample `name{labels}` (labels in any order), 0 when absent."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.match(r"^([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)$", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(3) or ""))
        if found == labels:
            return float(match.group(4))
    return 0.0


def test_a_turn_on_a_real_worker_moves_the_counters_web_serves(sandbox, workers, web):
    workers.start()
    before = requests.get(f"{web.url}/metrics", timeout=10)
    assert before.status_code == 200
    assert before.headers["Content-Type"].startswith("text/plain")
    session = deliver_ticket(sandbox.ticket(**TICKET))
    turn = wait_turn(session)
    assert turn.status == "succeeded", workers.logs()

    started = time.perf_counter()
    text = requests.get(f"{web.url}/metrics", timeout=10).text
    scrape_s = time.perf_counter() - started
    calls = list(ToolCall.objects.filter(session=session))
    assert _value(text, "agentdesk_steps_total", kind="model", outcome="ok") == turn.steps
    assert _value(text, "agentdesk_model_calls_total", outcome="ok") == turn.steps
    assert _value(text, "agentdesk_step_seconds_count", kind="model") == turn.steps
    assert _value(text, "agentdesk_model_call_seconds_count") == turn.steps
    for name in {c.name for c in calls}:
        expected = sum(1 for c in calls if c.name == name)
        assert _value(text, "agentdesk_tool_calls_total", tool=name, outcome="succeeded") == (
            expected
        )
    assert _value(text, "agentdesk_turns_finished_total", status="succeeded") == 1
    assert _value(text, "agentdesk_model_tokens_total", direction="output") == turn.output_tokens
    assert _value(text, "agentdesk_sessions", status="idle") >= 1
    assert "agentdesk_queue_depth_total" in text
    assert _value(text, "agentdesk_recoveries_total") == 0
    print(f"scrape took {scrape_s * 1000:.1f} ms")


def test_pending_approvals_and_queue_depth_are_read_at_scrape_time(sandbox, workers, broker, bob):
    from approvals.models import Approval
    from approvals.services import approval_decide

    workers.start()
    session = deliver_ticket(sandbox.ticket(**REFUND))
    approval = wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        what="a pending approval",
    )
    # The approval is recorded with the model's reply; the session is parked
    # (its status set) by the worker's next, separate commit.
    wait_for(
        lambda: Session.objects.get(pk=session.pk).status == "waiting_for_approval",
        what="the session parked for the approval",
    )
    text = Client().get("/metrics").content.decode()
    assert _value(text, "agentdesk_approvals_pending") == 1
    assert _value(text, "agentdesk_approval_oldest_pending_seconds") >= 0
    assert _value(text, "agentdesk_sessions", status="waiting_for_approval") == 1

    workers.stop_all()  # nobody consumes: what we enqueue stays queued
    broker.lpush("celery\x06\x166", b"{}", b"{}")
    broker.lpush("celery", b"{}")
    text = Client().get("/metrics").content.decode()
    assert _value(text, "agentdesk_queue_depth", priority="6") == 2
    assert _value(text, "agentdesk_queue_depth", priority="0") == 1
    assert _value(text, "agentdesk_queue_depth_total") == 3

    approval_decide(approval_id=approval.id, user=bob, decision="approve")
    text = Client().get("/metrics").content.decode()  # this process decided: its own count
    assert _value(text, "agentdesk_approvals_pending") == 0
    assert _value(text, "agentdesk_approval_decision_seconds_count", decision="approved") >= 1


def test_metrics_want_the_bearer_token_when_one_is_set(settings):
    settings.AGENTDESK_METRICS_TOKEN = "s3cret-token"
    client = Client()
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert b"agentdesk_" not in refused.content
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic s3cret-token").status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert ok.status_code == 200 and b"agentdesk_sessions" in ok.content
    settings.AGENTDESK_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 200  # open when no token is configured
