"""MCP takes REST's budget (issue 27, case 4 and 7): a token's writes are
rate-limited in the same window as REST's, text follows REST's rules
(NUL refused, long keys refused and never cut, 100,000 characters at most),
and every refusal is audited. Against a real Daphne."""

from __future__ import annotations

import pytest

from agents.models import Session
from api.models import ApiAudit
from api.tokens import token_create
from approvals.models import Approval
from tests.api import mcp_client
from tests.dashboard.conftest import daphne

pytestmark = pytest.mark.django_db(transaction=True)


def _ask(n: int) -> tuple[str, dict]:
    return (
        "request_approval",
        {"tool_name": "refund", "arguments": {"n": n}, "reason": "why", "wait_s": 0},
    )


def test_mcp_writes_are_rate_limited_and_refused_inputs_are_audited(stack_env, run_dir, alice):
    env = {**stack_env, "AGENTDESK_API_RATE_LIMIT": "3", "AGENTDESK_API_RATE_WINDOW_S": "60"}
    _, token = token_create(user=alice, name="agent")
    long_key = "k" * 201
    with daphne(env, run_dir) as web:
        url = f"{web.url}/mcp"
        refused = mcp_client.call(
            url,
            token,
            ("post_message", {"session_key": "ticket:1", "text": "a\x00b"}),
            ("post_message", {"session_key": long_key, "text": "hello"}),
            ("post_message", {"session_key": "ticket:1", "text": "x" * 100_001}),
            ("session_status", {"session_key": long_key}),
            (
                "request_approval",
                {"tool_name": "refund", "arguments": {"k\x00": 1}, "reason": "r", "wait_s": 0},
            ),
            (
                "request_approval",
                {"tool_name": "refund", "arguments": {}, "reason": "r", "session_key": long_key},
            ),
        )
        asked = mcp_client.call(url, token, *[_ask(n) for n in range(5)])
    assert all("error" in r for r in refused), refused
    assert "NUL" in refused[0]["error"] and "at most 200" in refused[1]["error"]
    assert "at most 100,000" in refused[2]["error"]
    assert not Session.objects.filter(key__startswith="k" * 200).exists()  # not cut
    assert [("error" in r) for r in asked] == [False, False, False, True, True]
    assert "too many writes" in asked[3]["error"]
    assert Approval.objects.count() == 3
    audited = list(
        ApiAudit.objects.filter(via="mcp", user=alice).order_by("id").values_list("path", "status")
    )
    assert audited == [
        ("mcp:post_message", 400),
        ("mcp:post_message", 400),
        ("mcp:post_message", 400),
        ("mcp:session_status", 400),
        ("mcp:request_approval", 400),
        ("mcp:request_approval", 400),
        *[("mcp:request_approval", 200)] * 3,
        *[("mcp:request_approval", 429)] * 2,
    ]
