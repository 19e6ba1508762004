"""Fixtures for tests on the real stack: Postgres, Redis, worker processes,
the sandbox. Personas: alice (support), bob (approver), carol (admin)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests
from django.conf import settings

from tests.processes import Proc, start_beat, start_sandbox, start_worker


def pytest_report_header(config) -> list[str]:
    """Where the services came from, when no machine service answered."""
    from config import embedded

    return [f"agentdesk: {line}" for line in embedded.STARTED]


@pytest.fixture(scope="session")
def run_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="agentdesk-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def sandbox_url(run_dir: Path) -> Iterator[str]:
    proc, url = start_sandbox(run_dir, dict(os.environ))
    yield url
    proc.stop()


@pytest.fixture
def sandbox(sandbox_url: str, settings) -> Iterator[Sandbox]:
    """The sandbox, reset to its demo data, and our settings pointed at it."""
    requests.post(f"{sandbox_url}/_reset", json={"seed_demo": True}, timeout=10).raise_for_status()
    settings.SANDBOX_URL = settings.HELPDESK_URL = settings.STRIPE_API_BASE = sandbox_url
    settings.ANTHROPIC_BASE_URL = sandbox_url
    from agents.llm import forget_model_client

    forget_model_client()
    yield Sandbox(sandbox_url)
    forget_model_client()


class Sandbox:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params) -> dict:
        response = requests.get(f"{self.url}{path}", params=params, timeout=10)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: dict) -> dict:
        response = requests.post(f"{self.url}{path}", json=body, timeout=10)
        assert response.ok, f"sandbox {path} answered {response.status_code}: {response.text}"
        return response.json()

    def fault(self, **rule) -> dict:
        return self.post("/_faults", rule)

    def refunds(self) -> list[dict]:
        body = self.get("/_refunds")
        return body["refunds"] if isinstance(body, dict) else body

    def stats(self) -> dict:
        return self.get("/_stats")

    def ticket(self, *, email: str, subject: str, body: str, order_id: str = "") -> dict:
        payload = {"customer_email": email, "subject": subject, "body": body}
        if order_id:
            payload["order_id"] = order_id
        return self.post("/helpdesk/tickets", payload)


@pytest.fixture
def broker(settings) -> redis.Redis:
    """The test Redis db, emptied: no task left over from another test."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    return client


@pytest.fixture
def stack_env(sandbox: Sandbox, broker, transactional_db) -> dict[str, str]:
    """Environment for our own processes: the test database, Redis, sandbox."""
    from django.db import connection

    db = connection.settings_dict
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=settings.REDIS_URL,
        SANDBOX_URL=sandbox.url,
        AGENTDESK_SWEEP_INTERVAL_S="0.5",
        AGENTDESK_SWEEP_GRACE_S="1",
        AGENTDESK_TOOL_RETRIES="3",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def workers(stack_env, run_dir: Path) -> Iterator[Workers]:
    pool = Workers(stack_env, run_dir)
    yield pool
    pool.stop_all()
    print(pool.logs())  # shown by pytest only when the test failed


class Workers:
    """Start, kill and restart real Celery worker (and beat) processes."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: list[Proc] = []

    def start(self, name: str = "w1", **env: str) -> Proc:
        proc = start_worker(name, {**self.env, **env}, self.log_dir)
        self.procs.append(proc)
        return proc

    def beat(self, **env: str) -> Proc:
        proc = start_beat({**self.env, **env}, self.log_dir)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log()[-4000:]}" for p in self.procs)


@pytest.fixture
def alice(django_user_model):
    return _user(django_user_model, "alice", "support")


@pytest.fixture
def bob(django_user_model):
    return _user(django_user_model, "bob", "approver")


@pytest.fixture
def carol(django_user_model):
    return _user(django_user_model, "carol", "admin")


def _user(model, username: str, role: str):
    from dashboard.roles import ensure_roles

    groups = ensure_roles()
    user = model.objects.create_user(username=username, password=f"{username}-pw")
    user.groups.add(groups[role])
    return model.objects.get(pk=user.pk)  # fresh: no stale permission cache
