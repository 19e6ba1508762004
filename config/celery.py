"""The Celery application. Tasks are thin: see agents/tasks.py."""

import os

from celery import Celery
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_ready,
    worker_shutdown,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("agentdesk")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@after_setup_logger.connect
@after_setup_task_logger.connect
def _redact_celery_handlers(logger=None, **_: object) -> None:
    """Celery installs its own handlers (the plain format): they redact too."""
    from agents.observability import redact

    redact.install(logger)


@worker_ready.connect
def _start_sweeper_thread(**_: object) -> None:
    """Every worker sweeps on its own clock (agents/runtime/watchdog.py)."""
    from agents.runtime import watchdog

    watchdog.start()


@worker_shutdown.connect
def _release_liveness(**_: object) -> None:
    """A clean stop lets go of the liveness lock at once (a dead process's
    lock goes with its connection anyway)."""
    from agents.runtime import ownership

    ownership.release_liveness()
