from celery import shared_task

from integrations import webhooks


@shared_task(name="integrations.send_webhooks", acks_late=True)
def send_webhooks() -> int:
    """Send the webhook deliveries that are due (enqueued by beat)."""
    return webhooks.deliveries_send()


@shared_task(name="integrations.notify_approvals", acks_late=True)
def notify_approvals() -> int:
    """Tell approvers about new and soon-expiring approvals (enqueued by beat)."""
    from integrations import notifications

    notifications.notifications_plan()
    return notifications.notifications_send()
