from celery import shared_task

from api import idempotency


@shared_task(name="api.prune_idempotency_keys", acks_late=True)
def prune_idempotency_keys() -> int:
    """Forget Idempotency-Keys past their retention (enqueued by beat)."""
    return idempotency.idempotency_keys_prune()
