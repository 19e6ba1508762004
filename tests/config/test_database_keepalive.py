"""Every database connection bounds how long it waits on a silent server, and
asks the server to bound how long it keeps a silent client (config/
keepalive.py); tests/agents/runtime/test_silent_database.py shows both ends
across a black-holed link."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import yaml
from django.conf import settings
from django.db import connection

from config import embedded, keepalive
from tests.processes import ROOT

GUCS = (
    "tcp_keepalives_idle",
    "tcp_keepalives_interval",
    "tcp_keepalives_count",
    "tcp_user_timeout",
)


def _shown(conn) -> dict[str, str]:
    return {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in GUCS}


EXPECTED = {
    "tcp_keepalives_idle": "5",
    "tcp_keepalives_interval": "2",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "10000",
}


@pytest.mark.django_db(transaction=True)
def test_the_liveness_connection_asks_the_server_to_drop_it_when_silent():
    from agents.runtime.ownership import _Liveness

    liveness = _Liveness()
    try:
        liveness.key()
        assert liveness._conn is not None
        assert _shown(liveness._conn) == EXPECTED
        # ...with the client's own side bounded the same way.
        params = liveness._conn.info.get_parameters()
        assert params["connect_timeout"] == "5" and params["keepalives_idle"] == "5"
        assert params["tcp_user_timeout"] == "10000"
    finally:
        liveness.close()


@pytest.mark.django_db
def test_the_pooled_connections_ask_the_same():
    connection.ensure_connection()
    assert _shown(connection.connection) == EXPECTED


def _settings_in_a_process(**env: str) -> dict:
    code = "from django.conf import settings; import json; "
    code += "print(json.dumps(settings.DATABASES['default']['OPTIONS'], default=str))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_behind_a_pooler_the_server_keepalive_can_be_left_to_its_configuration():
    """PgBouncer refuses startup `options` (unless it ignores them): switched
    off, our connections ask nothing of the server; the URL's own still win."""
    options = _settings_in_a_process(AGENTDESK_DB_SERVER_KEEPALIVE="0")
    assert "options" not in options
    assert options["keepalives_idle"] == keepalive.IDLE_S  # the client's side stays
    given = _settings_in_a_process(
        DATABASE_URL="postgres://u@db:5432/x?connect_timeout=9&options=-c%20work_mem%3D8MB",
        AGENTDESK_DB_KEEPALIVE_IDLE_S="7",
    )
    assert str(given["connect_timeout"]) == "9"
    assert given["options"].endswith("-c work_mem=8MB")
    assert "-c tcp_keepalives_idle=7 " in given["options"]


def test_a_server_that_never_answers_is_given_up_on_at_connect_timeout(tmp_path):
    """A listener that accepts and then says nothing (a server whose host
    hangs): the liveness lock's connection, made as a worker makes it,
    fails after connect_timeout instead of waiting for ever."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the handshake; nobody ever answers
    port = silent.getsockname()[1]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    env.update(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/x", AGENTDESK_DB_CONNECT_TIMEOUT_S="2"
    )
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.agents.runtime.db_client", "liveness"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"still connecting after 30s:\n{out}")
    finally:
        silent.close()
    took = time.monotonic() - started
    assert proc.returncode != 0 and "timeout expired" in out, out
    assert took < 20, took


def test_the_servers_we_configure_drop_a_silent_client_as_our_connections_ask():
    gucs = {name: str(value) for name, value in keepalive.server_gucs().items()}
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = compose["services"]["db"]["command"]
    assert command[0] == "postgres"
    assert dict(arg.split("=", 1) for arg in command[2::2]) == gucs
    assert set(command[1::2]) == {"-c"}
    made = embedded.postgres_command(ROOT, 5433)
    for name, value in gucs.items():
        assert f"{name}={value}" in made
    # The same figures as our connections' defaults (settings.py).
    assert settings.AGENTDESK_DB_KEEPALIVE_IDLE_S == int(gucs["tcp_keepalives_idle"])
    assert settings.AGENTDESK_DB_TCP_USER_TIMEOUT_MS == int(gucs["tcp_user_timeout"])
