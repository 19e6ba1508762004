"""HTTP plumbing shared by connectors: one pooled session per tool thread,
with every failure sorted into what recovery needs to know (see base.py).

Error messages go to the model and the event log: they name the method,
host and path, never credentials or query strings (agents/tools/sanitize.py).

A request is prepared here and handed to `Session.send`, not sent with
`Session.request`: that one merges the session's cookies and reads the proxy
variables, the CA bundle variables and ~/.netrc from the environment on
every call, over half of a tool call's CPU in a busy worker (py-spy,
bench/latency.py). The environment is read once instead (a proxy set for the
process still applies), and no cookie or netrc credential rides along from
one ticket's call to another's.

A pooled keep-alive connection is used again only while it is younger, idle,
than MAX_IDLE_S, which sits below the keep-alive of the servers we call (the
helpdesk's, uvicorn's default, is 5 s; Apache's is 5 s, nginx's 75 s). A
connection the server is closing at the moment we write to it fails with a
reset that cannot tell "never read" from "read and acted on": for a tool
that is not idempotent that is an `in_doubt` a person must resolve, with
nothing having happened (issue 26: 15 of 150 escalations at a 4.9 s model
latency). Older than that, it is closed and a new one made: a connect that
fails is NotSent, certainly.
"""

from __future__ import annotations

import functools
import http.cookiejar
import os
import threading
import time
import urllib.request
from typing import Any

import requests
import urllib3
from django.conf import settings
from requests.adapters import HTTPAdapter
from requests.utils import should_bypass_proxies
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from agents.tools.base import NotSent, OutcomeUnknown, ToolError
from agents.tools.sanitize import clean

_local = threading.local()
# Stripe's code (and the helpdesk's) for "a request with this Idempotency-Key
# is still in progress": that request is refused and does nothing.
KEY_IN_USE = "idempotency_key_in_use"


# Below every keep-alive we know of (see above), with room for a slow write.
MAX_IDLE_S = 3.0


class _FreshConnections:
    """A urllib3 pool that never hands out a connection idle past MAX_IDLE_S."""

    def _get_conn(self, timeout=None):
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        returned = getattr(conn, "agentdesk_idle_since", None)
        if returned is not None and time.monotonic() - returned > MAX_IDLE_S:
            conn.close()  # as urllib3 does with a dropped one: reconnects on use
        return conn

    def _put_conn(self, conn) -> None:
        if conn is not None:
            conn.agentdesk_idle_since = time.monotonic()
        super()._put_conn(conn)  # type: ignore[misc]


class _FreshHTTPPool(_FreshConnections, HTTPConnectionPool):
    pass


class _FreshHTTPSPool(_FreshConnections, HTTPSConnectionPool):
    pass


class _Adapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _FreshHTTPPool, "https": _FreshHTTPSPool}


def _session() -> requests.Session:
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
        session.mount("http://", _Adapter())
        session.mount("https://", _Adapter())
        # Calls for different tickets share the thread's session: keep no cookie.
        session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    return session


@functools.cache
def _environment() -> tuple[dict[str, str], str | bool]:
    """The process's proxies (with `no` for NO_PROXY) and CA bundle, as
    requests would read them from the environment."""
    verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    return urllib.request.getproxies(), verify


def _proxies_for(url: str) -> dict[str, str]:
    proxies, _ = _environment()
    if not proxies or should_bypass_proxies(url, no_proxy=proxies.get("no")):
        return {}
    return {scheme: proxy for scheme, proxy in proxies.items() if scheme != "no"}


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
    session = _session()
    prepared = requests.Request(
        method, url, json=json, params=params, headers={**session.headers, **(headers or {})}
    ).prepare()
    try:
        response = session.send(
            prepared, timeout=timeout_s, proxies=_proxies_for(url), verify=_environment()[1]
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
    """No connection was made (refused, or the name does not resolve), so
    nothing was sent. By type: urllib3 raises NewConnectionError (its
    NameResolutionError included), which requests wraps in MaxRetryError."""
    reason = exc.args[0] if exc.args else None
    reason = getattr(reason, "reason", reason)
    return isinstance(reason, urllib3.exceptions.NewConnectionError | ConnectionRefusedError)


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
