"""`manage.py audit verify [--session KEY]`: prove sessions' histories complete
and untouched (agents/audit.py). Exits non-zero when any is not."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.audit import Verdict, session_verify
from agents.models import Session


class Command(BaseCommand):
    help = "Check the hash chain of sessions' events (archived ones included)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        verify = sub.add_parser("verify", help="verify event hash chains")
        verify.add_argument("--session", help="a session key (default: every session)")

    def handle(self, *args, action: str, session: str | None = None, **options) -> None:
        if session is not None:
            found = Session.objects.filter(key=session).values_list("id", flat=True).first()
            if found is None:
                raise CommandError(f"no session with key {session!r}")
            ids = [found]
        else:
            ids = list(Session.objects.order_by("id").values_list("id", flat=True))
        keys = dict(Session.objects.filter(id__in=ids).values_list("id", "key"))
        bad = 0
        for session_id in ids:
            verdict = session_verify(session_id=session_id)
            if not verdict.ok:
                bad += 1
            if session is not None or not verdict.ok:
                self.stdout.write(_line(keys[session_id], verdict))
        if session is None:
            self.stdout.write(f"{len(ids) - bad} of {len(ids)} session(s) verified")
        if bad:
            raise CommandError(f"{bad} session(s) failed verification")


def _line(key: str, v: Verdict) -> str:
    if v.ok:
        return (
            f"ok: {key}: events 1..{v.events} complete and untouched "
            f"({v.archived} archived); head {v.head or '-'}"
        )
    return f"FAILED: {key}: seq {v.bad_seq} {v.reason}"
