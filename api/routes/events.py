"""A session's events for machines: a Server-Sent Events stream that
resumes from Last-Event-ID (= seq), and a plain JSON page for pollers.

The stream does what the desk's WebSocket does (dashboard/consumers.py):
join the session's channel-layer group first, then replay from Postgres
after the client's seq, then follow live pushes; a gap in what the layer
brings (it is at-most-once) is filled from Postgres, and so is a silence
(each heartbeat also catches up, as the desk's "sync" does). Each event
reaches the client once, in seq order.

A stream lasts at most AGENTDESK_SSE_MAX_S, then ends; the client
reconnects with Last-Event-ID (EventSource does by itself) and loses
nothing. Bounded streams let a deploy drain a Daphne, spread clients over
Daphnes again, and let a proxy's idle limits never cut a stream silently.

A waiting stream holds no database connection: every read it makes
(the permission check, each catch-up) borrows one from the process's pool
and gives it back before the next wait, also when the client is gone
mid-read (the read finishes in its thread and returns the connection
there). And a user or a token holds at most so many streams at once
(api/streamcap.py): the next one is a 429.
"""

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Header, Query, Router

from agents import selectors
from agents.events import session_group
from api import pagination, streamcap
from api.auth import reader
from api.pagination import MAX_KEY
from api.problems import problem
from api.routes.common import READ_ERRORS
from api.schemas import EventPage
from dashboard import fanout, pushes

router = Router(tags=["events"])
log = logging.getLogger(__name__)
REPLAY_BATCH = 500

STREAM_DOC = {
    "responses": {
        "200": {
            "description": "text/event-stream: one `id: <seq>` / `data: <event JSON>` frame "
            "per event, comments as heartbeats. Reconnect with Last-Event-ID.",
            # Before OpenAPI 3.2's itemSchema, `schema` describes one event.
            "content": {
                "text/event-stream": {
                    "schema": {
                        "type": "object",
                        "required": ["id", "data"],
                        "properties": {
                            "id": {"type": "string", "pattern": "^[0-9]+$"},
                            "event": {"type": "string", "enum": ["message"]},
                            "data": {
                                "type": "string",
                                "contentMediaType": "application/json",
                                "contentSchema": {"$ref": "#/components/schemas/EventOut"},
                            },
                        },
                    }
                }
            },
        }
    }
}


def _visible(request: HttpRequest, session_id: int) -> int:
    if selectors.session_get(user=reader(request), session_id=session_id) is None:
        raise Http404("no such session")
    return session_id


@router.get("/sessions/{session_id}/events/page", response={200: EventPage, **READ_ERRORS})
def events_page(
    request: HttpRequest,
    session_id: int = pagination.Id,
    after: int = Query(0, ge=0, le=MAX_KEY, description="the last seq you have"),
    limit: int = Query(200, ge=1, le=1000),
):
    """Events after a seq, in seq order, for clients that poll."""
    _visible(request, session_id)
    events = [pushes.lean(e) for e in pushes.events_from_db(session_id, after, limit)]
    last = events[-1]["seq"] if events else after
    return {"events": events, "last_seq": last, "more": len(events) == limit}


@router.get("/sessions/{session_id}/events", response={**READ_ERRORS}, openapi_extra=STREAM_DOC)
async def events_stream(
    request: HttpRequest,
    session_id: int = pagination.Id,
    after: int = Query(0, ge=0, le=MAX_KEY, description="start after this seq"),
    last_event_id: int = Header(
        None, alias="Last-Event-ID", ge=0, le=MAX_KEY, description="wins over `after`"
    ),
):
    """Server-Sent Events: every event after Last-Event-ID (or `after`),
    then the live ones as they commit. A token holds at most
    AGENTDESK_SSE_MAX_PER_TOKEN streams at once and a user
    AGENTDESK_SSE_MAX_PER_USER: beyond, 429 with Retry-After."""
    # The token was checked on this request's thread: its connection goes back too.
    await _db(_visible, request, session_id)
    lease = await sync_to_async(streamcap.acquire)(request.auth)
    if isinstance(lease, streamcap.Refused):
        return _too_many(lease)
    start = last_event_id if last_event_id is not None else after
    response = StreamingHttpResponse(_stream(session_id, start), content_type="text/event-stream")
    # Called when the response is closed, also when the client went away
    # (Django's ASGI handler closes it on both paths).
    response._resource_closers.append(lease.release)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy must not hold frames back
    return response


def _too_many(refused: streamcap.Refused) -> HttpResponse:
    return problem(
        429,
        f"this {refused.scope} already holds {refused.limit} event streams, the most it may "
        "hold at once; close one, or retry after the given seconds",
        slug="too-many-streams",
        headers={"Retry-After": str(refused.retry_after)},
    )


def _released(fn, *args: Any) -> Any:
    try:
        return fn(*args)
    finally:
        # Back to the pool now, not when the stream ends: a waiting stream
        # must hold no connection (with the pool's 4 to 8 a process has,
        # a few streams would otherwise hold them all).
        connection.close()


async def _db(fn, *args: Any) -> Any:
    """fn(*args) on a thread with a pooled connection, returned when done:
    also when this task is cancelled meanwhile (the thread finishes fn and
    its finally clause)."""
    return await sync_to_async(_released)(fn, *args)


async def _stream(session_id: int, last_seq: int) -> AsyncIterator[str]:
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    group = session_group(session_id)
    # Join before the replay reads Postgres: an event committed after the
    # read then comes through the group (or leaves a gap we fill).
    await fanout.fanout().join(group, inbox)
    cursor = _Cursor(session_id, last_seq)
    deadline = time.monotonic() + settings.AGENTDESK_SSE_MAX_S
    try:
        yield "retry: 2000\n\n"
        async for frame in cursor.catch_up():
            yield frame
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = await asyncio.wait_for(
                    inbox.get(), timeout=min(settings.AGENTDESK_SSE_HEARTBEAT_S, left)
                )
            except TimeoutError:
                yield ": heartbeat\n\n"
                async for frame in cursor.catch_up():  # a lost last push leaves only silence
                    yield frame
                continue
            if message.get("type") != "session.events":
                continue
            async for frame in cursor.live(message["events"]):
                yield frame
    finally:
        await fanout.fanout().leave(group, inbox)


class _Cursor:
    """The last seq sent, and how the next events are found."""

    def __init__(self, session_id: int, last_seq: int) -> None:
        self.session_id = session_id
        self.last_seq = last_seq

    async def catch_up(self) -> AsyncIterator[str]:
        while True:
            rows = await _db(pushes.events_from_db, self.session_id, self.last_seq, REPLAY_BATCH)
            for event in rows:
                yield self.frame(event)
            if len(rows) < REPLAY_BATCH:
                return

    async def live(self, events: list[dict[str, Any]]) -> AsyncIterator[str]:
        fresh = sorted((e for e in events if e["seq"] > self.last_seq), key=lambda e: e["seq"])
        if not fresh:
            return  # a duplicate
        if [e["seq"] for e in fresh] != list(
            range(self.last_seq + 1, self.last_seq + 1 + len(fresh))
        ):
            async for frame in self.catch_up():  # the layer lost something: Postgres has it
                yield frame
            return
        for event in fresh:
            yield self.frame(pushes.lean(event))

    def frame(self, event: dict[str, Any]) -> str:
        self.last_seq = event["seq"]
        return f"id: {event['seq']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"
