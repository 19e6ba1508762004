"""Slack's Web API stand-in: `POST /slack/api/chat.postMessage` records the
message (as Slack does: a bot token required, `{"ok": true, "ts": ...}`
back), and `GET /_slack` shows what was posted.

Point the official SDK at it with `slack_sdk.WebClient(token=...,
base_url=f"{SANDBOX_URL}/slack/api/")`.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sandbox.responses import json_response
from sandbox.state import sandbox_of


class SlackLog:
    """Messages posted, oldest first (in memory; /_reset clears it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[dict[str, Any]] = []

    def add(self, message: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            message = {**message, "ts": f"{time.time():.6f}"}
            self.messages.append(message)
            return message

    def all(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.messages)

    def clear(self) -> None:
        with self.lock:
            self.messages.clear()


async def _fields(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if request.headers.get("content-type", "").startswith("application/json"):
        import json

        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return {}
        return body if isinstance(body, dict) else {}
    return dict(parse_qsl(raw.decode("utf-8", "replace")))


async def post_message(request: Request) -> Response:
    auth = request.headers.get("authorization", "")
    if not auth.startswith("Bearer xox"):
        return json_response({"ok": False, "error": "not_authed"})
    body = await _fields(request)
    if not body.get("channel"):
        return json_response({"ok": False, "error": "channel_not_found"})
    if not body.get("text") and not body.get("blocks"):
        return json_response({"ok": False, "error": "no_text"})
    kept = sandbox_of(request).slack.add(
        {k: body.get(k) for k in ("channel", "text", "blocks") if body.get(k) is not None}
    )
    return json_response(
        {"ok": True, "channel": kept["channel"], "ts": kept["ts"], "message": kept}
    )


async def messages(request: Request) -> Response:
    return json_response({"messages": sandbox_of(request).slack.all()})


routes = [
    Route("/slack/api/chat.postMessage", post_message, methods=["POST"]),
    Route("/_slack", messages, methods=["GET"]),
]
