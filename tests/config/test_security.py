"""Production (DJANGO_DEBUG off) refuses development secrets at start-up, in
every kind of process, and speaks HTTPS unless told otherwise."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = "import django; django.setup()"
# What Daphne imports (config.asgi sets Django up), and the Celery app's own
# set-up (the worker does the same before it consumes anything).
ASGI = "import config.asgi"
CELERY = "from config.celery import app; app.loader.import_default_modules()"


def production_env(**overrides: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "AGENTDESK_")) and k != "PROMETHEUS_MULTIPROC_DIR"
    }
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        AGENTDESK_WEBHOOK_SECRET="whsec_" + secrets.token_urlsafe(24),
        AGENTDESK_METRICS_TOKEN=secrets.token_urlsafe(24),
    )
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_production_with_real_secrets_starts():
    result = run(SETUP, production_env())
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("DJANGO_SECRET_KEY", None, "DJANGO_SECRET_KEY is not set"),
        ("DJANGO_SECRET_KEY", "", "DJANGO_SECRET_KEY is not set"),
        (
            "DJANGO_SECRET_KEY",
            "dev-only-insecure-key-change-me",
            "DJANGO_SECRET_KEY is the development default",
        ),
        ("AGENTDESK_WEBHOOK_SECRET", None, "AGENTDESK_WEBHOOK_SECRET is not set"),
        (
            "AGENTDESK_WEBHOOK_SECRET",
            "whsec_dev_only",
            "AGENTDESK_WEBHOOK_SECRET is the development default",
        ),
        ("AGENTDESK_METRICS_TOKEN", None, "AGENTDESK_METRICS_TOKEN is not set"),
        ("AGENTDESK_METRICS_TOKEN", "", "AGENTDESK_METRICS_TOKEN is not set"),
    ],
)
def test_each_insecure_default_is_refused_naming_the_variable(variable, value, says):
    result = run(SETUP, production_env(**{variable: value}))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured:"), result.stderr
    assert says in last
    # Only the variable that is wrong is named.
    others = {"DJANGO_SECRET_KEY", "AGENTDESK_WEBHOOK_SECRET", "AGENTDESK_METRICS_TOKEN"} - {
        variable
    }
    assert not any(f"{other} is" in last for other in others), last


@pytest.mark.parametrize("code", [ASGI, CELERY], ids=["daphne", "celery"])
def test_web_and_worker_refuse_as_manage_py_does(code):
    bad = production_env(DJANGO_SECRET_KEY=None)
    result = run(code, bad)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr
    assert run(code, production_env()).returncode == 0


def test_manage_py_refuses_every_problem_at_once():
    env = production_env(
        DJANGO_SECRET_KEY=None, AGENTDESK_WEBHOOK_SECRET=None, AGENTDESK_METRICS_TOKEN=None
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    for name in ("DJANGO_SECRET_KEY", "AGENTDESK_WEBHOOK_SECRET", "AGENTDESK_METRICS_TOKEN"):
        assert f"{name} is not set" in result.stderr


def test_open_metrics_is_allowed_when_said_so():
    env = production_env(AGENTDESK_METRICS_TOKEN=None, AGENTDESK_METRICS_OPEN="1")
    assert run(SETUP, env).returncode == 0


def test_debug_on_keeps_the_development_defaults():
    """`make run`: DJANGO_DEBUG=1 and no secrets at all."""
    env = production_env(
        DJANGO_DEBUG="1",
        DJANGO_SECRET_KEY=None,
        AGENTDESK_WEBHOOK_SECRET=None,
        AGENTDESK_METRICS_TOKEN=None,
    )
    code = SETUP + "; from django.conf import settings as s; print(s.SECURE_SSL_REDIRECT)"
    result = run(code, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def _settings(env: dict[str, str], *names: str) -> list[str]:
    code = (
        SETUP
        + "; from django.conf import settings as s; "
        + "; ".join(f"print(repr(getattr(s, {n!r}, None)))" for n in names)
    )
    result = run(code, env)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("\n")[: len(names)]


HTTPS = (
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
    "SECURE_PROXY_SSL_HEADER",
)


def test_production_speaks_https_and_trusts_a_proxy_only_when_told():
    assert _settings(production_env(), *HTTPS) == ["True", "True", "True", "31536000", "None"]
    behind = _settings(production_env(AGENTDESK_TLS_PROXY="1"), *HTTPS)
    assert behind == ["True", "True", "True", "31536000", "('HTTP_X_FORWARDED_PROTO', 'https')"]
    plain = _settings(production_env(AGENTDESK_PLAIN_HTTP="1"), *HTTPS)
    assert plain == ["False", "False", "False", "0", "None"]


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_deploy_is_clean_in_production_and_says_what_plain_http_gives_up():
    clean = _check_deploy(production_env())
    assert clean.returncode == 0, clean.stdout + clean.stderr
    plain = _check_deploy(production_env(AGENTDESK_PLAIN_HTTP="1"))
    assert plain.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in plain.stderr + plain.stdout
