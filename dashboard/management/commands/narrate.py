"""`manage.py narrate --url http://127.0.0.1:8000`: what happens on the desk,
one readable line each, for the terminal of `make run`.

Reads the event log (the one source of truth; nothing is sent to it) once a
second: a ticket that arrives, a turn that ends, an approval that waits (with
its page), a decision, a recovery, a call in doubt, a budget stop. Steps in
between (model replies, tool calls) are left to the desk's pages.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from django.core.management.base import BaseCommand
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from agents.budgets import usd
from agents.models import Event, Session, Turn
from approvals.models import Approval
from dashboard.presenters import event_summary

log = logging.getLogger(__name__)

TOLD = (
    "turn.accepted",
    "turn.succeeded",
    "turn.failed",
    "turn.canceled",
    "approval.requested",
    "approval.decided",
    "approval.expired",
    "recovery",
    "tool.in_doubt",
    "budget.exceeded",
    "followup.fired",
)
# An event is committed a little after its created_at: each poll looks back
# this far and skips what it has told already.
LOOK_BACK = timedelta(seconds=30)


@dataclass(frozen=True)
class Who:
    key: str
    title: str
    customer: str


class Command(BaseCommand):
    help = "Print what happens on the desk, one readable line per event that matters."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the desk's address")
        parser.add_argument("--interval", type=float, default=1.0)

    def handle(self, *args, url: str, interval: float, **options) -> None:
        self.url = url.rstrip("/")
        self.sessions: dict[int, Who] = {}
        told: dict[tuple[int, int], object] = {}
        since = timezone.now()
        while True:
            close_old_connections()  # a long-lived process, as a request would
            try:
                since = self.poll(since, told)
            except DatabaseError as exc:  # PostgreSQL restarting: say so, try again
                log.warning("narrate: cannot read the event log (%s); retrying", exc)
            time.sleep(interval)

    def poll(self, since, told: dict) -> object:
        now = timezone.now()
        rows = (
            Event.objects.filter(created_at__gte=max(since, now - LOOK_BACK), kind__in=TOLD)
            .order_by("created_at", "session_id", "seq")
            .only("session_id", "seq", "turn_id", "kind", "data", "actor", "created_at")
        )
        for event in rows:
            key = (event.session_id, event.seq)
            if key in told:
                continue
            told[key] = event.created_at
            line = self.line(event)
            if line:
                self.stdout.write(line)
                self.stdout.flush()
        for key, at in list(told.items()):
            if at < now - LOOK_BACK:
                del told[key]
        return since

    def who(self, session_id: int) -> Who:
        found = self.sessions.get(session_id)
        if found is None:
            row = Session.objects.filter(pk=session_id).values("key", "title", "customer").first()
            found = Who(**row) if row else Who(f"session {session_id}", "", "")
            self.sessions[session_id] = found
        return found

    def line(self, event: Event) -> str:
        who = self.who(event.session_id)
        d = event.data or {}
        page = f"{self.url}/sessions/{event.session_id}/"
        if event.kind == "turn.accepted":
            if d.get("number") == 1 and d.get("trigger") == Turn.Trigger.CUSTOMER:
                return f'{who.key} arrived: "{who.title}" from {who.customer}  {page}'
            return f"{who.key}: turn {d.get('number')} accepted ({d.get('trigger', '')})"
        if event.kind in ("turn.succeeded", "turn.failed", "turn.canceled"):
            return f"{who.key}: {event_summary(event.kind, d)}{self.turn_figures(event.turn_id)}"
        if event.kind == "approval.requested":
            approval = (
                Approval.objects.filter(
                    session_id=event.session_id, tool_call__tool_use_id=d.get("tool_use_id")
                )
                .only("id", "tool_name", "arguments")
                .first()
            )
            if approval is None:
                return f"{who.key}: an approval waits  {self.url}/approvals/"
            arguments = json.dumps(approval.arguments, ensure_ascii=False)
            return (
                f"{who.key}: waits for approval: {approval.tool_name} {arguments}"
                f"  {self.url}/approvals/{approval.id}/"
            )
        if event.kind == "approval.decided":
            return f"{who.key}: {event_summary(event.kind, d)} (by {event.actor or '?'})"
        if event.kind in ("tool.in_doubt", "budget.exceeded"):
            return f"{who.key}: needs a person: {event_summary(event.kind, d)}  {page}"
        return f"{who.key}: {event_summary(event.kind, d)}"

    def turn_figures(self, turn_id: int | None) -> str:
        turn = Turn.objects.filter(pk=turn_id).first() if turn_id else None
        if turn is None:
            return ""
        parts = []
        if turn.started_at and turn.finished_at:
            parts.append(f"{(turn.finished_at - turn.started_at).total_seconds():.1f} s")
        parts.append(f"{turn.steps} model call{'s' if turn.steps != 1 else ''}")
        if turn.cost_micros:
            parts.append(usd(turn.cost_micros))
        return f" ({', '.join(parts)})"
