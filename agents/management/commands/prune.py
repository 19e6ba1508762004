"""`manage.py prune [--days N] [--batch-size N] [--dry-run]`: retention by hand.

The same service beat runs hourly (agents.prune_sessions): archive, then
delete, the transcript and events of closed sessions older than N days.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from agents.features.retention import sessions_prune


class Command(BaseCommand):
    help = "Archive and delete the transcript and events of old closed sessions."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days",
            type=int,
            default=settings.AGENTDESK_RETENTION_DAYS,
            help="closed and not updated for this many days (default: AGENTDESK_RETENTION_DAYS)",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=settings.AGENTDESK_RETENTION_BATCH,
            help="rows deleted per transaction",
        )
        parser.add_argument("--dry-run", action="store_true", help="count, change nothing")

    def handle(self, *args, days: int, batch_size: int, dry_run: bool, **options) -> None:
        report = sessions_prune(days=days, batch_size=batch_size, dry_run=dry_run)
        verb = "would prune" if dry_run else "pruned"
        line = (
            f"{verb} {report.sessions} session(s) closed for {days}+ days: "
            f"{report.messages} transcript rows, {report.events} events"
        )
        if not dry_run:
            line += f"; archived {report.archived_bytes} compressed bytes"
            if report.skipped:
                line += f"; skipped {len(report.skipped)} busy or reopened"
        self.stdout.write(line)
