"""Outbound webhooks: the outbox trigger, Standard Webhooks signatures,
retries with backoff, the dead-letter state and the desk's re-send, with
real Celery worker and beat processes doing the sending."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import Client
from standardwebhooks.webhooks import Webhook

from agents.events import EventSpec
from integrations import webhooks
from integrations.models import WebhookDelivery, WebhookSubscription
from tests.agents.helpers import deliver_ticket
from tests.dashboard import factories
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stack_env(stack_env):
    # Quick retries and a quick beat, so that the test waits seconds, not minutes.
    return {
        **stack_env,
        "AGENTDESK_WEBHOOK_INTERVAL_S": "0.3",
        "AGENTDESK_WEBHOOK_BACKOFF_S": "0.2",
        "AGENTDESK_WEBHOOK_MAX_ATTEMPTS": "4",
    }


def _subscribe(url: str, *kinds: str, user=None):
    return webhooks.subscription_create(
        url=url, event_types=list(kinds or ["approval.requested"]), user=user
    )


def test_an_event_gets_its_deliveries_in_its_own_transaction(carol):
    sub = _subscribe("http://127.0.0.1:9/hooks", "approval.requested", "turn.succeeded", user=carol)
    approval = factories.pending_approval()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.subscription, delivery.event_type) == (sub, "approval.requested")
    assert delivery.payload["type"] == "approval.requested"
    data = delivery.payload["data"]
    assert (data["session_id"], data["session_key"]) == (approval.session_id, approval.session.key)
    assert data["event"]["policy"] == "refund_over_limit"
    assert delivery.message_id == f"msg_{approval.session_id}_{data['seq']}"
    # An event rolled back has no delivery.
    with pytest.raises(RuntimeError), transaction.atomic():
        factories.append(approval.session_id, EventSpec("turn.succeeded", {"number": 1}))
        assert WebhookDelivery.objects.count() == 2
        raise RuntimeError("rolled back")
    assert WebhookDelivery.objects.count() == 1
    # A kind nobody subscribed to has none.
    factories.append(approval.session_id, EventSpec("turn.failed", {"number": 1}))
    assert WebhookDelivery.objects.count() == 1


def test_a_session_pause_is_a_session_paused_delivery(carol):
    _subscribe("http://127.0.0.1:9/hooks", "session.paused", user=carol)
    session = factories.session()
    factories.append(session.id, EventSpec("budget.exceeded", {"action": "failed"}))
    factories.append(session.id, EventSpec("budget.exceeded", {"action": "paused"}))
    assert list(WebhookDelivery.objects.values_list("event_type", "seq")) == [("session.paused", 2)]


def test_the_engine_hot_path_fills_the_outbox_too(sandbox, workers, carol, receiver):
    """The engine writes approval.requested with its own SQL: the trigger sees it."""
    sub = _subscribe(receiver.url, "approval.requested", user=carol)
    workers.start()
    workers.beat()
    ticket = sandbox.ticket(
        email="alice.martin@example.com",
        subject="Broken grinder",
        body="The grinder from order ORD-1002 arrived broken. Please refund it, $189.",
        order_id="ORD-1002",
    )
    session = deliver_ticket(ticket)
    wait_for(lambda: receiver.got, timeout=90, what="the approval.requested webhook")
    headers, body, _ = receiver.got[0]
    payload = Webhook(sub.secret).verify(body, headers)
    assert payload["type"] == "approval.requested"
    assert payload["data"]["session_key"] == session.key


def test_a_receiver_that_fails_three_times_gets_the_event_with_the_same_message_id(
    workers, carol, receiver
):
    sub = _subscribe(receiver.url, "approval.requested", user=carol)
    receiver.answers = [500, 503, 429]
    workers.start()
    workers.beat()
    approval = factories.pending_approval()
    delivery = wait_for(
        lambda: WebhookDelivery.objects.filter(status="succeeded").first(),
        timeout=60,
        what="the delivery to succeed",
    )
    assert [status for _, _, status in receiver.got] == [500, 503, 429, 200]
    ids = {headers["webhook-id"] for headers, _, _ in receiver.got}
    assert ids == {delivery.message_id}
    for headers, body, _ in receiver.got:  # each attempt signed afresh, each verifies
        payload = Webhook(sub.secret).verify(body, headers)
        assert payload["data"]["session_id"] == approval.session_id
    with pytest.raises(Exception, match="signature"):
        Webhook("whsec_" + "A" * 43).verify(receiver.got[-1][1], receiver.got[-1][0])
    assert delivery.attempts == 4 and delivery.log.count() == 4
    assert [a.status_code for a in delivery.log.all()] == [500, 503, 429, 200]


def test_a_dead_receiver_ends_dead_lettered_and_a_resend_delivers_it(workers, carol, receiver):
    _subscribe(receiver.url, "approval.requested", user=carol)
    receiver.then = 503  # down, for good
    workers.start()
    workers.beat()
    factories.pending_approval()
    delivery = wait_for(
        lambda: WebhookDelivery.objects.filter(status="dead").first(),
        timeout=60,
        what="the delivery to be dead-lettered",
    )
    assert delivery.attempts == 4 and len(receiver.got) == 4
    # The receiver is back; an admin re-sends from the desk's delivery log.
    receiver.then = 204
    desk = Client()
    desk.force_login(carol)
    page = desk.get(f"/integrations/webhooks/{delivery.subscription_id}/").content.decode()
    assert f'id="delivery-{delivery.id}" data-status="dead"' in page and "Re-send" in page
    resent = desk.post(f"/integrations/deliveries/{delivery.id}/resend")
    assert resent.status_code == 303
    wait_for(
        lambda: WebhookDelivery.objects.filter(pk=delivery.pk, status="succeeded").exists(),
        timeout=30,
        what="the re-sent delivery",
    )
    assert receiver.got[-1][2] == 204
    assert receiver.got[-1][0]["webhook-id"] == delivery.message_id


def test_only_admins_manage_webhooks(alice, bob, carol):
    for user, status in ((alice, 403), (bob, 403), (carol, 200)):
        client = Client()
        client.force_login(user)
        assert client.get("/integrations/webhooks/").status_code == status
    desk = Client()
    desk.force_login(carol)
    made = desk.post(
        "/integrations/webhooks/",
        {"url": "https://93.184.215.14/in", "event_types": ["turn.failed", "tool.in_doubt"]},
    )
    assert made.status_code == 303
    sub = WebhookSubscription.objects.get()
    assert sub.event_types == ["tool.in_doubt", "turn.failed"] and sub.secret.startswith("whsec_")
    assert made["Location"] == f"/integrations/webhooks/{sub.id}/"
    bad = desk.post("/integrations/webhooks/", {"url": "ftp://x", "event_types": ["turn.failed"]})
    assert bad.status_code == 400
