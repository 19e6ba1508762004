"""Outbound webhooks go only where an admin may send them (issue 27, case 2).

Nothing here sends a packet beyond loopback: the refused targets are
refused before any connection is made (their addresses are literals the
resolver reads without asking anyone), and the receivers listen on
127.0.0.1, which the test settings allow (AGENTDESK_EGRESS_ALLOW) and the
refusal tests disallow.
"""

from __future__ import annotations

import select
import socket
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.errors import Invalid
from integrations import webhooks
from integrations.models import WebhookDelivery, WebhookSubscription

pytestmark = pytest.mark.django_db

INSIDE = [
    "http://127.0.0.1:5433/",
    "http://localhost:6379/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]:8000/",
    "http://0.0.0.0/",
    "http://0/",
    "http://2130706433/",  # decimal
    "http://0x7f000001/",  # hex
    "http://017700000001/",  # octal
    "http://127.1/",
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped
    "http://[::ffff:a00:1]/",
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://[2002:7f00:1::]/",  # 6to4 around 127.0.0.1
    "http://[64:ff9b::a00:1]/",  # NAT64 around 10.0.0.1
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://192.168.1.1:8080/",
    "http://100.64.0.1/",  # shared address space
    "http://[fd00::1]/",  # unique-local
    "http://[fe80::1]/",  # link-local
    "http://224.0.0.1/",  # multicast
    "http://[ff02::1]/",
    "http://255.255.255.255/",
    "https://[::]/",
]


@pytest.fixture
def no_egress(settings):
    settings.AGENTDESK_EGRESS_ALLOW = []


@pytest.mark.parametrize("url", INSIDE)
def test_a_target_inside_the_network_is_refused_in_any_notation(no_egress, carol, url):
    with pytest.raises(Invalid) as refused:
        webhooks.subscription_create(url=url, event_types=["turn.failed"], user=carol)
    assert "resolves to" in refused.value.message
    assert not WebhookSubscription.objects.exists()


@pytest.mark.parametrize(
    "url", ["http://user:pw@example.com/hooks", "https://token@example.com/", "ftp://example.com/"]
)
def test_credentials_in_a_url_and_other_schemes_are_refused(carol, url):
    with pytest.raises(Invalid):
        webhooks.subscription_create(url=url, event_types=["turn.failed"], user=carol)
    assert not WebhookSubscription.objects.exists()


def test_a_public_address_and_a_listed_network_are_allowed(no_egress, settings, carol):
    # A literal: resolving it asks nobody, and subscribing sends nothing.
    webhooks.subscription_create(
        url="https://93.184.215.14/", event_types=["turn.failed"], user=carol
    )
    settings.AGENTDESK_EGRESS_ALLOW = ["10.1.0.0/16"]
    webhooks.subscription_create(url="http://10.1.2.3/", event_types=["turn.failed"], user=carol)
    with pytest.raises(Invalid):
        webhooks.subscription_create(
            url="http://10.2.0.1/", event_types=["turn.failed"], user=carol
        )


def _delivery(sub: WebhookSubscription) -> WebhookDelivery:
    now = timezone.now()
    return WebhookDelivery.objects.create(
        subscription=sub,
        message_id=f"msg_{sub.id}",
        event_type="turn.failed",
        session_id=1,
        seq=1,
        payload={"type": "turn.failed"},
        next_attempt_at=now - timedelta(seconds=1),
        created_at=now,
    )


def test_the_target_is_checked_again_at_delivery_before_any_connection(settings, carol):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        sub = webhooks.subscription_create(
            url=f"http://127.0.0.1:{port}/hooks", event_types=["turn.failed"], user=carol
        )
        delivery = _delivery(sub)
        settings.AGENTDESK_EGRESS_ALLOW = []  # the operator narrowed egress since
        assert webhooks.deliveries_send(budget_s=5) == 1
        # Nobody knocked: a connection would wait in the listener's backlog.
        assert select.select([listener], [], [], 0.2)[0] == []
    finally:
        listener.close()
    delivery.refresh_from_db()
    assert delivery.status == WebhookDelivery.Status.DEAD
    assert delivery.last_error.startswith("refused: 127.0.0.1 resolves to 127.0.0.1, a loopback")
    assert delivery.log.get().status_code is None


def test_the_connection_goes_to_the_address_checked_no_second_lookup(monkeypatch, carol, receiver):
    """DNS rebinding: the name answers the receiver's address first, then
    another loopback address where nothing listens."""
    real = socket.getaddrinfo
    answers = ["127.0.0.1", "127.0.0.3"]
    asked: list[str] = []
    port = receiver.server.server_port

    def resolver(host, *args, **kwargs):
        if host != "hooks.rebind.test":
            return real(host, *args, **kwargs)
        asked.append(host)
        address = answers[min(len(asked), len(answers)) - 1]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    sub = webhooks.subscription_create(
        url=f"http://hooks.rebind.test:{port}/hooks", event_types=["turn.failed"], user=carol
    )
    asked.clear()
    delivery = _delivery(sub)
    webhooks.deliveries_send(budget_s=5)
    delivery.refresh_from_db()
    assert delivery.status == WebhookDelivery.Status.SUCCEEDED, delivery.last_error
    assert asked == ["hooks.rebind.test"]  # resolved once, for the check
    headers, _, _ = receiver.got[0]
    assert headers["Host"] == f"hooks.rebind.test:{port}"


def test_redirects_are_not_followed_and_the_log_keeps_no_reply(carol, receiver):
    from tests.integrations.conftest import Receiver

    inside = Receiver()
    try:
        receiver.then = 302
        receiver.headers = {"Location": inside.url}
        receiver.body = b"internal: redis_version:7.2 secret-config"
        sub = webhooks.subscription_create(
            url=receiver.url, event_types=["turn.failed"], user=carol
        )
        delivery = _delivery(sub)
        webhooks.deliveries_send(budget_s=5)
    finally:
        inside.stop()
    assert len(receiver.got) == 1 and inside.got == []
    delivery.refresh_from_db()
    attempt = delivery.log.get()
    assert attempt.status_code == 302 and attempt.error == "HTTP 302"
    assert attempt.ms >= 0
    assert "secret" not in delivery.last_error


def test_toggling_a_missing_subscription_is_a_404(carol):
    from django.test import Client

    client = Client()
    client.force_login(carol)
    response = client.post("/integrations/webhooks/999/active", {"active": "0"})
    assert response.status_code == 404
