"""WebSocket consumers: a session's live events, the sessions list, the inbox.

Thin, like views: authenticate and check the permission on connect (refused
before accept), then relay. The channel layer is at-most-once, so nothing
here trusts it to deliver everything: a viewer says the last seq it has,
gets every later event from Postgres, then live ones, and any gap in what
the layer brings is filled from Postgres again. Each event reaches the
viewer once, in seq order.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings

from agents.events import DESK_GROUP, session_group
from agents.runtime import live
from approvals.models import Approval
from dashboard import fanout, frames, presence, pushes, revocation

log = logging.getLogger(__name__)
REPLAY_BATCH = 500
SHARED_TTL_S = 5.0

# One rendering per (session, batch, permissions) in this process, shared by
# every viewer of the batch: a hundred people watching one session cost one
# set of queries per step, not a hundred.
_shared: dict[tuple, asyncio.Future] = {}


async def shared_render(key: tuple, fn: Callable[..., Any], *args: Any) -> Any:
    future = _shared.get(key)
    if future is None:
        future = asyncio.ensure_future(database_sync_to_async(fn)(*args))
        _shared[key] = future
        loop = asyncio.get_running_loop()
        future.add_done_callback(lambda _: loop.call_later(SHARED_TTL_S, _shared.pop, key, None))
    return await asyncio.shield(future)


class FollowingConsumer(AsyncJsonWebsocketConsumer):
    """Follows channel-layer groups through the process's fan-out
    (dashboard/fanout.py) and handles their messages and the client's one at
    a time, in arrival order, as a plain Channels consumer would."""

    following: tuple[str, ...] = ()
    permission = pushes.VIEW  # what the socket shows needs; re-checked (see allowed())
    session_id: int | None = None
    revoked = False
    checked_at = 0.0

    async def follow(self, *groups: str) -> None:
        self.one_at_a_time = asyncio.Lock()
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        # The user's own group: a logout or a lost role anywhere closes this
        # socket (dashboard/revocation.py).
        groups = (*groups, revocation.user_group(self.scope["user"].pk))
        for group in groups:
            await fanout.fanout().join(group, self.inbox)
        self.following = groups
        self.checked_at = time.monotonic()  # connect() has just checked
        self.drainer = asyncio.create_task(self.drain())

    async def allowed(self) -> bool:
        """Whether the user may still see what this socket sends: re-read
        from the database at most every AGENTDESK_WS_RECHECK_S, so a lost
        revocation push leaves a socket open that long at most."""
        if self.revoked:
            return False
        now = time.monotonic()
        if now - self.checked_at < settings.AGENTDESK_WS_RECHECK_S:
            return True
        session_key = self.scope["session"].session_key if "session" in self.scope else None
        user = await database_sync_to_async(_still_allowed)(
            session_key, self.permission, self.session_id
        )
        if user is None:
            await self.user_revoked({})
            return False
        self.checked_at, self.user = now, user
        self.scope["user"] = user
        if hasattr(self, "perms"):  # has_perm above filled the user's cache: no query
            self.perms = pushes.perm_signature(user)
        return True

    async def user_revoked(self, message: dict[str, Any]) -> None:
        """Logged out, password changed, role lost, deactivated: close, and
        send nothing more (queued pushes are dropped)."""
        if not self.revoked:
            self.revoked = True
            await self.close(code=revocation.CLOSE_SIGNED_OUT)

    async def disconnect(self, code: int) -> None:
        if self.following:
            self.drainer.cancel()
            for group in self.following:
                await fanout.fanout().leave(group, self.inbox)

    async def drain(self) -> None:
        while True:
            message = await self.inbox.get()
            handler = getattr(self, message["type"].replace(".", "_"), None)
            if handler is None:
                continue
            if message["type"] == revocation.REVOKED:
                await handler(message)
                return
            try:
                async with self.one_at_a_time:
                    if not await self.allowed():
                        return
                    await handler(message)
            except Exception:
                # The client reconnects and replays from its last seq.
                log.exception("consumer failed on %s; closing", message["type"])
                await self.close(code=frames.CLOSE_ERROR)
                return

    actions: dict[str, dict[str, Any]] = frames.DESK_ACTIONS
    bucket: frames.Bucket | None = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kw):
        """Every client frame is paced, sized and checked before it is parsed
        or acted on (dashboard/frames.py); a bad one gets an error frame."""
        if not self.following or self.revoked:
            return
        if self.bucket is None:
            self.bucket = frames.Bucket()
        if not self.bucket.take():
            await self.refuse("too many frames: this socket is closed", code=frames.CLOSE_POLICY)
            return
        if text_data is None:
            await self.send_error("binary frames are not accepted")
            return
        if len(text_data) > frames.MAX_FRAME_CHARS:
            await self.refuse(
                f"frame over {frames.MAX_FRAME_CHARS} characters", code=frames.CLOSE_TOO_BIG
            )
            return
        content, problem = frames.parse(text_data, self.actions)
        if content is None:
            await self.send_error(problem)
            return
        async with self.one_at_a_time:
            if await self.allowed():
                await self.on_client(content)

    async def send_error(self, problem: str) -> None:
        await self.send_json({"type": "error", "error": problem})

    async def refuse(self, problem: str, *, code: int) -> None:
        """Close this socket for abuse: no more frames are read or sent."""
        self.revoked = True
        await self.send_error(problem)
        await self.close(code=code)

    async def on_client(self, content: dict[str, Any]) -> None:
        pass


class SessionConsumer(FollowingConsumer):
    """`ws/sessions/<id>/`: the client sends {"type": "hello", "after": seq}."""

    last_seq: int | None = None  # None until hello: nothing is sent before
    actions = frames.SESSION_ACTIONS

    async def connect(self) -> None:
        self.session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        self.user = self.scope["user"]
        problem = await database_sync_to_async(pushes.access_problem)(
            self.user, pushes.VIEW, self.session_id
        )
        if problem:
            await self.close(code=problem)
            return
        self.perms = await database_sync_to_async(pushes.perm_signature)(self.user)
        # Join before the replay reads Postgres: an event committed after the
        # read is then certain to come through the group (or leave a gap).
        await self.follow(session_group(self.session_id))
        await self.accept()

    async def on_client(self, content: dict[str, Any]) -> None:
        kind = content.get("type")
        if kind == "hello":
            self.last_seq = content.get("after", 0)  # checked by frames.parse
            await self.catch_up()
            await self.send_stream()
        elif kind == "sync" and self.last_seq is not None:
            # The client asks now and then: a lost push of a session's last
            # event leaves no gap to notice, only silence.
            await self.catch_up()
        elif kind == "stream":
            await self.send_stream()

    async def session_events(self, message: dict[str, Any]) -> None:
        if self.last_seq is None:
            return  # the hello's replay reads it from Postgres
        fresh = sorted((e for e in message["events"] if e["seq"] > self.last_seq), key=_seq)
        if not fresh:
            return  # a duplicate
        expected = range(self.last_seq + 1, self.last_seq + 1 + len(fresh))
        if [e["seq"] for e in fresh] != list(expected):
            await self.catch_up()  # the layer lost something: Postgres has it
            return
        await self.deliver([pushes.lean(e) for e in fresh])

    async def session_delta(self, message: dict[str, Any]) -> None:
        for delta in message["events"]:
            await self.send_json({"type": "delta", **delta})

    async def catch_up(self) -> None:
        while True:
            rows = await database_sync_to_async(pushes.events_from_db)(
                self.session_id, self.last_seq, REPLAY_BATCH
            )
            if rows:
                await self.deliver(rows)
            if len(rows) < REPLAY_BATCH:
                return

    async def deliver(self, events: list[dict[str, Any]]) -> None:
        key = (self.session_id, events[0]["seq"], events[-1]["seq"], self.perms)
        frame = await shared_render(key, _events_frame, self.session_id, events, self.user)
        self.last_seq = events[-1]["seq"]
        await self.send(text_data=frame)

    async def send_stream(self) -> None:
        """The text streamed so far for the session's running turn (a snapshot:
        the client replaces what it has; deltas continue from its length)."""
        turn_id, text = await database_sync_to_async(_stream_snapshot)(self.session_id)
        await self.send_json({"type": "stream", "turn_id": turn_id, "text": text})


def _still_allowed(session_key: str | None, permission: str, session_id: int | None) -> Any:
    """The user, fresh from the database, when the socket's login still
    holds and still grants `permission` (and the session); else None."""
    user = revocation.signed_in_user(session_key)
    if user is None or pushes.access_problem(user, permission, session_id):
        return None
    return user


def _seq(event: dict[str, Any]) -> int:
    return event["seq"]


def _events_frame(session_id: int, events: list[dict[str, Any]], user: Any) -> str:
    """The frame for a batch, encoded once for every viewer who shares it."""
    swaps = pushes.session_swaps(session_id, events, user)
    return json.dumps({"type": "events", "events": events, "swaps": swaps})


def _stream_snapshot(session_id: int) -> tuple[int | None, str]:
    from agents.models import SessionRuntime

    turn_id = (
        SessionRuntime.objects.filter(pk=session_id)
        .values_list("current_turn_id", flat=True)
        .first()
    )
    if turn_id is None:
        return None, ""
    return turn_id, live.partial_text(session_id, turn_id)


class DeskConsumer(FollowingConsumer):
    """`ws/desk/`: "a session changed"; the list refetches itself (debounced),
    so filters, sorting and counts stay the server's."""

    async def connect(self) -> None:
        problem = await database_sync_to_async(pushes.access_problem)(
            self.scope["user"], pushes.VIEW
        )
        if problem:
            await self.close(code=problem)
            return
        await self.follow(DESK_GROUP)
        await self.accept()

    async def desk_changed(self, message: dict[str, Any]) -> None:
        if not self.inbox.empty():
            return  # more changes queued: the client refetches once for all
        await self.send_json({"type": "changed", "session_id": message.get("session_id")})


