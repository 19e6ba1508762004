"""schemathesis over every operation of the live OpenAPI document, served by
a real Daphne: no 5xx, every answer matches the document (status, content
type, body schema, headers), and an operation that needs a token refuses a
request without one (the `ignored_auth` check)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from api.tokens import token_create
from tests.dashboard import factories
from tests.processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

MAX_EXAMPLES = os.environ.get("AGENTDESK_SCHEMATHESIS_EXAMPLES", "8")


@pytest.fixture
def stack_env(stack_env):
    # Streams end after a second (a client would reconnect), so that
    # schemathesis can read the SSE operation's whole answer; no write limit,
    # so that every write case reaches its view.
    return {**stack_env, "AGENTDESK_SSE_MAX_S": "1", "AGENTDESK_API_RATE_LIMIT": "0"}


def test_every_operation_answers_as_documented(web, bob, capsys):
    # Something to read: sessions with turns, a parked call, a pending approval.
    for _ in range(3):
        factories.turn(factories.session())
    factories.pending_approval()
    _, token = token_create(user=bob, name="schemathesis")
    args = [
        os.path.join(os.path.dirname(sys.executable), "st"),
        "--config-file",
        str(ROOT / "tests" / "api" / "schemathesis.toml"),
        "run",
        f"{web.url}/api/v1/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        MAX_EXAMPLES,
        "--phases",
        "examples,coverage,fuzzing",
        "--request-timeout",
        "15",
        "--seed",
        "1",
        "--no-color",
        "--workers",
        "1",
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_hooks"}
    env["AGENTDESK_ST_TOKEN"] = token
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(args, capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    output = done.stdout + done.stderr
    print(output)  # the report; pytest -s (or a failure) shows it
    generated = re.search(r"(\d+) generated", output)
    assert generated, output[-3000:]
    with capsys.disabled():  # the count shows in every run, not only a failed one
        print(f"\nschemathesis: {generated.group(1)} generated cases over every operation")
    assert done.returncode == 0, output[-6000:]
    assert "Traceback" not in web.proc.log(), web.proc.log()[-4000:]
