"""Each turn as a waterfall of its steps, from the event log.

A model call ends at its `model.replied` event and lasted `data.ms`; a tool
call likewise with `tool.finished`. An approval waits from
`approval.requested` to its decision (or expiry, or now while it is still
pending); a call in doubt from `tool.in_doubt` to `tool.resolved`; a
recovery is the time the previous owner stalled (`stalled_s`) before
another worker took over. Failed model calls are marks.

Bars are geometry, not style: the template draws each one as an <svg> rect
whose x and width are attributes (0..1000 of the turn's span), so the
page's CSP (no inline style) holds. One query for every turn shown.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from agents.models import Event
from dashboard.presenters import browser_thumb

SPAN = 1000  # the svg's viewBox width
MIN_WIDTH = 4  # a 1 ms step is still seen (0.4% of the row)
TIMELINE_KINDS = (
    "turn.accepted",
    "turn.started",
    "model.replied",
    "model.failed",
    "tool.finished",
    "browser.step",
    "browser.refused",
    "tool.in_doubt",
    "tool.resolved",
    "approval.requested",
    "approval.decided",
    "approval.expired",
    "approval.canceled",
    "recovery",
    "turn.succeeded",
    "turn.failed",
    "turn.canceled",
)
ENDS = ("turn.succeeded", "turn.failed", "turn.canceled")


@dataclass
class Step:
    kind: str  # "model", "tool", "approval", "doubt", "recovery", "failure"
    label: str
    start: datetime
    end: datetime
    open: bool = False  # still going (an approval not decided yet)
    thumb: str = ""  # a browser step's screenshot (a checked data URL)
    x: int = 0
    width: int = 0

    @property
    def ms(self) -> int:
        return max(0, round((self.end - self.start).total_seconds() * 1000))

    @property
    def duration(self) -> str:
        return human_ms(self.ms) + (" so far" if self.open else "")


@dataclass
class Timeline:
    steps: list[Step] = field(default_factory=list)
    total_ms: int = 0

    @property
    def total(self) -> str:
        return human_ms(self.total_ms)


def human_ms(ms: int) -> str:
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def attach(session_id: int, views: Iterable[Any]) -> None:
    """Set `view.timeline` on each TurnView (agents.selectors): one query."""
    views = list(views)
    if not views:
        return
    by_turn: dict[int, list[Event]] = defaultdict(list)
    rows = (
        Event.objects.filter(
            session_id=session_id,
            turn_id__in=[v.turn.id for v in views],
            kind__in=TIMELINE_KINDS,
        )
        .only("seq", "turn_id", "kind", "data", "created_at")
        .order_by("seq")
    )
    for event in rows:
        by_turn[event.turn_id].append(event)
    now = timezone.now()
    for view in views:
        view.timeline = build(by_turn.get(view.turn.id, []), now=now)


def build(events: list[Event], *, now: datetime) -> Timeline:
    """The steps of one turn from its events, scaled; in the order they were
    recorded (seq), which is the order they happened in: a start computed
    from `ms` is only as exact as the clocks of the workers."""
    if not events:
        return Timeline()
    steps = _Steps(now)
    for event in events:
        handler = getattr(steps, "on_" + event.kind.replace(".", "_"), None)
        if handler is not None:
            handler(event.data or {}, event.created_at)
    ended = next((e.created_at for e in reversed(events) if e.kind in ENDS), None)
    return _scaled(steps.steps, events[0].created_at, ended or now)


class _Steps:
    """Steps as the events of a turn come, one method per event kind."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.steps: list[Step] = []
        self.waiting: dict[str, Step] = {}  # tool_use_id -> an open approval wait
        self.doubt: dict[str, Step] = {}  # tool_use_id -> an open doubt

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def on_model_replied(self, d: dict[str, Any], at: datetime) -> None:
        calls = d.get("tool_calls") or []
        names = [c.get("name", "?") if isinstance(c, dict) else str(c) for c in calls]
        usage = d.get("usage") or {}
        asks = f" → {', '.join(names)}" if names else f" ({d.get('stop_reason', '')})"
        label = f"Model{asks} · {usage.get('input', 0)} in / {usage.get('output', 0)} out"
        self.add(Step("model", label, _before(at, d.get("ms")), at))

    def on_model_failed(self, d: dict[str, Any], at: datetime) -> None:
        label = f"Model call failed: {str(d.get('reason', ''))[:120]}"
        self.add(Step("failure", label, _before(at, d.get("ms")), at))

    def on_tool_finished(self, d: dict[str, Any], at: datetime) -> None:
        again = " (re-issued after a crash)" if d.get("reissued") else ""
        label = f"{d.get('name', 'tool')} {d.get('status', '')}{again}"
        self.add(Step("tool", label, _before(at, d.get("ms")), at))

    def on_browser_step(self, d: dict[str, Any], at: datetime) -> None:
        refused = len(d.get("refused") or [])
        note = f" · {refused} refused" if refused else ""
        label = f"Browser {d.get('action', '')} {str(d.get('url', ''))[:120]}{note}"
        self.add(Step("browser", label, at, at, thumb=browser_thumb(d.get("thumb"))))

    def on_browser_refused(self, d: dict[str, Any], at: datetime) -> None:
        label = f"Browser: {len(d.get('refused') or [])} refused between actions"
        self.add(Step("browser", label, at, at))

    def on_approval_requested(self, d: dict[str, Any], at: datetime) -> None:
        asked = "an outside agent's request, " if d.get("external") else ""
        label = f"Waiting for approval ({asked}{d.get('policy', '')})"
        self.waiting[str(d.get("tool_use_id", ""))] = self.add(
            Step("approval", label, at, self.now, True)
        )

    def on_approval_decided(self, d: dict[str, Any], at: datetime, outcome: str = "") -> None:
        for step in _closing(self.waiting, d):
            policy = step.label.split("(", 1)[-1]
            step.label = f"Approval {d.get('decision') or outcome} ({policy}"
            step.end, step.open = at, False

    def on_approval_expired(self, d: dict[str, Any], at: datetime) -> None:
        self.on_approval_decided(d, at, "expired")

    def on_approval_canceled(self, d: dict[str, Any], at: datetime) -> None:
        self.on_approval_decided(d, at, "canceled")

    def on_tool_in_doubt(self, d: dict[str, Any], at: datetime) -> None:
        label = f"{d.get('name', 'tool')} in doubt"
        self.doubt[str(d.get("tool_use_id", ""))] = self.add(
            Step("doubt", label, at, self.now, True)
        )

    def on_tool_resolved(self, d: dict[str, Any], at: datetime) -> None:
        for step in _closing(self.doubt, d):
            step.label += f", resolved as {d.get('resolution', '')}"
            step.end, step.open = at, False

    def on_recovery(self, d: dict[str, Any], at: datetime) -> None:
        stalled = d.get("stalled_s")
        seconds = float(stalled) if isinstance(stalled, int | float) else 0.0
        label = f"Recovered: {d.get('previous_owner', 'a worker')} stopped"
        self.add(Step("recovery", label, at - timedelta(seconds=max(0.0, seconds)), at))


def _before(at: datetime, ms: Any) -> datetime:
    return at - timedelta(milliseconds=ms if isinstance(ms, int | float) and ms > 0 else 0)


def _closing(open_steps: dict[str, Step], data: dict[str, Any]) -> list[Step]:
    """The open steps an event closes: its call's, or every one (events
    that close all of a turn's approvals at once name no call)."""
    key = str(data.get("tool_use_id", ""))
    if key and key in open_steps:
        return [open_steps.pop(key)]
    closing = list(open_steps.values())
    open_steps.clear()
    return closing


def _scaled(steps: list[Step], origin: datetime, end: datetime) -> Timeline:
    if not steps:
        return Timeline()
    start = min([origin, *(s.start for s in steps)])
    finish = max([end, *(s.end for s in steps)])
    span = max((finish - start).total_seconds(), 0.001)
    for step in steps:
        offset = (step.start - start).total_seconds() / span
        length = (step.end - step.start).total_seconds() / span
        step.x = min(SPAN - MIN_WIDTH, round(offset * SPAN))
        step.width = max(MIN_WIDTH, min(SPAN - step.x, round(length * SPAN)))
    return Timeline(steps, round(span * 1000))
