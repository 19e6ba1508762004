from celery import shared_task

from integrations import webhooks


@shared_task(name="integrations.send_webhooks", acks_late=True)
def send_webhooks() -> int:
    """Send the webhook deliveries that are due (enqueued by beat)."""
    return webhooks.deliveries_send()
