"""A Code Mode program through the API (issue 24 point 6): the tool-call
endpoints carry the program (source, host calls nested with duration,
arguments and result, printed output, value or error), and the SSE stream
carries each host call's step events as they commit. Real worker, sandbox,
Monty and Daphne."""

from __future__ import annotations

import json

import pytest
import requests

from agents.models import ToolCall
from api.tokens import token_create
from tests.agents.helpers import wait_turn
from tests.api.conftest import ApiClient, sse_frames
from tests.capabilities.conftest import start_session

pytestmark = pytest.mark.django_db(transaction=True)
V1 = "/api/v1"

WORKS = """print('looking up')
first = lookup_order(order_id='ORD-1001')
second = lookup_order(order_id='ORD-1002')
print('found', first['status'])
{'statuses': [first['status'], second['status']]}"""

FAILS = """lookup_customer(email='alice.martin@example.com')
print('about to fail')
raise ValueError('no such luck')"""


def fenced(code: str) -> str:
    return f"Please run this for me.\n```python\n{code}\n```\n"


def program_session(sandbox, name: str, code: str):
    ticket = sandbox.ticket(email="alice.martin@example.com", subject=name, body=fenced(code))
    return start_session(f"ticket:{ticket['id']}", "support_codemode", fenced(code))


def first_program(session) -> ToolCall:
    return ToolCall.objects.filter(session=session, name="run_code").order_by("id").first()


def test_the_api_shows_a_program_with_its_host_calls_and_the_stream_carries_them(
    sandbox, workers, web, alice
):
    _, token = token_create(user=alice, name="code mode")
    works = program_session(sandbox, "works", WORKS)
    fails = program_session(sandbox, "fails", FAILS)
    stream = requests.get(
        f"{web.url}{V1}/sessions/{works.id}/events",
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
        stream=True,
        timeout=(5, 90),
    )
    assert stream.status_code == 200
    workers.start()
    seen = []
    for _, event in sse_frames(stream):  # live, as each step commits
        seen.append(event)
        if event["kind"] in ("turn.succeeded", "turn.failed"):
            break
    stream.close()
    assert wait_turn(works, timeout=60).status == "succeeded"
    assert wait_turn(fails, timeout=60).status == "succeeded"  # the model read the error

    program = first_program(works)
    steps = [e["data"] for e in seen if e["kind"].startswith("tool.step_")]
    ours = [s for s in steps if s["tool_use_id"] == program.tool_use_id]
    assert [(s["step"], s["name"], "status" in s) for s in ours] == [
        (1, "lookup_order", False),
        (1, "lookup_order", True),
        (2, "lookup_order", False),
        (2, "lookup_order", True),
    ]
    assert ours[0]["input"] == {"order_id": "ORD-1001"}
    assert ours[1]["status"] == "succeeded" and ours[1]["ms"] >= 0

    client = ApiClient(token)
    one = client.get(f"{V1}/sessions/{works.id}/tool-calls/{program.id}").json()
    shown = one["program"]
    assert shown["source"] == WORKS + "\n" and shown["finished"] is True
    calls = shown["host_calls"]
    assert [(c["n"], c["name"], c["status"], c["arguments"]) for c in calls] == [
        (1, "lookup_order", "succeeded", {"order_id": "ORD-1001"}),
        (2, "lookup_order", "succeeded", {"order_id": "ORD-1002"}),
    ]
    assert all(c["duration_ms"] is not None and c["attempts"] == 1 for c in calls)
    statuses = [json.loads(c["result"])["status"] for c in calls]
    assert shown["value"] == {"statuses": statuses} and shown["error"] is None
    assert shown["stdout"] == f"looking up\nfound {statuses[0]}\n"
    assert isinstance(shown["interpreter_ms"], int)
    assert [e["data"]["output"] for e in seen if e["kind"] == "tool.step_ended"][:2] == [
        c["result"] for c in calls
    ]
    # The list carries the same, and only run_code calls have a program.
    listed = client.get(f"{V1}/sessions/{works.id}/tool-calls").json()["items"]
    by_id = {c["id"]: c for c in listed}
    assert by_id[program.id]["program"] == shown
    assert all(c["program"] is None for c in listed if c["parent_id"] is not None)

    failed = first_program(fails)
    shown = client.get(f"{V1}/sessions/{fails.id}/tool-calls/{failed.id}").json()["program"]
    assert [(c["name"], c["status"]) for c in shown["host_calls"]] == [
        ("lookup_customer", "succeeded")
    ]
    assert "ValueError: no such luck" in shown["error"] and shown["value"] is None
    assert shown["stdout"] == "about to fail\n"
