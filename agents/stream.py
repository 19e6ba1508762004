"""The live-event pipeline, in one home for every live viewer (the desk's
sockets, dashboard/consumers.py; the SSE stream, api/routes/events.py):
replay from the event log after the seq a viewer last saw, then live pushes
(agents/events.py publishes them on commit) through the process's fan-out.

One channel-layer membership per group and process, shared by every
consumer in the process that follows the group.

With the plain Channels pattern each viewer joins the group itself, so an
event watched by 100 viewers is stored, popped from Redis and decoded 100
times by the same Daphne process. Here the process joins once, pops once,
and hands the message to each viewer's in-memory inbox (one asyncio.Queue
per consumer, so each viewer still sees the group's messages in order).
Delivery stays at-most-once, as before: the consumers fill any gap from
Postgres.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

from channels.layers import get_channel_layer

from agents import selectors
from agents.events import payload
from agents.models import Event

log = logging.getLogger(__name__)

# channels_redis forgets a group membership after group_expiry (a day by
# default); a process that follows a group for longer renews it.
RENEW_S = 3600.0


@dataclass
class _Membership:
    channel: str
    inboxes: set[asyncio.Queue] = field(default_factory=set)
    tasks: list[asyncio.Task] = field(default_factory=list)


class Fanout:
    def __init__(self) -> None:
        self.layer = get_channel_layer()
        self.groups: dict[str, _Membership] = {}
        self.lock = asyncio.Lock()  # join/leave: the first joins, the last leaves

    async def join(self, group: str, inbox: asyncio.Queue) -> None:
        async with self.lock:
            membership = self.groups.get(group)
            if membership is None:
                membership = _Membership(await self.layer.new_channel())
                await self.layer.group_add(group, membership.channel)
                membership.tasks = [
                    asyncio.create_task(self._pump(membership)),
                    asyncio.create_task(self._renew(group, membership)),
                ]
                self.groups[group] = membership
            membership.inboxes.add(inbox)

    async def leave(self, group: str, inbox: asyncio.Queue) -> None:
        async with self.lock:
            membership = self.groups.get(group)
            if membership is None:
                return
            membership.inboxes.discard(inbox)
            if membership.inboxes:
                return
            del self.groups[group]
            for task in membership.tasks:
                task.cancel()
            await self.layer.group_discard(group, membership.channel)

    async def _pump(self, membership: _Membership) -> None:
        while True:
            try:
                message = await self.layer.receive(membership.channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis away: viewers catch up from Postgres on their next sync
                log.warning("fanout: receive failed; retrying", exc_info=True)
                await asyncio.sleep(1.0)
                continue
            for inbox in list(membership.inboxes):
                inbox.put_nowait(message)

    async def _renew(self, group: str, membership: _Membership) -> None:
        while True:
            await asyncio.sleep(RENEW_S)
            await self.layer.group_add(group, membership.channel)


# One per event loop (Daphne has one; tests start a loop per test).
_fanouts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Fanout] = weakref.WeakKeyDictionary()


def fanout() -> Fanout:
    loop = asyncio.get_running_loop()
    found = _fanouts.get(loop)
    if found is None:
        found = _fanouts[loop] = Fanout()
    return found


# --- Replay from the log ---------------------------------------------------------------


def event_dict(event: Event) -> dict[str, Any]:
    """An event read back from the log, as a live push shows it (no transcript row)."""
    return payload(
        seq=event.seq,
        kind=event.kind,
        turn_id=event.turn_id,
        data=event.data,
        actor=event.actor,
        at=event.created_at.isoformat(),
    )


def lean(event: dict[str, Any]) -> dict[str, Any]:
    """An event as viewers get it: without the transcript content a live
    push carries along (the desk's fragments show that, escaped)."""
    return {k: event.get(k) for k in ("seq", "kind", "turn_id", "data", "actor", "at")}


def events_from_db(session_id: int, after: int, limit: int) -> list[dict[str, Any]]:
    rows = selectors.events_after(session_id=session_id, seq=after, limit=limit)
    return [event_dict(e) for e in rows]
