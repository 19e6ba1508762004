"""The event log: append (inside the transaction that changes state) and publish
(after it commits).

Seqs come from SessionRuntime.last_seq, bumped under that row's lock in the
same transaction, so they run 1..n with no gap and no duplicate. Publishing
goes through the channel layer, which is at-most-once: viewers that miss a
push catch up from Postgres by seq (dashboard/consumers.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from channels.layers import get_channel_layer
from django.db import transaction
from django.utils import timezone

from agents.models import Event, SessionRuntime

log = logging.getLogger(__name__)

DESK_GROUP = "desk"


def session_group(session_id: int) -> str:
    return f"session.{session_id}"


@dataclass(frozen=True)
class EventSpec:
    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    turn_id: int | None = None
    actor: str = ""


def append(runtime: SessionRuntime, specs: list[EventSpec]) -> list[Event]:
    """Append events for a session whose runtime row the caller has locked."""
    now = timezone.now()
    events = []
    for spec in specs:
        runtime.last_seq += 1
        events.append(
            Event(
                session_id=runtime.session_id,
                seq=runtime.last_seq,
                turn_id=spec.turn_id,
                kind=spec.kind,
                data=spec.data,
                actor=spec.actor,
                created_at=now,
            )
        )
    Event.objects.bulk_create(events)
    SessionRuntime.objects.filter(pk=runtime.session_id).update(
        last_seq=runtime.last_seq, updated_at=now
    )
    payload = [event_payload(e) for e in events]
    transaction.on_commit(lambda: publish(runtime.session_id, payload))
    return events


def event_payload(event: Event, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {
        "seq": event.seq,
        "kind": event.kind,
        "turn_id": event.turn_id,
        "data": event.data,
        "actor": event.actor,
        "at": event.created_at.isoformat(),
    }
    if extra:
        body.update(extra)
    return body


# Kinds after which the sessions list may look different.
_DESK_KINDS = ("turn.", "session.", "approval.", "tool.in_doubt")


def publish(session_id: int, events: list[dict[str, Any]]) -> None:
    """Hand committed events to the background publisher; never blocks a step."""
    if events:
        _publisher().submit("session.events", session_id, events)


def publish_delta(session_id: int, delta: dict[str, Any]) -> None:
    """Push streamed model text (not an event: no seq, not stored)."""
    _publisher().submit("session.delta", session_id, [delta])


class _Publisher:
    """One thread per process with its own event loop, draining a queue into
    the channel layer, so a worker's step never waits on Redis."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[tuple[str, int, list[dict[str, Any]]]] = queue.SimpleQueue()
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name="event-publisher", daemon=True)
        self.thread.start()

    def submit(self, kind: str, session_id: int, items: list[dict[str, Any]]) -> None:
        self.queue.put((kind, session_id, items))

    def _run(self) -> None:
        # The blocking get() happens in this daemon thread itself (not in an
        # executor thread, which interpreter exit would wait for forever).
        loop = asyncio.new_event_loop()
        layer = get_channel_layer()
        while True:
            batch = self._drain()
            try:
                loop.run_until_complete(_send_batch(layer, batch))
            except Exception:  # Redis down: viewers catch up from Postgres later
                log.warning("could not publish %d event batch(es)", len(batch), exc_info=True)

    def _drain(self) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """Wait for one item, then take whatever else is queued, merged per
        session and kind: under load, one channel-layer send carries many
        events instead of one send per commit."""
        batch: dict[tuple[str, int], list[dict[str, Any]]] = {}
        kind, session_id, items = self.queue.get()
        batch[(kind, session_id)] = list(items)
        for _ in range(500):
            try:
                kind, session_id, items = self.queue.get_nowait()
            except queue.Empty:
                break
            batch.setdefault((kind, session_id), []).extend(items)
        return batch


async def _send_batch(layer: Any, batch: dict[tuple[str, int], list[dict[str, Any]]]) -> None:
    for (kind, session_id), items in batch.items():
        await _send(layer, kind, session_id, items)


_instance: _Publisher | None = None
_instance_lock = threading.Lock()


def _publisher() -> _Publisher:
    global _instance
    with _instance_lock:
        # A forked child (Celery prefork) inherits no running thread.
        if _instance is None or _instance.pid != os.getpid():
            _instance = _Publisher()
        return _instance


def flush_published(timeout_s: float = 5.0) -> None:
    """Wait until queued events have been handed to the layer (tests, shutdown)."""
    deadline = time.monotonic() + timeout_s
    while _instance is not None and not _instance.queue.empty():
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)


async def _send(layer: Any, kind: str, session_id: int, items: list[dict[str, Any]]) -> None:
    if layer is None:
        return
    message = {"type": kind, "session_id": session_id, "events": items}
    await layer.group_send(session_group(session_id), message)
    if kind == "session.events" and any(e["kind"].startswith(_DESK_KINDS) for e in items):
        await layer.group_send(DESK_GROUP, {"type": "desk.changed", "session_id": session_id})