class ApprovalsConsumer(FollowingConsumer):
    """`ws/approvals/`: the client says which cards it shows ({"type":
    "hello", "shown": [ids]}); the server sends cards to add and ids to
    remove whenever any session changes, and on each "sync"."""

    shown: set[int] | None = None
    permission = pushes.DECIDE
    actions = frames.APPROVALS_ACTIONS

    async def connect(self) -> None:
        self.user = self.scope["user"]
        problem = await database_sync_to_async(pushes.access_problem)(self.user, pushes.DECIDE)
        if problem:
            await self.close(code=problem)
            return
        await self.follow(DESK_GROUP)
        await self.accept()

    async def on_client(self, content: dict[str, Any]) -> None:
        if content.get("type") == "hello":
            self.shown = set(content.get("shown") or [])  # checked by frames.parse
            await self.reconcile()
        elif content.get("type") == "sync" and self.shown is not None:
            await self.reconcile()

    async def desk_changed(self, message: dict[str, Any]) -> None:
        # A reconcile looks at every pending approval: one for a burst of changes.
        if self.shown is not None and self.inbox.empty():
            await self.reconcile()

    async def reconcile(self) -> None:
        delta = await database_sync_to_async(pushes.approvals_delta)(self.user, set(self.shown))
        self.shown |= {card["id"] for card in delta["add"]}
        self.shown -= {gone["id"] for gone in delta["remove"]}
        if delta["add"] or delta["remove"]:
            await self.send_json({"type": "approvals", **delta})


