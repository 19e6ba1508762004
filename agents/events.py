"""The event log: append (inside the transaction that changes state) and publish
(after it commits).

Seqs come from SessionRuntime.last_seq, bumped under that row's lock in the
same transaction, so they run 1..n with no gap and no duplicate. Publishing
goes through the channel layer's Redis pub/sub, which is at-most-once:
viewers that miss a push catch up from Postgres by seq (dashboard/consumers.py).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import Event, SessionRuntime
from agents.observability.outages import Outage
from agents.per_process import PerProcess

log = logging.getLogger(__name__)
# Batches the publisher could not send (Redis away): said once, and once when back.
_unpublished = Outage(log, "live events not published")

DESK_GROUP = "desk"
LINGER_S = 0.003

# What the publisher is handed: event payloads, or a function that builds them.
Items = list[dict[str, Any]] | Callable[[], list[dict[str, Any]]]


def session_group(session_id: int) -> str:
    return f"session.{session_id}"


@dataclass(frozen=True)
class EventSpec:
    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    turn_id: int | None = None
    actor: str = ""
    # The transcript row this event adds, if any (agents.models.Event).
    position: int | None = None
    role: str = ""
    content: Any = None


def append(
    runtime: SessionRuntime, specs: list[EventSpec], *, save_seq: bool = True
) -> list[Event]:
    """Append events for a session whose runtime row the caller has locked.
    `save_seq=False`: the caller saves the runtime row (with its new
    last_seq) itself, later in the same transaction."""
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
                position=spec.position,
                role=spec.role,
                content=spec.content,
            )
        )
    Event.objects.bulk_create(events)
    if save_seq:
        SessionRuntime.objects.filter(pk=runtime.session_id).update(
            last_seq=runtime.last_seq, updated_at=now
        )
    publish_on_commit(runtime.session_id, events)
    return events


def publish_on_commit(session_id: int, events: list[Event]) -> None:
    """Publish events written in the caller's transaction once it commits."""
    payload = [event_payload(e) for e in events]
    transaction.on_commit(lambda: publish(session_id, payload))


