"""The paths machines post bursts to, served without the desk's browser layer.

`POST /api/inbound/helpdesk` (the signed webhook), `POST /api/v1/messages` and
`POST /api/sessions/<key>/messages` (the messages APIs) are called by
programs, in bursts, and never carry a cookie. Through Django's ASGI handler
each of them paid for what only a person's browser needs (issue 28, measured
in-process with bench-sized tickets: 10.3 ms of CPU per webhook through
config.asgi, 6.2 ms for the view on its own):

- the session, CSRF, authentication, messages, htmx and django-axes
  middleware (the views are csrf_exempt and authenticate by HMAC or bearer
  token; no cookie is read or set);
- a new thread per request: Django runs a request's sync code in a
  ThreadSensitiveContext of its own, so every request started a thread,
  and every sync middleware and signal receiver was one more hop to it.

This handler runs the same Django request cycle for exactly those paths,
with the rest of the middleware (security headers, host validation,
problem documents under /api/v1/, the CSP headers: any middleware not named
in BROWSER_ONLY) in the order settings.MIDDLEWARE gives, on a small pool of
threads that live as long as the process. So every guarantee of the views
holds as it was: the signature verified and the body parsed once, the size
limit (DATA_UPLOAD_MAX_MEMORY_SIZE), the token's rate limit and
Idempotency-Key, the same answers and error answers (a database that is
away: config/errors.py), the connection given back to the pool when the
request ends (request_finished, as Django sends it).

The pool has AGENTDESK_DB_POOL_SIZE threads: a request holds one pooled
connection for its whole cycle, so more threads would wait on the pool.
"""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpResponse
from django.urls import set_script_prefix
from django.utils.module_loading import import_string

# Exactly the machine paths (and only POST: anything else takes Django's
# whole stack, which answers it as before).
PATHS = re.compile(r"/api/(?:inbound/helpdesk|v1/messages|sessions/[^\x00]+/messages)")

# Middleware that serves a person's browser only: cookies, the session, CSRF
# tokens, flash messages, htmx, login lockout. A middleware not named here
# runs on the machine paths too.
BROWSER_ONLY = frozenset(
    {
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
        "dashboard.inputs.RefuseNulMiddleware",  # passes /api/ through anyway
        "django_htmx.middleware.HtmxMiddleware",
        "axes.middleware.AxesMiddleware",
    }
)


def handles(scope: dict[str, Any]) -> bool:
    return scope["method"] == "POST" and PATHS.fullmatch(scope["path"]) is not None


class InboundHandler(ASGIHandler):
    """Django's request cycle for the machine paths: the middleware outside
    BROWSER_ONLY, run synchronously on a thread of a pool of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.executor = ThreadPoolExecutor(
            max_workers=max(1, settings.AGENTDESK_DB_POOL_SIZE), thread_name_prefix="inbound"
        )

    def load_middleware(self, is_async: bool = False) -> None:
        """BaseHandler.load_middleware's sync chain over the machine
        middleware (none of ours is async-only)."""
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        handler = convert_exception_to_response(self._get_response)
        for path in reversed([m for m in settings.MIDDLEWARE if m not in BROWSER_ONLY]):
            middleware = import_string(path)(handler)
            if hasattr(middleware, "process_view"):
                self._view_middleware.insert(0, middleware.process_view)
            if hasattr(middleware, "process_template_response"):
                self._template_response_middleware.append(middleware.process_template_response)
            if hasattr(middleware, "process_exception"):
                self._exception_middleware.append(middleware.process_exception)
            handler = convert_exception_to_response(middleware)
        self._middleware_chain = handler

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        try:
            loop = asyncio.get_running_loop()
            response = await loop.run_in_executor(self.executor, self._serve, scope, body_file)
            await self.send_response(response, send)
            if response.streaming:  # none of these paths streams; if one did
                await loop.run_in_executor(self.executor, response.close)
        finally:
            body_file.close()

    def _serve(self, scope: dict[str, Any], body_file: Any) -> HttpResponse:
        """The whole cycle, on one thread: request_started (stale connections
        closed), the middleware and view, request_finished (the connection
        back to the pool) when the response is closed, before it is sent;
        what is sent is the response's content, already rendered (a streaming
        response is closed on this pool once sent)."""
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
        if not response.streaming:
            response.close()
        return response
