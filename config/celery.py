"""The Celery application. Tasks are thin: see agents/tasks.py."""

import os

from celery import Celery, concurrency
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_ready,
    worker_shutdown,
)

import config.broker as broker  # the module, not the package (whose __init__ imports this one)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

broker.patch_kombu()  # a Redis outage must not stop a worker (config/broker.py)
# `threads` (settings' default, and `--pool=threads`) is our pool of slots
# whose threads start with the worker (config/slots.py).
concurrency.ALIASES["threads"] = "config.slots:SlotPool"
app = Celery("agentdesk")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.steps["consumer"].add(broker.BrokerWatch)  # logs and counts losses of the broker
app.autodiscover_tasks()


@after_setup_logger.connect
@after_setup_task_logger.connect
def _redact_celery_handlers(logger=None, **_: object) -> None:
    """Celery installs its own handlers (the plain format): they redact too."""
    from agents.observability import redact

    redact.install(logger)


@worker_ready.connect
def _start_sweeper_thread(sender: object = None, **_: object) -> None:
    """Every worker sweeps on its own clock (agents/runtime/watchdog.py);
    one whose slots share its process runs there what it cannot send while
    the broker is away (agents/runtime/dispatch.py)."""
    from agents.runtime import dispatch, engine, watchdog
    from config.slots import SlotPool

    watchdog.start()
    broker.quiet_cancel_warning()
    pool = getattr(sender, "pool", None)
    if isinstance(pool, SlotPool):
        dispatch.hand_to_slots(lambda session_id: pool.run(engine.advance, session_id))


@worker_shutdown.connect
def _release_liveness(**_: object) -> None:
    """A clean stop lets go of the liveness lock at once (a dead process's
    lock goes with its connection anyway)."""
    from agents.runtime import ownership

    ownership.release_liveness()