def event_payload(event: Event, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return payload(
        seq=event.seq,
        kind=event.kind,
        turn_id=event.turn_id,
        data=event.data,
        actor=event.actor,
        at=event.created_at.isoformat(),
        position=event.position,
        extra=extra,
    )


def payload(
    *,
    seq: int,
    kind: str,
    turn_id: int | None,
    data: Any,
    actor: str,
    at: str,
    position: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An event as it is pushed to viewers: the transcript row's position
    (and, from the engine, its content) only on the event that adds one."""
    body = {"seq": seq, "kind": kind, "turn_id": turn_id, "data": data, "actor": actor, "at": at}
    if position is not None:
        body["position"] = position
    if extra:
        body.update(extra)
    return body


# Kinds after which the sessions list may look different.
_DESK_KINDS = ("turn.", "session.", "approval.", "tool.in_doubt")


def publish(session_id: int, events: list[dict[str, Any]]) -> None:
    """Hand committed events to the background publisher; never blocks a step."""
    if events:
        _publisher().submit("session.events", session_id, events)


def publish_built(session_id: int, build: Callable[[], list[dict[str, Any]]]) -> None:
    """`publish`, with the payload built by `build()` on the publisher's
    thread: for the step loop, which would otherwise build it between two
    commits of a turn."""
    _publisher().submit("session.events", session_id, build)


def publish_delta(session_id: int, delta: dict[str, Any]) -> None:
    """Push streamed model text (not an event: no seq, not stored)."""
    _publisher().submit("session.delta", session_id, [delta])


class _Publisher:
    """One thread per process draining a queue into Redis, so a worker's step
    never waits on Redis (and a Redis outage never fails a step).

    It speaks the channel layer's wire format directly (RedisPubSubChannelLayer:
    one PUBLISH per group, the layer's own `serialize` for the body) on a
    plain synchronous connection, one pipelined round trip per batch.
    channels' public group_send needs an event loop turn and an async client
    per send; measured again for issue 16 (bench/publish_api.py, 5,000
    single-event publishes on a loaded 2-core machine): ~16 µs of CPU per
    publish here, ~240-280 µs with group_send awaited on a long-lived loop,
    ~3,200-3,600 µs through async_to_sync: 15x and 200x, on a path that runs
    twice per agent step and competes with the step loop for the GIL. So the
    private format stays; group_channel() names the one thing it assumes,
    and tests/agents/test_event_publisher.py checks a real consumer gets it.

    Many slots per process: they all submit to one SimpleQueue (thread-safe,
    never blocks), and this one thread is the only user of its Redis
    connection; per session, events leave in the order they were submitted.
    """

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[tuple[str, int, Items]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="event-publisher", daemon=True)
        self.thread.start()

    def submit(self, kind: str, session_id: int, items: Items) -> None:
        self.queue.put((kind, session_id, items))

    def _run(self) -> None:
        layer = get_channel_layer()
        # One connection of our own, no pool and no client object around it:
        # redis.Redis.publish costs ~0.1 ms of CPU per call, the connection's
        # send/read ~0.035 ms. It reconnects on the next send after an error.
        connection = redis.ConnectionPool.from_url(
            settings.REDIS_URL,
            socket_timeout=5,
            socket_connect_timeout=2,
            redis_connect_func=_replies_off,
        ).make_connection()
        while True:
            batch = self._drain()
            if layer is None:
                continue
            prefix = group_channel("")
            commands = [
                ("PUBLISH", prefix + group, layer.serialize(message))
                for group, message in _messages(batch)
            ]
            if not commands:
                continue
            try:  # no replies to read (_replies_off)
                connection.send_packed_command(connection.pack_commands(commands))
            except Exception:  # Redis down: viewers catch up from Postgres later
                connection.disconnect()
                _unpublished.failed()
            else:
                _unpublished.ok()

    def _drain(self) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """Wait for one item, then take whatever else is queued, merged per
        session and kind: under load, one message carries many events
        instead of one message per commit."""
        batch: dict[tuple[str, int], list[dict[str, Any]]] = {}
        kind, session_id, items = self.queue.get()
        batch[(kind, session_id)] = list(_built(items))
        # Linger a moment, as Nagle does: a step's reply and its tool result
        # (or many sessions' commits) leave in one round trip instead of one
        # each. Costs a viewer LINGER_S of latency; saves most of the
        # publisher's CPU, which the step loop would otherwise contend with.
        time.sleep(LINGER_S)
        for _ in range(500):
            try:
                kind, session_id, items = self.queue.get_nowait()
            except queue.Empty:
                break
            batch.setdefault((kind, session_id), []).extend(_built(items))
        return batch


def _built(items: Items) -> list[dict[str, Any]]:
    if not callable(items):
        return items
    try:
        return items()
    except Exception:  # a broken payload loses its push, not the publisher thread
        log.exception("could not build an event payload; viewers catch up from Postgres")
        return []


def _replies_off(connection: redis.Connection) -> None:
    """Connect as usual, then tell Redis not to reply on this connection: a
    PUBLISH answers with a count of listeners we have no use for, and reading
    those answers was most of the publisher's CPU per batch (bench/pubcost.py).
    A Redis that went away still shows, as an error on a later send."""
    connection.on_connect()
    connection.send_command("CLIENT", "REPLY", "OFF")


def _messages(batch: dict[tuple[str, int], list[dict[str, Any]]]):
    """(group, channel-layer message) pairs for a drained batch."""
    desk_changed = []
    for (kind, session_id), items in batch.items():
        if not items:  # its payload could not be built
            continue
        yield session_group(session_id), {"type": kind, "session_id": session_id, "events": items}
        if kind == "session.events" and any(e["kind"].startswith(_DESK_KINDS) for e in items):
            desk_changed.append(session_id)
    for session_id in desk_changed:
        yield DESK_GROUP, {"type": "desk.changed", "session_id": session_id}


def group_channel(group: str) -> str:
    """The Redis pub/sub channel RedisPubSubChannelLayer uses for a group
    (channels_redis/pubsub.py: `{prefix}__group__{group}`)."""
    prefix = settings.CHANNEL_LAYERS["default"].get("CONFIG", {}).get("prefix", "asgi")
    return f"{prefix}__group__{group}"


_PUBLISHER = PerProcess(_Publisher)


def _publisher() -> _Publisher:
    return _PUBLISHER.get()


def flush_published(timeout_s: float = 5.0) -> None:
    """Wait until queued events have been handed to the layer (tests, shutdown)."""
    deadline = time.monotonic() + timeout_s
    publisher = _PUBLISHER.current()
    while publisher is not None and not publisher.queue.empty():
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)
