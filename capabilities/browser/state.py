"""The browser state in Postgres: read and open it, seal and write it.

Written after every action (one short transaction: the sealed state, the
budget counters and the step's event), so a worker that dies loses at most
the action in flight, and any worker restores the session from here. The
write is a compare-and-set on `version`: a stale worker (its claim lost
while a browser action ran) cannot overwrite what the new owner wrote.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents import events
from agents.events import EventSpec
from agents.runtime import store
from capabilities.browser import crypto
from capabilities.browser.models import BrowserState

MAX_HISTORY = 50


class Moved(Exception):
    """Another worker wrote this session's browser state meanwhile."""


@dataclass
class Loaded:
    session_id: int
    version: int = 0
    data: dict[str, Any] = field(default_factory=dict)  # storage, url, history, forms
    turn_id: int | None = None
    actions: int = 0
    pages: int = 0
    turn_started_at: Any = None
    pending_key: str = ""
    pending_form: str = ""


def _aad(session_id: int) -> str:
    return f"browser-state:{session_id}"


def seal(session_id: int, data: dict[str, Any]) -> tuple[bytes, str]:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return crypto.seal(raw, aad=_aad(session_id))


def load(session_id: int) -> Loaded:
    row = BrowserState.objects.filter(session_id=session_id).first()
    if row is None:
        return Loaded(session_id)
    plain = crypto.open_sealed(bytes(row.state), key_id=row.key_id, aad=_aad(session_id))
    return Loaded(
        session_id=session_id,
        version=row.version,
        data=json.loads(plain),
        turn_id=row.turn_id,
        actions=row.actions,
        pages=row.pages,
        turn_started_at=row.turn_started_at,
        pending_key=row.pending_key,
        pending_form=row.pending_form,
    )


def for_turn(loaded: Loaded, turn_id: int) -> Loaded:
    """Budgets count per turn: a new turn starts them again."""
    if loaded.turn_id != turn_id:
        loaded.turn_id, loaded.actions, loaded.pages = turn_id, 0, 0
        loaded.turn_started_at = timezone.now()
    return loaded


def save(
    loaded: Loaded,
    *,
    step: dict[str, Any] | None,
    turn_id: int | None,
    between: list[dict[str, Any]] | None = None,
) -> float:
    """Seal and write; with the step's event when given, after a
    `browser.refused` event for what was refused since the last action
    (`between`). Returns the seconds spent (what bench/browser.py reports as
    the overhead per action)."""
    started = time.perf_counter()
    blob, key_id = seal(loaded.session_id, loaded.data)
    values = dict(
        state=blob,
        key_id=key_id,
        turn_id=loaded.turn_id,
        actions=loaded.actions,
        pages=loaded.pages,
        turn_started_at=loaded.turn_started_at,
        pending_key=loaded.pending_key,
        pending_form=loaded.pending_form,
    )
    with transaction.atomic():
        if step is not None:
            # The session's lock first (lock order): events need their seq.
            runtime = store.lock_session(loaded.session_id)
        if loaded.version == 0:
            _, made = BrowserState.objects.get_or_create(
                session_id=loaded.session_id, defaults={**values, "version": 1}
            )
            if not made:
                raise Moved("another worker started this session's browser meanwhile")
        else:
            updated = BrowserState.objects.filter(
                session_id=loaded.session_id, version=loaded.version
            ).update(**values, version=F("version") + 1, updated_at=timezone.now())
            if not updated:
                raise Moved("another worker moved this session's browser on meanwhile")
        if step is not None:
            specs = []
            if between:
                specs.append(EventSpec("browser.refused", {"refused": between}, turn_id, "browser"))
            specs.append(EventSpec("browser.step", step, turn_id, "browser"))
            events.append(runtime, specs)
    loaded.version += 1
    return time.perf_counter() - started


def record_refused(session_id: int, turn_id: int | None, refused: list[dict[str, Any]]) -> None:
    """What a page had refused since its last action, when its context closes."""
    with transaction.atomic():
        runtime = store.lock_session(session_id)
        events.append(
            runtime, [EventSpec("browser.refused", {"refused": refused}, turn_id, "browser")]
        )


def remember_page(loaded: Loaded, url: str, navigated: bool) -> None:
    data = loaded.data
    if navigated:
        loaded.pages += 1
        history = data.setdefault("history", [])
        if not history or history[-1] != url:
            history.append(url)
            del history[:-MAX_HISTORY]
        data["forms"] = {}  # a new page: nothing filled on it yet
    data["url"] = url
