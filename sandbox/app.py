"""The sandbox ASGI app: `create_app(data_path, **options)`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from sandbox import admin, carrier, generator, helpdesk, payments, slack
from sandbox.db import Database, run_sync
from sandbox.faults import FaultBook, FaultInjector
from sandbox.messages import routes as messages
from sandbox.responses import anthropic_error, helpdesk_error, stripe_error
from sandbox.seed import seed_demo
from sandbox.state import Counters, Options, Sandbox
from sandbox.webhooks import WebhookSender

log = logging.getLogger("sandbox")


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown URLs answer in the dialect of the API they were aimed at."""
    assert isinstance(exc, HTTPException)
    path, status = request.url.path, exc.status_code
    message = f"Unrecognized request URL ({request.method}: {path})"
    if path.startswith("/v1/messages"):
        return anthropic_error(status, message)
    if path.startswith("/v1/"):
        return stripe_error(status, "invalid_request_error", message)
    return helpdesk_error(status, "not_found" if status == 404 else "invalid_request", message)


def _lifespan(sandbox: Sandbox) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        options = sandbox.options
        if options.seed_demo or options.rate:
            await run_sync(seed_demo, sandbox.db)
        task = None
        if options.rate:
            task = asyncio.create_task(generator.run(sandbox, rate=options.rate, seed=options.seed))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await sandbox.webhooks.aclose()

    return lifespan


def create_app(data_path: str | Path, **options: Any) -> FaultInjector:
    """The ASGI app. Options: rate, seed, webhook_url, webhook_secret,
    seed_demo, model_chunk_delay_ms, model_ttft_ms, model_tokens_per_s (see
    `python -m sandbox --help`)."""
    opts = Options(**options)
    db = Database(data_path)
    sandbox = Sandbox(
        db=db,
        options=opts,
        faults=FaultBook(),
        counters=Counters(),
        webhooks=WebhookSender(db, opts.webhook_url, opts.webhook_secret),
        slack=slack.SlackLog(),
        carrier=carrier.CarrierPortal(),
    )
    sandbox.pace = sandbox.default_pace()
    app = Starlette(
        routes=[
            *admin.routes,
            *helpdesk.routes,
            *payments.routes,
            *messages.routes,
            *slack.routes,
            *carrier.routes,
        ],
        exception_handlers={HTTPException: _http_error},
        lifespan=_lifespan(sandbox),
    )
    app.state.sandbox = sandbox
    return FaultInjector(app, sandbox.faults, sandbox.counters)
