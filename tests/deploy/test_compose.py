"""docker-compose.yml and the image's file set, checked fast (no install)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess

import pytest
from django.conf import settings

from tests.deploy import image as img


def test_the_image_holds_every_local_app_and_none_of_the_local_state(tmp_path):
    image = img.file_set(img.ROOT, img.ROOT / "Dockerfile", tmp_path)
    local = [app for app in settings.INSTALLED_APPS if (img.ROOT / app.split(".")[0]).is_dir()]
    assert "capabilities" in local
    for app in local:
        assert (image.app / app.split(".")[0] / "__init__.py").exists(), app
    for path in ("manage.py", "pyproject.toml", "requirements.lock", "templates", "static"):
        assert (image.app / path).exists(), path
    sent = img.context_files(img.ROOT)
    for prefix in (".venv/", ".data/", ".git/", "tests/", "bench/", "staticfiles/"):
        assert not any(f.startswith(prefix) for f in sent), prefix
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in sent)


def test_compose_requires_the_secrets_production_refuses_to_do_without():
    compose = img.compose_file()
    required = img.required_variables(compose)
    assert required == ["AGENTDESK_METRICS_TOKEN", "AGENTDESK_WEBHOOK_SECRET", "DJANGO_SECRET_KEY"]
    with pytest.raises(KeyError, match="DJANGO_SECRET_KEY"):
        img.compose_env(compose, {})


@pytest.mark.parametrize(
    ("text", "given", "expected"),
    [
        ("${A:-d}", {}, "d"),
        ("${A:-d}", {"A": ""}, "d"),
        ("${A-d}", {"A": ""}, ""),
        ("${A:-d}", {"A": "x"}, "x"),
        ("a$${A}b", {"A": "x"}, "a${A}b"),
        ("${A}/$A", {"A": "x"}, "x/x"),
        ("${A:?need A}", {"A": "x"}, "x"),
    ],
)
def test_compose_interpolation(text, given, expected):
    assert img.substitute(text, given) == expected


def _compose_client() -> bool:
    if shutil.which("docker") is None:
        return False
    found = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    return found.returncode == 0


def test_docker_compose_config_accepts_the_file():
    if not _compose_client():
        pytest.skip("no docker compose client here (`docker compose version` fails)")
    env = {name: secrets.token_urlsafe(32) for name in img.required_variables(img.compose_file())}
    result = subprocess.run(
        ["docker", "compose", "-f", str(img.ROOT / "docker-compose.yml"), "config", "-q"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_every_long_running_service_is_restarted_when_it_dies():
    """Issue 26: a worker, web, beat, the sandbox, the database or Redis that
    exits is started again (yaml anchors merged by safe_load); only the
    one-shot migrate is not."""
    services = img.compose_file()["services"]
    for name, service in services.items():
        wanted = {"no"} if name == "migrate" else {"unless-stopped", "always"}
        assert service.get("restart") in wanted, (name, service.get("restart"))
