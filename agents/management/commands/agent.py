"""`manage.py agent send ticket:42 "..."` and `manage.py agent show ticket:42`.

The shell's way into the same services the webhook and the desk use.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.errors import ServiceError
from agents.models import Session, Turn
from agents.selectors import events_after
from agents.services import message_post, turn_cancel


class Command(BaseCommand):
    help = "Send a message to an agent session, show its state and event log, or cancel it."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        send = sub.add_parser("send", help="post a message (starts or queues a turn)")
        send.add_argument("key", help="domain key, e.g. ticket:42")
        send.add_argument("text")
        show = sub.add_parser("show", help="print a session's state and event log")
        show.add_argument("key")
        show.add_argument("--after", type=int, default=0, help="only events after this seq")
        show.add_argument("--json", action="store_true", help="one JSON object per event")
        cancel = sub.add_parser("cancel", help="cancel the session's open turns")
        cancel.add_argument("key")

    def handle(self, *args, action: str, key: str, **options) -> None:
        try:
            if action == "send":
                turn = message_post(key=key, text=options["text"], trigger=Turn.Trigger.STAFF)
                self.stdout.write(f"{key}: turn {turn.number} {turn.status}")
            elif action == "cancel":
                session = turn_cancel(session_id=self._session(key).id, user=None)
                self.stdout.write(f"{key}: cancel requested ({session.status})")
            else:
                self._show(self._session(key), options["after"], options["json"])
        except ServiceError as exc:
            raise CommandError(exc.message) from exc

    def _session(self, key: str) -> Session:
        session = Session.objects.filter(key=key).select_related("runtime").first()
        if session is None:
            raise CommandError(f"no session {key}")
        return session

    def _show(self, session: Session, after: int, as_json: bool) -> None:
        runtime = session.runtime
        self.stdout.write(
            f"{session.key}  status={session.status}  profile={session.profile}  "
            f"events={runtime.last_seq}  tokens={runtime.input_tokens}/{runtime.output_tokens}"
        )
        for turn in session.turns.order_by("number"):
            self.stdout.write(
                f"  turn {turn.number}: {turn.status} steps={turn.steps} {turn.error}"
            )
        for event in events_after(session_id=session.id, seq=after, limit=100_000):
            if as_json:
                row = {"seq": event.seq, "kind": event.kind, "data": event.data}
                row.update(actor=event.actor, at=event.created_at.isoformat())
                self.stdout.write(json.dumps(row))
            else:
                stamp = event.created_at.strftime("%H:%M:%S.%f")[:-3]
                detail = json.dumps(event.data)[:160]
                self.stdout.write(f"  {event.seq:>5} {stamp} {event.kind:<22} {detail}")
