"""AGENTDESK_MODEL_EFFORT: how much the model thinks and writes, sent as
output_config.effort on every call; unset, the model's own default; a value
the API does not take stops the process at start with a clear error."""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests

from tests.agents.helpers import deliver_ticket, order_ticket, wait_turn

pytestmark = pytest.mark.django_db(transaction=True)


def _configs(sandbox) -> list:
    sent = sandbox.get("/_model_requests", last=50)["requests"]
    assert sent
    return [r.get("output_config") for r in sent]


def test_every_call_asks_for_the_effort_set(sandbox, workers):
    workers.start(AGENTDESK_MODEL_EFFORT="low")
    turn = wait_turn(deliver_ticket(order_ticket(sandbox)))

    assert turn.status == "succeeded", (turn.error, workers.logs())
    assert set(map(str, _configs(sandbox))) == {str({"effort": "low"})}


def test_unset_the_model_decides(sandbox, workers):
    workers.start()
    turn = wait_turn(deliver_ticket(order_ticket(sandbox)))

    assert turn.status == "succeeded", (turn.error, workers.logs())
    assert set(_configs(sandbox)) == {None}


def test_an_effort_the_api_does_not_take_stops_the_process_at_start(stack_env):
    started = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={**stack_env, "AGENTDESK_MODEL_EFFORT": "extreme"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert "AGENTDESK_MODEL_EFFORT must be one of low, medium, high, xhigh, max" in started.stderr


def test_the_sandbox_refuses_an_unknown_effort_as_the_api_does(sandbox):
    reply = requests.post(
        f"{sandbox.url}/v1/messages",
        json={
            "model": "claude-sonnet-5",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
            "output_config": {"effort": "extreme"},
        },
        headers={"x-api-key": "k"},
        timeout=10,
    )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and "output_config.effort" in error["message"]
