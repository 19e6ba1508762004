"""The image starts: its file set, installed as the Dockerfile installs it,
with docker-compose.yml's production environment, passes `check --deploy`,
migrates a database, serves /login/ and starts a worker. No Docker needed
(none of our machines has a daemon); see tests/deploy/image.py."""

from __future__ import annotations

import http.client
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.deploy import image as img
from tests.processes import STARTUP_S, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def throwaway_database() -> Iterator[str]:
    db = settings.DATABASES["default"]
    name = f"agentdesk_image_{secrets.token_hex(4)}"
    admin = dict(host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"] or None)
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    yield f"postgres://{auth}@{db['HOST']}:{db['PORT']}/{name}"
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class ProductionEnv:
    """docker-compose.yml's environment for each service, its required secrets
    given test values, the service names it uses (db, redis) pointed at this
    machine's, and the metrics volume a folder here."""

    def __init__(self, database_url: str, volume: Path) -> None:
        self.compose = img.compose_file()
        self.given = {n: secrets.token_urlsafe(50) for n in img.required_variables(self.compose)}
        self.database_url = database_url
        self.volume = volume

    def __call__(self, service: str | None = None) -> dict[str, str]:
        env = img.compose_env(self.compose, self.given, service)
        assert env["DJANGO_DEBUG"] == "0"
        env.update(DATABASE_URL=self.database_url, REDIS_URL=settings.REDIS_URL)
        if "PROMETHEUS_MULTIPROC_DIR" in env:
            mounted = self.compose["services"][service]["volumes"]
            assert f"metrics:{env['PROMETHEUS_MULTIPROC_DIR']}" in mounted
            env["PROMETHEUS_MULTIPROC_DIR"] = str(self.volume)
        return env


def build(dockerfile: Path, into: Path, log=print) -> tuple[img.Image, Path]:
    started = time.monotonic()
    image = img.file_set(img.ROOT, dockerfile, into / "image")
    # What the image holds is what the Dockerfile installs: both installs ran.
    assert [args for _, args in image.pip_runs] == [
        ["-r", "requirements.lock"],
        ["--no-deps", "-e", "."],
    ], image.pip_runs
    venv = into / "venv"
    img.install(image, venv, log)
    log(f"file set and install: {time.monotonic() - started:.1f} s")
    return image, venv


def run(image: img.Image, venv: Path, env: dict[str, str], *args: str, timeout: float = 180):
    result = subprocess.run(
        list(args),
        cwd=image.app,
        env=img.clean_env({**image.env, **env}, venv),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    print(f"$ {' '.join(args)}\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


class Started:
    def __init__(self, args: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self.log_file = open(log, "wb")  # noqa: SIM115 (closed in stop())
        self.popen = subprocess.Popen(
            args, cwd=cwd, env=env, stdout=self.log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: str, timeout: float = 180) -> re.Match:
        def found():
            assert self.popen.poll() is None, f"exited early:\n{self.log()[-4000:]}"
            return re.search(pattern, self.log())

        return wait_for(found, timeout=timeout, what=pattern)

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        self.log_file.close()
        print(f"--- {self.log_path.name} ---\n{self.log()[-3000:]}")


def command(service: str) -> list[str]:
    return list(img.compose_file()["services"][service]["command"])


def test_the_image_checks_migrates_serves_and_runs_a_worker(tmp_path, throwaway_database):
    image, venv = build(img.ROOT / "Dockerfile", tmp_path)
    for left_out in (".venv", ".data", ".git", "tests", "bench"):
        assert not (image.app / left_out).exists(), f"{left_out} is in the image"
    (tmp_path / "metrics").mkdir()
    production = ProductionEnv(throwaway_database, tmp_path / "metrics")
    env = production()

    deploy = run(image, venv, env, "python", "manage.py", "check", "--deploy", "--fail-level", "WARNING")  # fmt: skip
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr

    # The compose file's one-shot: migrations, then the desk's roles.
    migrate = run(image, venv, env, *command("migrate"))
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr

    web_args = command("web")  # python -m config.web --host ... --port ...
    web_args[web_args.index("--port") + 1] = "0"
    web_args[web_args.index("--host") + 1] = "127.0.0.1"

    def process_env(service: str) -> dict[str, str]:
        return img.clean_env({**image.env, **production(service)}, venv)

    web = Started(web_args, image.app, process_env("web"), tmp_path / "web.log")
    worker = None
    try:
        port = int(
            web.wait_for_log(
                r"web: \d+ Daphne process\(es\) on 127\.0\.0\.1:(\d+)", timeout=STARTUP_S
            ).group(1)
        )
        # What the proxy in front sends, and the compose healthcheck asks.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/login/", headers={"X-Forwarded-Proto": "https"})
        response = conn.getresponse()
        body = response.read().decode()
        assert response.status == 200, body[:2000]
        assert 'name="password"' in body
        assert "Secure" in response.headers["Set-Cookie"]  # csrftoken
        assert response.headers["Strict-Transport-Security"].startswith("max-age=")
        conn.request("GET", "/login/")  # plain HTTP: sent to https
        plain = conn.getresponse()
        plain.read()
        assert plain.status == 301
        assert plain.headers["Location"] == f"https://127.0.0.1:{port}/login/"
        health = img.compose_file()["services"]["web"]["healthcheck"]["test"]
        assert health[0] == "CMD"
        check = [part.replace("8000", str(port)) for part in health[1:]]
        healthy = run(image, venv, env, *check)
        assert healthy.returncode == 0, healthy.stderr

        worker = Started(
            command("worker"), image.app, process_env("worker"), tmp_path / "worker.log"
        )
        worker.wait_for_log(r"\bready\.", timeout=STARTUP_S)
        # The worker counts into the volume web reads /metrics from; the token
        # compose requires is asked for.
        assert any(p.name.startswith("counter_") for p in (tmp_path / "metrics").iterdir())
        token = production.given["AGENTDESK_METRICS_TOKEN"]
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
        scraped = conn.getresponse()
        text = scraped.read().decode()
        assert scraped.status == 200, text[:2000]
        assert "agentdesk_recoveries_total" in text and "agentdesk_approvals_pending" in text
        conn.request("GET", "/metrics")
        refused = conn.getresponse()
        refused.read()
        assert refused.status == 401
    finally:
        web.stop()
        if worker is not None:
            worker.stop()
    shutil.rmtree(tmp_path / "venv", ignore_errors=True)  # 0.5 GB
