"""Driving the workload: tickets in through the signed webhook, follow-ups
and cancels while turns run, and the scripted approver.

Runs in the campaign process, through the same services the desk and the
inbound endpoint call (api.inbound.helpdesk_webhook -> message_post,
turn_cancel, approval_decide). Every call is under the same faults as the
workers: Redis may be down when a service enqueues `advance` after its
commit, which then raises although the change is durable; the sweeper is
what picks such work up, and the driver only counts it.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import requests
from django.conf import settings
from django.db import DatabaseError, connections
from django.utils import timezone

from agents.errors import Conflict, Forbidden
from agents.models import Session, Turn
from agents.services import turn_cancel
from api.inbound import helpdesk_webhook, sign
from approvals.models import Approval
from approvals.services import approval_decide
from bench.chaos.workload import Ticket

log = logging.getLogger("chaos.driver")
OPEN_TURN = (Turn.Status.ACCEPTED, Turn.Status.RUNNING, Turn.Status.RESUMING)
DECISION_TRIES = 60  # a click a second while the database is away
DENY_REASON = "Above what we refund for this order; offer store credit instead."


class Driver:
    def __init__(self, tickets: list[Ticket], sandbox_url: str, users: dict, max_open: int) -> None:
        self.pending = list(reversed(tickets))
        self.sandbox_url = sandbox_url
        self.alice, self.bob = users["alice"], users["bob"]
        self.max_open = max_open
        self.by_key: dict[str, Ticket] = {}
        self.session_ids: dict[str, int] = {}
        self.actions: list[tuple[float, int, Callable[[], None]]] = []
        self.order = itertools.count()
        self.counts: Counter[str] = Counter()
        self.decisions: dict[int, str] = {}  # approval id -> what we did
        self.scheduled: dict[int, float] = {}  # approval id -> when we click (monotonic)
        self.problems: list[str] = []  # the driver saw the system do something wrong

    # --- the loop --------------------------------------------------------------

    def step(self, deliver: bool = True) -> None:
        """One pass: due actions, maybe one new ticket, the approver."""
        now = time.monotonic()
        while self.actions and self.actions[0][0] <= now:
            _, _, action = heapq.heappop(self.actions)
            action()
        if deliver and self.pending and self.open_sessions() < self.max_open:
            self._deliver(self.pending.pop())
        self.approve_pass()

    def add(self, tickets: list[Ticket]) -> None:
        """More tickets, delivered after those still pending."""
        self.pending[:0] = reversed(tickets)

    @property
    def delivered_all(self) -> bool:
        return not self.pending

    @property
    def idle(self) -> bool:
        return not self.pending and not self.actions

    def open_sessions(self) -> int:
        return Session.objects.filter(status=Session.Status.RUNNING).count()

    def _later(self, delay_s: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.actions, (time.monotonic() + delay_s, next(self.order), action))

    # --- tickets -----------------------------------------------------------------

    def _deliver(self, ticket: Ticket) -> None:
        payload = {"customer_email": ticket.email, "subject": ticket.subject, "body": ticket.body}
        payload["order_id"] = ticket.order_id
        created = _sandbox_post(self.sandbox_url, "/helpdesk/tickets", payload)
        key = f"ticket:{created['id']}"
        self.by_key[key] = ticket
        body = self._webhook(created, "ticket.created", ticket.body)
        self._accept(key, body, "ticket")
        if ticket.replay_webhook:
            self._replay(body)
        if ticket.follow_up:
            self._later(0.3 + ticket.follow_up_after_s, lambda: self._follow_up(created, ticket))
        if ticket.cancel_after_s is not None:
            self._later(0.3 + ticket.cancel_after_s, lambda: self._cancel(key))

    def _webhook(self, ticket: dict[str, Any], kind: str, message: str) -> bytes:
        event = {"id": f"evt_{secrets.token_hex(8)}", "type": kind, "created": int(time.time())}
        event.update(ticket=ticket, message={"body": message})
        return json.dumps(event).encode()

    def _accept(self, key: str, body: bytes, what: str) -> None:
        """Deliver a webhook; a failure after the commit (no broker) is counted,
        and the turn must exist all the same."""
        try:
            self._webhook_through_outage(body)
            self.counts[f"{what}s_delivered"] += 1
        except Exception as exc:  # noqa: BLE001 (the broker, mostly; counted and checked)
            self.counts[f"{what}s_enqueue_failed_after_commit"] += 1
            log.info("%s for %s: %r (checking it was recorded)", what, key, exc)
            if not Session.objects.filter(key=key).exists():
                self.problems.append(f"{key}: {what} webhook failed and no session exists: {exc!r}")
        session_id = Session.objects.filter(key=key).values_list("id", flat=True).first()
        if session_id:
            self.session_ids[key] = session_id

    def _webhook_through_outage(self, body: bytes) -> None:
        """Deliver a webhook; while our database is away (crashed, its
        connections terminated) the helpdesk would get an error and deliver
        again, so this does too, for up to a minute (the delivery is
        idempotent by event id: issue 18)."""
        deadline = time.monotonic() + 60
        while True:
            signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()))
            try:
                helpdesk_webhook(body=body, signature=signature)
                return
            except DatabaseError:
                if time.monotonic() > deadline:
                    raise
                self.counts["webhooks_redelivered_database_away"] += 1
                connections.close_all()
                time.sleep(0.5)

    def _replay(self, body: bytes) -> None:
        signature = sign(settings.AGENTDESK_WEBHOOK_SECRET, body, int(time.time()))
        try:
            turn = helpdesk_webhook(body=body, signature=signature)
        except Forbidden:
            self.counts["webhook_replays_refused"] += 1
            return
        except Exception as exc:  # noqa: BLE001
            self.counts["webhook_replays_refused"] += 1
            log.info("replay failed with %r", exc)
            return
        if turn is not None:  # the service says it started a turn for the same event
            self.problems.append("a replayed webhook delivery was accepted (a second turn)")
            return
        # A replay is answered like the first delivery and starts nothing (issue 18).
        self.counts["webhook_replays_answered"] += 1

    def _follow_up(self, created: dict[str, Any], ticket: Ticket) -> None:
        key = f"ticket:{created['id']}"
        running = Turn.objects.filter(session__key=key, status__in=OPEN_TURN).exists()
        self.counts["follow_ups_while_running" if running else "follow_ups_after_turn"] += 1
        _sandbox_post(
            self.sandbox_url,
            f"/helpdesk/tickets/{created['id']}/customer_reply",
            {"body": ticket.follow_up},
        )
        self._accept(key, self._webhook(created, "ticket.replied", ticket.follow_up), "follow_up")

    def _cancel(self, key: str) -> None:
        session_id = self.session_ids.get(key)
        if session_id is None:
            return
        try:
            turn_cancel(session_id=session_id, user=self.alice)
            self.counts["cancels"] += 1
        except Conflict:
            self.counts["cancels_nothing_open"] += 1
        except Exception as exc:  # noqa: BLE001 (committed; only the enqueue failed)
            self.counts["cancels"] += 1
            log.info("cancel of %s: %r", key, exc)

    # --- the approver ----------------------------------------------------------------

    def approve_pass(self, final: bool = False) -> None:
        pending = Approval.objects.filter(status=Approval.Status.PENDING).select_related("session")
        now = time.monotonic()
        for approval in pending:
            due = self.scheduled.get(approval.id)
            if due is not None and (not final or due > now - 1.0):
                continue  # our click is still to come (or just happened)
            ticket = self.by_key.get(approval.session.key)
            decision = ticket.decision if ticket and ticket.decision else "approve"
            if final and decision in ("expire", "race"):
                continue  # the periodic expiry will take them
            if final:
                self.scheduled[approval.id] = now
                self._decide(approval.id, decision, ticket)
            elif decision == "race":
                # Click right around the deadline: the click or the expiry
                # wins, never both (invariant 6).
                when = approval.expires_at - timezone.now() + timedelta(seconds=_jitter(approval))
                delay = max(0.0, when.total_seconds())
                self.scheduled[approval.id] = now + delay
                self._later(delay, self._clicker(approval.id, "race"))
            elif decision == "expire":
                self.scheduled[approval.id] = float("inf")
            else:
                think = ticket.think_s if ticket else 0.5
                self.scheduled[approval.id] = now + think
                self._later(think, self._clicker(approval.id, decision, ticket))

    def _clicker(self, approval_id: int, decision: str, ticket: Ticket | None = None):
        return lambda: self._decide(approval_id, decision, ticket)

    def _decide(
        self, approval_id: int, decision: str, ticket: Ticket | None, tries: int = 1
    ) -> None:
        kwargs: dict[str, Any] = {"decision": "approve"}  # also a "race" click
        if decision == "deny":
            kwargs = {"decision": "deny", "reason": DENY_REASON}
        elif decision == "edit" and ticket is not None:
            arguments = Approval.objects.get(pk=approval_id).arguments
            kwargs["edited_input"] = {**arguments, "amount_cents": ticket.edited_cents}
        try:
            approval_decide(approval_id=approval_id, user=self.bob, **kwargs)
            self.decisions[approval_id] = decision
            self.counts[f"approvals_{decision}"] += 1
        except Conflict as exc:
            self.decisions.setdefault(approval_id, f"refused: {exc}")
            self.counts[f"approvals_{decision}_refused"] += 1
        except DatabaseError as exc:
            # The database went away under the click (the desk answers 503):
            # the approver clicks again a second later, as a person would,
            # for as long as the longest outage lasts.
            connections.close_all()
            if tries >= DECISION_TRIES:
                self.problems.append(f"approval {approval_id}: decision failed {tries}x: {exc!r}")
                return
            self.counts["approvals_clicked_again_database_away"] += 1
            self._later(1.0, lambda: self._decide(approval_id, decision, ticket, tries + 1))
        except Exception as exc:  # noqa: BLE001 (committed; only the enqueue failed)
            if Approval.objects.filter(pk=approval_id, status=Approval.Status.PENDING).exists():
                self.problems.append(f"approval {approval_id}: decision failed: {exc!r}")
            else:
                self.decisions[approval_id] = decision
                self.counts[f"approvals_{decision}"] += 1
                self.counts["decisions_enqueue_failed_after_commit"] += 1


def _jitter(approval: Approval) -> float:
    # Deterministic per approval (seeded plans, ids from the database).
    return ((approval.id * 7919) % 600) / 1000 - 0.3


def _sandbox_post(base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    # The nemesis only faults payments and the model, never the helpdesk
    # routes the driver uses, so one try with a timeout is enough.
    response = requests.post(f"{base}{path}", json=body, timeout=15)
    response.raise_for_status()
    return response.json()
