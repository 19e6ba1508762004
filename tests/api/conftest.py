"""Fixtures for the machine API: a token per persona, and a client that
sends it (Django's test client against the real URL conf, on Postgres)."""

from __future__ import annotations

import pytest
from django.test import Client

from api.tokens import token_create


class ApiClient:
    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.token = token

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        out = dict(headers or {})
        if self.token is not None:
            out.setdefault("Authorization", f"Bearer {self.token}")
        return out

    def get(self, path: str, headers: dict[str, str] | None = None, **params):
        return self.client.get(path, params, headers=self._headers(headers))

    def post(self, path: str, body=None, headers: dict[str, str] | None = None, raw=None):
        import json

        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(
            path, data, content_type="application/json", headers=self._headers(headers)
        )


@pytest.fixture
def api_as():
    """api_as(user) -> a client with a fresh token of that user."""

    def make(user) -> ApiClient:
        _, token = token_create(user=user, name=f"{user.username}'s test token")
        return ApiClient(token)

    return make


@pytest.fixture(autouse=True)
def _fresh_rate_limits(settings):
    """Each test starts with empty rate windows (its own Redis db)."""
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    for name in client.scan_iter("agentdesk:ratelimit:*"):
        client.delete(name)


@pytest.fixture
def dave(django_user_model):
    """Logged in, but in no desk group."""
    return django_user_model.objects.create_user(username="dave", password="dave-pw")


from tests.dashboard.conftest import Web, browser, web  # noqa: E402,F401  (Daphne, chromium)


def sse_frames(response):
    """(id, data) of each event frame of a text/event-stream response, as
    they arrive; comments (heartbeats) and the retry hint are skipped."""
    import json

    frame: dict[str, str] = {}
    for raw in response.iter_lines(decode_unicode=True):
        if raw is None:
            continue
        if raw == "":
            if "data" in frame:
                yield int(frame["id"]), json.loads(frame["data"])
            frame = {}
        elif not raw.startswith(":"):
            name, _, value = raw.partition(":")
            frame[name] = value.removeprefix(" ")


__all__ = ["ApiClient", "Web", "sse_frames"]
