from celery import shared_task

from approvals.services import approvals_expire


@shared_task(name="approvals.expire_approvals", ignore_result=True)
def expire_approvals() -> None:
    approvals_expire()
