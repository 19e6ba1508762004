"""Approvers hear of a waiting approval by email (a local aiosmtpd server)
and Slack (the sandbox's stand-in), with a link to the card that opens it
and decides nothing; the mail and Slack calls come from real worker and
beat processes."""

from __future__ import annotations

import email
import re
import socket
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from email import policy

import pytest
import requests
from aiosmtpd.controller import Controller
from django.utils import timezone

from approvals.models import Approval
from integrations.models import Notification
from tests.dashboard import factories
from tests.processes import STARTUP_S, Proc, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Inbox:
    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        message = email.message_from_bytes(envelope.original_content, policy=policy.default)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        self.messages.append(message)
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    inbox, port = Inbox(), _free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, port
    controller.stop()


@pytest.fixture
def desk_port() -> int:
    return _free_port()


@pytest.fixture
def stack_env(stack_env, smtp, desk_port, sandbox):
    return {
        **stack_env,
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp[1]),
        "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_CHANNEL": "#approvals",
        "SLACK_API_URL": f"{sandbox.url}/slack/api/",
        "AGENTDESK_BASE_URL": f"http://127.0.0.1:{desk_port}",
        "AGENTDESK_NOTIFY_INTERVAL_S": "0.3",
        "AGENTDESK_APPROVAL_REMIND_BEFORE_S": "3600",
    }


@pytest.fixture
def desk(stack_env, desk_port, run_dir) -> Iterator[str]:
    """Daphne on the port the links name."""
    env = {**stack_env, "DJANGO_SETTINGS_MODULE": "config.settings_test"}
    args = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(desk_port)]
    proc = Proc("daphne", [*args, "config.asgi:application"], env, run_dir / f"d-{time.time()}.log")
    try:
        proc.wait_for_log(r"Listening on TCP address", timeout=STARTUP_S)
        yield f"http://127.0.0.1:{desk_port}"
    finally:
        proc.stop()


def test_approvers_get_an_email_and_a_slack_message_whose_link_decides_nothing(
    sandbox, workers, smtp, desk, alice, bob, carol
):
    inbox, _ = smtp
    for user, address in ((alice, "alice@example.com"), (bob, "bob@example.com"), (carol, "")):
        user.email = address
        user.save()
    workers.start()
    workers.beat()
    approval = factories.pending_approval()
    link = f"{desk}/approvals/{approval.id}/"

    wait_for(lambda: inbox.messages, timeout=60, what="the email at the SMTP server")
    mail = inbox.messages[0]
    assert mail["X-Envelope-To"] == "bob@example.com"  # approvers only; support is not told
    assert mail["Subject"] == f"Approval needed: issue_refund on {approval.session.key}"
    assert link in mail.get_content()

    posted = wait_for(lambda: sandbox.get("/_slack")["messages"], timeout=30, what="Slack")
    assert posted[0]["channel"] == "#approvals"
    slack_link = re.search(r"<(http[^|>]+)\|Open the approval card>", posted[0]["text"]).group(1)
    assert slack_link == link

    # Logged out, the link leads to the login page and decides nothing.
    followed = requests.get(slack_link, timeout=10)
    assert followed.status_code == 200 and "/login/" in followed.url
    assert f"next=/approvals/{approval.id}/" in followed.url.replace("%2F", "/")
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING
    # Logged in, it opens the card (still undecided: deciding is a POST with the CSRF token).
    browser = requests.Session()
    page = browser.get(f"{desk}/login/", timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    browser.post(
        f"{desk}/login/",
        {"username": "bob", "password": "bob-pw", "csrfmiddlewaretoken": token},
        headers={"Referer": f"{desk}/login/"},
        timeout=10,
    )
    card = browser.get(slack_link, timeout=10)
    assert card.status_code == 200 and f'id="approval-{approval.id}"' in card.text
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING
    # Each is sent once, however many ticks pass.
    time.sleep(1.0)
    assert len(inbox.messages) == 1 and len(sandbox.get("/_slack")["messages"]) == 1


def test_an_approval_near_its_expiry_is_reminded_once(sandbox, workers, smtp, desk, bob):
    inbox, _ = smtp
    bob.email = "bob@example.com"
    bob.save()
    approval = factories.pending_approval()
    Approval.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() + timedelta(minutes=20)
    )
    workers.start()
    workers.beat()
    wait_for(
        lambda: Notification.objects.filter(status="sent").count() == 4,
        timeout=60,
        what="requested and expiring, by email and Slack",
    )
    subjects = sorted(m["Subject"] for m in inbox.messages)
    assert subjects[0].startswith("Approval expires in 19 min") or subjects[0].startswith(
        "Approval expires in 20 min"
    )
    assert subjects[1].startswith("Approval needed")
