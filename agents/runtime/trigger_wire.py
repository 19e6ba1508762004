"""An `advance` trigger as Celery's Redis broker stores it, sent in one round trip.

`celery.send_task` builds the same message through Celery's task protocol
and kombu's producer and virtual channel: about 0.3 ms of CPU per trigger
(measured: 322 µs, and 487 µs with the mark's own round trip), a sixth of
what an accepted webhook costs the web process. A trigger is always the
same task with one argument, so its message is a fixed shape with a few
fields filled in: Celery's task message, protocol 2 (headers, a base64 JSON
body of (args, kwargs, embed)) inside kombu's Redis transport envelope
(properties with a delivery tag and its lane's priority), LPUSHed to the
list of its priority lane, `<queue>\\x06\\x16<step>` (kombu.transport.redis:
Channel._q_for_pri). The trigger's mark (dispatch.py) goes in the same round
trip when the mark store is the broker's Redis.

tests/agents/runtime/test_trigger_wire.py holds this against the message
send_task writes (a Celery or kombu upgrade that changes the shape fails
there), and every test with a worker consumes these messages.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from bisect import bisect
from datetime import UTC, datetime, timedelta
from functools import cache

from celery import current_app
from django.conf import settings

_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def message(task: str, session_id: int, *, countdown: float | None, priority: int) -> str:
    """The JSON kombu's Redis transport stores for `task(session_id)`."""
    task_id = str(uuid.uuid4())
    body = json.dumps([[session_id], {}, _EMBED]).encode()
    eta = None
    if countdown:
        eta = (datetime.now(UTC) + timedelta(seconds=countdown)).isoformat()
    headers = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "shadow": None,
        "eta": eta,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        # As send_task writes it in a process whose Celery app is not
        # finalized (a web process); a worker's adds the configured limits,
        # which a worker applies when the message names none.
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": f"({session_id!r},)",
        "kwargsrepr": "{}",
        "origin": _origin(),
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    properties = {
        "correlation_id": task_id,
        "reply_to": current_app.oid,
        "delivery_mode": 2,
        "delivery_info": {"exchange": "", "routing_key": queue()},
        "priority": priority,
        "body_encoding": "base64",
        "delivery_tag": str(uuid.uuid4()),
    }
    return json.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": properties,
        }
    )


def lane(priority: int) -> str:
    """The Redis list a message of `priority` goes to (kombu's _q_for_pri)."""
    steps = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("priority_steps", [0])
    step = steps[max(0, bisect(steps, priority) - 1)]
    return f"{queue()}\x06\x16{step}" if step else queue()


@cache
def queue() -> str:
    return current_app.conf.task_default_queue


@cache
def _origin() -> str:
    return f"gen{os.getpid()}@{socket.gethostname()}"


def redis_broker() -> bool:
    """Whether the broker is Redis (else triggers go through send_task)."""
    return str(settings.CELERY_BROKER_URL).startswith(("redis://", "rediss://", "unix://"))


def _forget_after_fork() -> None:
    _origin.cache_clear()  # a prefork child is a process of its own


os.register_at_fork(after_in_child=_forget_after_fork)
