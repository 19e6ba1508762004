"""Approvers are told when an approval waits, and again when it nears its
expiry: by email (Django's SMTP backend) and by Slack (the official
slack_sdk), each with a deep link to the approval card.

A link only opens the card: deciding still takes a logged-in desk session
and the form's CSRF token (dashboard/views/approvals.py). Nothing here
decides anything.

Planned from Postgres by a beat task (one row per approval, kind and
channel, so each is sent once however many ticks see it), then sent outside
any transaction; a failed send is retried on the next ticks, up to
MAX_ATTEMPTS. A worker that dies mid-send leaves its row `sending`: that
notification is lost, the approval is still in the inbox.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.models import Approval
from integrations.models import Notification

log = logging.getLogger(__name__)
N = Notification
MAX_ATTEMPTS = 3


def channels() -> list[str]:
    """The channels configured: email with an SMTP host, Slack with a token and a channel."""
    found = []
    if settings.EMAIL_HOST:
        found.append(N.Channel.EMAIL)
    if settings.SLACK_BOT_TOKEN and settings.SLACK_CHANNEL:
        found.append(N.Channel.SLACK)
    return found


def approval_link(approval: Approval) -> str:
    return f"{settings.AGENTDESK_BASE_URL.rstrip('/')}/approvals/{approval.id}/"


def notifications_plan(*, now=None) -> int:
    """Rows for what approvers have not been told yet."""
    now = now or timezone.now()
    wanted = channels()
    if not wanted:
        return 0
    pending = Approval.objects.filter(status=Approval.Status.PENDING, expires_at__gt=now)
    soon = now + timedelta(seconds=settings.AGENTDESK_APPROVAL_REMIND_BEFORE_S)
    rows = []
    for kind, approvals in (
        (N.Kind.REQUESTED, pending),
        (N.Kind.EXPIRING, pending.filter(expires_at__lte=soon)),
    ):
        told = Notification.objects.filter(kind=kind).values("approval_id")
        for approval_id in approvals.exclude(pk__in=told).values_list("pk", flat=True)[:500]:
            rows += [N(approval_id=approval_id, kind=kind, channel=c) for c in wanted]
    made = Notification.objects.bulk_create(rows, ignore_conflicts=True)
    return len(made)


def notifications_send(*, batch: int = 50) -> int:
    with transaction.atomic():
        # SKIP LOCKED: two workers on the same tick take different rows.
        claimed = list(
            Notification.objects.select_for_update(skip_locked=True)
            .filter(status=N.Status.PENDING)
            .select_related("approval", "approval__session")
            .order_by("id")[:batch]
        )
        Notification.objects.filter(pk__in=[n.pk for n in claimed]).update(status=N.Status.SENDING)
    for note in claimed:
        _send(note)
    return len(claimed)


def _send(note: Notification) -> None:
    error, recipients = "", []
    try:
        if note.approval.status != Approval.Status.PENDING:
            error = "decided before it was sent"
        elif note.channel == N.Channel.EMAIL:
            recipients = _send_email(note)
        else:
            recipients = _send_slack(note)
    except Exception as exc:  # SMTP, Slack or network: retried on a later tick
        error = f"{type(exc).__name__}: {exc}"[:500]
        log.warning("notification %s failed: %s", note, error)
    attempts = note.attempts + 1
    if not error:
        status = N.Status.SENT
    elif error == "decided before it was sent" or attempts >= MAX_ATTEMPTS:
        status = N.Status.FAILED
    else:
        status = N.Status.PENDING
    Notification.objects.filter(pk=note.pk).update(
        status=status,
        attempts=attempts,
        error=error,
        recipients=recipients,
        sent_at=timezone.now() if status == N.Status.SENT else None,
    )


def _wording(note: Notification) -> tuple[str, str]:
    approval = note.approval
    what = f"{approval.tool_name} on {approval.session.key}"
    if note.kind == N.Kind.EXPIRING:
        left = max(0, int((approval.expires_at - timezone.now()).total_seconds() // 60))
        return f"Approval expires in {left} min: {what}", "It will be refused by itself then."
    return f"Approval needed: {what}", approval.policy_detail or approval.policy


def approvers(approval: Approval) -> list[str]:
    """Emails of the active users who may decide it (not who started the turn)."""
    perm = Permission.objects.get(content_type__app_label="approvals", codename="decide_approval")
    users = (
        get_user_model()
        .objects.filter(
            Q(groups__permissions=perm) | Q(user_permissions=perm) | Q(is_superuser=True),
            is_active=True,
        )
        .exclude(email="")
        .distinct()
    )
    if approval.requested_by_id is not None:
        users = users.exclude(pk=approval.requested_by_id)
    return sorted(set(users.values_list("email", flat=True)))


def _send_email(note: Notification) -> list[str]:
    to = approvers(note.approval)
    if not to:
        raise LookupError("no approver has an email address")
    subject, why = _wording(note)
    body = (
        f"{subject}\n\n{why}\n\nOpen the approval card to decide:\n{approval_link(note.approval)}\n\n"
        "The link only opens the card; deciding needs you to be logged in to the desk.\n"
    )
    send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, to, fail_silently=False)
    return to


def _send_slack(note: Notification) -> list[str]:
    from slack_sdk import WebClient

    subject, why = _wording(note)
    client = WebClient(
        token=settings.SLACK_BOT_TOKEN,
        base_url=settings.SLACK_API_URL,
        timeout=int(settings.AGENTDESK_HTTP_TIMEOUT_S),
    )
    link = approval_link(note.approval)
    client.chat_postMessage(
        channel=settings.SLACK_CHANNEL,
        text=f"{subject}. {why} <{link}|Open the approval card>",
    )
    return [settings.SLACK_CHANNEL]
