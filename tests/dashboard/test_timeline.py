"""Each turn's timeline: model and tool steps with their durations, approval
waits, recoveries, in order and to scale, from the event log; one query for
the page however many turns it shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agents.events import EventSpec
from agents.models import Event
from dashboard.timeline import SPAN, build
from tests.dashboard import factories

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def _at(at_ms: int, kind: str, **data) -> Event:
    """An event `at_ms` after T0 (its seq, too: the events come in order)."""
    return Event(seq=at_ms, kind=kind, data=data, created_at=T0 + timedelta(milliseconds=at_ms))


def test_steps_come_in_order_with_durations_waits_and_a_recovery_to_scale():
    events = [
        _at(0, "turn.accepted", number=1),
        _at(10, "turn.started", number=1),
        _at(
            810,
            "model.replied",
            ms=800,
            usage={"input": 900, "output": 60},
            tool_calls=["lookup_order"],
        ),
        _at(1050, "tool.finished", name="lookup_order", status="succeeded", ms=240),
        _at(
            2050,
            "model.replied",
            ms=1000,
            usage={"input": 1200, "output": 70},
            tool_calls=["issue_refund"],
        ),
        _at(2060, "approval.requested", tool_use_id="toolu_1", policy="refund_over_limit"),
        _at(6060, "approval.decided", tool_use_id="toolu_1", decision="approved"),
        _at(8060, "recovery", previous_owner="w1:host:12/0", stalled_s=1.5),
        _at(8300, "tool.finished", name="issue_refund", status="succeeded", ms=200, reissued=True),
        _at(9000, "model.replied", ms=600, usage={"input": 1300, "output": 40}, tool_calls=[]),
        _at(10000, "turn.succeeded", number=1),
    ]
    timeline = build(events, now=T0 + timedelta(hours=1))

    kinds = [s.kind for s in timeline.steps]
    assert kinds == ["model", "tool", "model", "approval", "recovery", "tool", "model"]
    assert [s.ms for s in timeline.steps] == [800, 240, 1000, 4000, 1500, 200, 600]
    assert timeline.total_ms == 10000 and timeline.total == "10.0 s"
    labels = [s.label for s in timeline.steps]
    assert labels[0] == "Model → lookup_order · 900 in / 60 out"
    assert labels[3] == "Approval approved (refund_over_limit)"
    assert labels[4] == "Recovered: w1:host:12/0 stopped"
    assert labels[5] == "issue_refund succeeded (re-issued after a crash)"
    approval = timeline.steps[3]
    assert (approval.x, approval.width) == (206, 400)  # 2.06 s in, 4 s of 10 s, of 1000
    assert all(0 <= s.x and s.x + s.width <= SPAN for s in timeline.steps)


def test_a_pending_approval_is_an_open_wait_until_now():
    now = T0 + timedelta(seconds=30)
    events = [
        _at(0, "turn.accepted"),
        _at(700, "model.replied", ms=700, tool_calls=["issue_refund"]),
        _at(710, "approval.requested", tool_use_id="toolu_9", policy="refund_over_limit"),
    ]
    wait = build(events, now=now).steps[-1]
    assert wait.kind == "approval" and wait.open
    assert wait.duration == "29.3 s so far"


def test_the_session_page_draws_every_turns_timeline_in_one_query(client, alice):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    owner = factories.session()
    factories.finished_call(owner=owner)
    factories.parked_call(owner=owner)  # its approval card's own queries: in both counts
    client.force_login(alice)

    def page():
        with CaptureQueriesContext(connection) as captured:
            response = client.get(f"/sessions/{owner.id}/")
        return response.content.decode(), len(captured)

    body, few = page()
    for _ in range(5):
        factories.finished_call(owner=owner, name="lookup_customer")
    factories.append(owner.id, EventSpec("recovery", {"previous_owner": "w9", "stalled_s": 2}))
    body, more = page()
    assert more == few
    assert body.count('<details class="timeline"') == 7
    assert 'class="wf-step wf-approval wf-open"' in body
    assert '<rect class="wf-bar" x="' in body and "style=" not in body.split("<main>", 1)[1]


def test_hostile_text_in_a_step_label_is_escaped(client, alice):
    call = factories.finished_call()
    reason = "<script>alert(1)</script><img src=x onerror=alert(2)>\u202e" + "W" * 500
    factories.append(
        call.session_id,
        EventSpec("model.failed", {"reason": reason, "attempt": 1}, call.turn_id, "w1"),
    )
    client.force_login(alice)

    body = client.get(f"/sessions/{call.session_id}/").content.decode()

    timeline = body[body.index(f'id="turn-{call.turn_id}-timeline"') :]
    timeline = timeline[: timeline.index("</details>")]
    assert 'class="wf-step wf-failure"' in timeline
    assert "<script>" not in timeline and "<img" not in timeline and "\u202e" not in timeline
    assert "Model call failed: &lt;script&gt;alert(1)&lt;/script&gt;&lt;img" in timeline