class PresenceConsumer(FollowingConsumer):
    """`ws/presence/`: the client says what the tab is on and what else it
    shows ({"type": "here", "topics": ["session:12"], "watch": ["approval:7"]})
    on connect, every heartbeat and when that changes; the server sends
    {"type": "presence", "viewers": {topic: [{user, name, initials, tabs}]},
    "you": user id, "heartbeat_s": s} for the topics of both lists whenever
    someone comes or goes (dashboard/presence.py). The inbox is *on* its
    selected card and *watches* the others."""

    actions = frames.PRESENCE_ACTIONS
    topics: tuple[str, ...] = ()  # announced: this tab is on them
    watched: tuple[str, ...] = ()  # every topic this tab shows viewers for
    ticker: asyncio.Task | None = None

    async def connect(self) -> None:
        self.user = self.scope["user"]
        problem = await database_sync_to_async(pushes.access_problem)(self.user, pushes.VIEW)
        if problem:
            await self.close(code=problem)
            return
        self.viewer = presence.Viewer(
            secrets.token_hex(8), self.user.pk, presence.display_name(self.user)
        )
        self.shown: dict[str, list[dict[str, Any]]] = {}
        self.allowed_topics: set[str] = set()
        await self.follow()  # the user's own group only, until the first "here"
        self.ticker = asyncio.create_task(self.tick())
        await self.accept()

    async def on_client(self, content: dict[str, Any]) -> None:
        # Both lists are checked by frames.parse (shape, length, topic syntax).
        on = list(dict.fromkeys(content.get("topics") or []))
        watch = list(dict.fromkeys([*on, *(content.get("watch") or [])]))
        refused = [t for t in watch if not await self.may_view(t)]
        if refused:
            await self.send_error(f"not allowed: {', '.join(refused)}")
            on = [t for t in on if t not in refused]
            watch = [t for t in watch if t not in refused]
        await self.rewatch(watch)
        gone = [t for t in self.topics if t not in on]
        fresh = [t for t in on if t not in self.topics]
        self.topics = tuple(on)
        await presence.here(self.viewer, on, gone=gone)
        await self.announce(fresh + gone)
        await self.refresh()

    async def rewatch(self, watch: list[str]) -> None:
        """Follow the groups of `watch` (and no others) through the fan-out."""
        for topic in watch:
            if topic not in self.watched:
                await fanout.fanout().join(presence.group(topic), self.inbox)
        for topic in self.watched:
            if topic not in watch:
                await fanout.fanout().leave(presence.group(topic), self.inbox)
                self.shown.pop(topic, None)
        others = [g for g in self.following if not g.startswith(presence.GROUP_PREFIX)]
        self.following = (*others, *(presence.group(t) for t in watch))
        self.watched = tuple(watch)

    async def may_view(self, topic: str) -> bool:
        """A session's presence is for those who may see the session; an
        approval's for those who may see its session (inline cards too)."""
        if topic in self.allowed_topics:
            return True
        ok = await database_sync_to_async(_may_view)(self.user, topic)
        if ok:
            self.allowed_topics.add(topic)
        return ok

    async def announce(self, topics: list[str]) -> None:
        layer = get_channel_layer()
        for topic in topics:
            await layer.group_send(presence.group(topic), {"type": "presence.changed"})

    async def presence_changed(self, message: dict[str, Any]) -> None:
        if self.inbox.empty():  # more queued: one re-read for all of them
            await self.refresh()

    async def refresh(self) -> None:
        """Send the viewers of the watched topics that differ from what the
        tab was last sent."""
        now = await presence.viewers(list(self.watched))
        changed = {t: v for t, v in now.items() if self.shown.get(t) != v}
        if changed:
            self.shown.update(changed)
            frame = {"type": "presence", "viewers": changed, "you": self.user.pk}
            await self.send_json({**frame, "heartbeat_s": presence.heartbeat_s()})

    async def tick(self) -> None:
        """Viewers whose heartbeat stopped (their process died, the network
        went) expire in Redis without anyone announcing it: look again."""
        while True:
            await asyncio.sleep(presence.heartbeat_s())
            try:
                async with self.one_at_a_time:
                    if self.watched and not self.revoked:
                        await self.refresh()
            except Exception:  # Redis away: the next tick tries again
                log.warning("presence: refresh failed", exc_info=True)

    async def disconnect(self, code: int) -> None:
        if self.ticker is not None:
            self.ticker.cancel()
        await super().disconnect(code)
        if self.topics:
            topics, self.topics = list(self.topics), ()
            await presence.leave(self.viewer.id, topics)
            await self.announce(topics)


def _may_view(user: Any, topic: str) -> bool:
    kind, pk = presence.parse_topic(topic)
    if kind == "approval":
        session_id = Approval.objects.filter(pk=pk).values_list("session_id", flat=True).first()
        if session_id is None:
            return False
        pk = session_id
    return pushes.access_problem(user, pushes.VIEW, pk) == 0
