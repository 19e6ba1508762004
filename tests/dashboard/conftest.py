"""Fixtures for the desk: a real Daphne serving the ASGI app, a headless
Debian chromium through Playwright, WebSocket clients against the real
ASGI app and Redis channel layer, and a user without any desk role."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connections
from django.test import Client

from tests.processes import STARTUP_S, Proc

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def dave(django_user_model):
    """Logged in, but in no desk group: every desk page refuses him."""
    return django_user_model.objects.create_user(username="dave", password="dave-pw")


def cookie_for(user) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def ws_headers(
    user=None, origin: str = "http://127.0.0.1", host: str = "127.0.0.1"
) -> list[tuple[bytes, bytes]]:
    """A handshake to `host` (the Host header) from a page at `origin`."""
    headers = [(b"origin", origin.encode()), (b"host", host.encode())]
    if user is not None:
        headers.append((b"cookie", cookie_for(user).encode()))
    return headers


class Web:
    def __init__(self, proc: Proc, url: str) -> None:
        self.proc = proc
        self.url = url


@contextmanager
def daphne(stack_env: dict[str, str], run_dir: Path) -> Iterator[Web]:
    """Daphne on a free port, on the test database, Redis and sandbox.

    Test settings (config.settings_test) so the personas' test password
    hashes check; DATABASE_URL / REDIS_URL from stack_env win over its defaults.
    """
    env = {**stack_env, "DJANGO_SETTINGS_MODULE": "config.settings_test"}
    args = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", "0", "config.asgi:application"]
    proc = Proc("daphne", args, env, run_dir / f"daphne-{time.monotonic_ns()}.log")
    try:
        match = proc.wait_for_log(r"Listening on TCP address (127\.0\.0\.1:\d+)", timeout=STARTUP_S)
        yield Web(proc, f"http://{match.group(1)}")
    finally:
        proc.stop()
        print(f"--- daphne ---\n{proc.log()[-4000:]}")  # shown when the test failed


@pytest.fixture
def web(stack_env, run_dir: Path) -> Iterator[Web]:
    with daphne(stack_env, run_dir) as started:
        yield started


@pytest.fixture
def browser(web):
    """Debian's chromium, headless. Missing chromium is a failure, not a skip:
    `apt-get install -y chromium` (.ci/run does it)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread; the
    # test's own ORM calls are still plain synchronous calls.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            try:
                yield launched
            finally:
                launched.close()
                # ORM calls made while Playwright's loop runs in this thread get
                # their own connection (Django keys connections by context);
                # close it, or it holds the test database open at teardown.
                connections.close_all()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def login(browser, web: Web, username: str):
    """A fresh browser context logged in through the login form."""
    context = browser.new_context(base_url=web.url)
    page = context.new_page()
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", f"{username}-pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{web.url}/")
    return page
