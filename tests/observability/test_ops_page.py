"""The operations page: series from the event log and the approvals, drawn
as SVG on the server, refreshed by htmx."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.events import EventSpec
from agents.models import Event
from agents.observability.series import ops_series
from approvals.models import Approval
from tests.agents.helpers import triggers_bypassed
from tests.dashboard import factories

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}


def _history() -> None:
    """Ten minutes ago: 3 steps (one a failed tool), a recovery, a failed turn."""
    session = factories.session(key="ticket:ops-1")
    usage = {"input": 1000, "output": 200}
    factories.append(
        session.id,
        EventSpec("model.replied", {"usage": usage, "cost_micros": 6000}),
        EventSpec("tool.finished", {"name": "lookup_order", "status": "succeeded"}),
        EventSpec("tool.finished", {"name": "issue_refund", "status": "failed"}),
        EventSpec("recovery", {"previous_owner": "w1:1"}),
        EventSpec("turn.failed", {"number": 1, "error": "x"}),
    )
    with triggers_bypassed():  # events are append-only; faking their time needs a superuser
        Event.objects.filter(session=session).update(
            created_at=timezone.now() - timedelta(minutes=10)
        )
    # Older than any window: not counted.
    factories.append(session.id, EventSpec("model.replied", {"usage": usage}))
    with triggers_bypassed():
        Event.objects.filter(session=session, seq=6).update(
            created_at=timezone.now() - timedelta(hours=30)
        )


def test_series_count_steps_failures_recoveries_and_spend_in_the_window():
    approval = factories.pending_approval()  # writes a few events of its own
    now = timezone.now()
    Approval.objects.filter(pk=approval.pk).update(
        status="approved",
        created_at=now - timedelta(seconds=100),
        decided_at=now - timedelta(seconds=10),
    )
    before = ops_series(hours=1)
    _history()

    series = ops_series(hours=1)
    assert len(series.buckets) == 60 and series.width_s == 60

    def added(name: str) -> float:
        return series.total(name) - before.total(name)

    assert added("steps") == 3  # model.replied + 2 tool.finished
    assert added("failures") == 2  # the failed tool, the failed turn
    assert added("recoveries") == 1
    assert added("tokens") == 1200
    assert added("cost_usd") == pytest.approx(0.006)
    assert series.total("decided") == 1 and series.wait_avg_s == pytest.approx(90)
    assert ops_series(hours=24).total("steps") == series.total("steps")  # not the 30 h old one


def test_support_sees_the_charts_and_htmx_gets_the_partial(alice):
    _history()
    client = Client()
    client.force_login(alice)
    page = client.get("/ops/?hours=1")
    assert page.status_code == 200
    html = page.content.decode()
    for title in ("Throughput", "Approval wait", "Failures", "Recoveries", "Spend"):
        assert f">{title}</h2>" in html
    assert 'hx-trigger="every 10s"' in html and 'id="ops-charts"' in html
    # Charts are SVG, then uPlot from /static/ draws them from data blocks:
    # no script in the page runs (a type="application/json" block never does).
    main = html.split("<main>")[1]
    assert main.count("<script") == 5 == main.count('<script id="chart-')
    assert main.count('type="application/json">') == 5
    assert (
        len(re.findall(r'<rect class="ops-bar"', html)) == 4
    )  # steps, failures, recoveries, spend
    assert "$0.01 for 1,200 tokens" in html
    assert '<a href="/ops/">Operations</a>' in html  # in the nav

    partial = client.get("/ops/?hours=1", headers=HX)
    assert partial.status_code == 200
    body = partial.content.decode()
    assert body.lstrip().startswith('<section id="ops-charts"') and "<html" not in body


def test_a_bad_window_falls_back_and_anyone_without_a_role_is_refused(alice, dave):
    client = Client()
    assert client.get("/ops/").status_code == 302  # to the login page
    client.force_login(dave)
    assert client.get("/ops/").status_code == 403
    client.force_login(alice)
    page = client.get("/ops/?hours=<script>")
    assert page.status_code == 200 and b"Last 6 h" in page.content
    assert b"<script>" not in page.content


def test_admin_and_approver_see_the_page_too(bob, carol):
    for user in (bob, carol):
        client = Client()
        client.force_login(user)
        assert client.get("/ops/").status_code == 200
