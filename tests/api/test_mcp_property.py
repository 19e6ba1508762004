"""No tool call to the MCP endpoint gives a 500 or a crash (issue 27):
generated arguments for every tool, over HTTP to a real Daphne, each
answered with a result or an error the caller reads."""

from __future__ import annotations

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.tokens import token_create
from tests.dashboard.conftest import daphne
from tests.dashboard.test_input_bounds import hostile_text

pytestmark = pytest.mark.django_db(transaction=True)

VALUES = st.one_of(
    hostile_text,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.none(),
    st.booleans(),
    st.dictionaries(hostile_text, hostile_text, max_size=3),
    st.lists(hostile_text, max_size=3),
)
TOOLS = {
    "request_approval": ["tool_name", "arguments", "reason", "session_key"],
    "approval_status": ["approval_id"],
    "post_message": ["session_key", "text"],
    "session_status": ["session_key"],
    "no_such_tool": ["x"],
}


@pytest.fixture
def mcp(stack_env, run_dir, alice):
    _, token = token_create(user=alice, name="fuzz")
    with daphne({**stack_env, "AGENTDESK_API_RATE_LIMIT": "100000"}, run_dir) as web:
        yield f"{web.url}/mcp", token


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), tool=st.sampled_from(sorted(TOOLS)))
def test_property_no_tool_call_fails(mcp, data, tool):
    url, token = mcp
    arguments = data.draw(st.dictionaries(st.sampled_from(TOOLS[tool]), VALUES, max_size=4))
    if tool in ("request_approval", "approval_status"):
        arguments["wait_s"] = 0  # never hold the request open for a decision
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    response = requests.post(
        url,
        json=body,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
        },
        timeout=30,
    )
    assert response.status_code < 500, (tool, arguments, response.text[:500])
    answer = response.json()
    assert "result" in answer or "error" in answer, answer
