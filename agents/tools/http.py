"""HTTP plumbing shared by connectors: one pooled session per process, with
every failure sorted into what recovery needs to know (see base.py).

Error messages go to the model and the event log: they name the method,
host and path, never credentials or query strings (agents/tools/sanitize.py)."""

from __future__ import annotations

import threading
from typing import Any

import requests
from django.conf import settings

from agents.tools.base import NotSent, OutcomeUnknown, ToolError
from agents.tools.sanitize import clean

_local = threading.local()
# Stripe's code (and the helpdesk's) for "a request with this Idempotency-Key
# is still in progress": that request is refused and does nothing.
KEY_IN_USE = "idempotency_key_in_use"


def _session() -> requests.Session:
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
    return session


def call(
    method: str,
    url: str,
    *,
    timeout_s: float,
    json: Any = None,
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Send one request and return its JSON body, or raise a base.py error."""
    try:
        response = _session().request(
            method, url, json=json, params=params, headers=headers, timeout=timeout_s
        )
    except requests.exceptions.ConnectTimeout as exc:
        raise NotSent(clean(f"could not connect to {url}: {exc}")) from exc
    except requests.exceptions.ConnectionError as exc:
        if _never_connected(exc):
            raise NotSent(clean(f"could not connect to {url}")) from exc
        raise OutcomeUnknown(clean(f"connection lost during {method} {url}: {exc}")) from exc
    except requests.exceptions.Timeout as exc:
        raise OutcomeUnknown(clean(f"no answer from {method} {url} within {timeout_s}s")) from exc
    return _json_or_raise(method, url, response)


def _never_connected(exc: requests.exceptions.ConnectionError) -> bool:
    text = repr(exc)
    return "NewConnectionError" in text or "Connection refused" in text


def _json_or_raise(method: str, url: str, response: requests.Response) -> dict[str, Any]:
    if response.status_code == 429:
        # Rate limited: the request was refused before anything happened, so
        # it is as safe to send again as one that never left, whatever the kind.
        raise NotSent(f"{method} {url} answered 429 (rate limited)")
    if response.status_code == 409 and _error_code(response) == KEY_IN_USE:
        # The first request with our key is still running: this one did
        # nothing, and sent again later it gets the first one's answer.
        raise NotSent(f"{method} {url} answered 409 (idempotency key in use)")
    if response.status_code >= 500 or response.status_code == 409:
        # The other side may or may not have acted (or, for 409, is still
        # acting on the same key): only a retry with the same key can tell.
        raise OutcomeUnknown(clean(f"{method} {url} answered {response.status_code}"))
    try:
        body = response.json()
    except ValueError as exc:
        raise ToolError(
            clean(f"{method} {url} answered {response.status_code} with non-JSON")
        ) from exc
    if response.status_code >= 400:
        error = body.get("error", body) if isinstance(body, dict) else body
        message = error.get("message", error) if isinstance(error, dict) else error
        raise ToolError(clean(f"{response.status_code}: {message}"))
    return body


def _error_code(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("code", "")) if isinstance(error, dict) else ""


def helpdesk_url(path: str) -> str:
    return settings.HELPDESK_URL.rstrip("/") + path
