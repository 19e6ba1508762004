"""Code Mode: programs the model writes, run in Monty subprocesses, with every
host call a durable step (capabilities/codemode/). Real workers, the
sandbox (which counts side effects) and real Monty subprocesses."""

from __future__ import annotations

import json
import re
import time

import pytest

from agents.models import ToolCall
from agents.tools.support import ISSUE_REFUND, LOOKUP_ORDER
from capabilities.codemode import INPUT_SCHEMA, MAX_PROGRAM_CHARS, run_code_tool, stubs
from capabilities.registry import code_profile
from tests.agents.helpers import assert_invariants, wait_turn
from tests.capabilities.conftest import start_session

pytestmark = pytest.mark.django_db(transaction=True)

PROFILE = "support_codemode"


def fenced(code: str, text: str = "Please run this for me.") -> str:
    return f"{text}\n```python\n{code}\n```\n"


def ticket_session(sandbox, name: str, body: str):
    ticket = sandbox.ticket(email="alice.martin@example.com", subject=name, body=body)
    return start_session(f"ticket:{ticket['id']}", PROFILE, body)


def run_code_call(session) -> ToolCall:
    return ToolCall.objects.filter(session=session, name="run_code").order_by("id").first()


# --- Stubs and the prompt: no process needed -------------------------------------------


def test_a_tool_schema_becomes_a_typed_python_signature():
    refund = stubs.function_for(ISSUE_REFUND)
    assert refund.signature() == (
        "def issue_refund(order_id: str, amount_cents: int, *, reason: str | None = None) -> Any"
    )
    assert refund.arguments(("ORD-1", 5), {}) == {"order_id": "ORD-1", "amount_cents": 5}
    with pytest.raises(TypeError, match="unexpected keyword argument 'amount'"):
        refund.arguments(("ORD-1",), {"amount": 5})
    assert stubs.annotation({"enum": ["a", "b"]}) == "Literal['a', 'b']"
    assert stubs.annotation({"type": "array", "items": {"type": "integer"}}) == "list[int]"
    assert stubs.annotation({"type": ["string", "null"]}) == "str | None"


def test_the_model_sees_one_tool_and_a_one_line_listing():
    profile = code_profile(PROFILE)
    assert [t.name for t in profile.tools] == ["run_code"]
    assert "- lookup_order: Look up an order by id (ORD-1234): items, total, status, refunds." in (
        profile.system
    )
    assert '"properties"' not in profile.system  # names and one line each, not schemas
    assert INPUT_SCHEMA["properties"]["code"]["maxLength"] == MAX_PROGRAM_CHARS
    problem = profile.tools[0].validate({"code": "x = 1\n" * 200_000})  # a program of 1.2 MB
    assert problem and "too long" in problem


def test_describe_gives_the_full_signature_on_demand(sandbox, settings):
    tool = run_code_tool(code_profile("support_triage"))
    from agents.tools.base import ToolContext

    out = tool.run(
        ToolContext("ticket:1", "ticket:1:toolu_d", 1), {"code": "describe('lookup_order')"}
    )
    assert json.loads(out.content)["value"] == stubs.function_for(LOOKUP_ORDER).stub()


# --- End to end: the sandbox's model, a worker, Monty ----------------------------------

HOSTILE = {
    "loop": ("while True:\n    pass", "TimeoutError"),
    "allocation": ("x = 'a' * (10 ** 10)", "MemoryError"),
    "recursion": ("def f(n):\n    return f(n + 1)\nf(0)", "RecursionError"),
    # Caught by the type check before anything runs:
    "import_os": ("import os\nos.system('ls')", "Module `os` has no member `system`"),
    "open": ("open('/etc/passwd').read()", "Name `open` used when not defined"),
    "dunder_import": ("__import__('os')", "Name `__import__` used when not defined"),
    # ... or at run time, inside the interpreter:
    "eval": ("eval(\"__import__('os')\")", "is not defined"),
    # Cut at the printed-bytes cap, or (on a loaded machine) at the time limit.
    "print_10mb": ("print('x' * 10_000_000)", "printed more than|time limit"),
    "host_calls": (
        "for i in range(10):\n    lookup_order(order_id='ORD-1001')",
        "more than 4 host calls",
    ),
    "type_error": ("issue_refund(order_id='ORD-1001', amount_cents='lots')", "type-check"),
}


def test_hostile_programs_end_with_a_clear_error_and_the_session_goes_on(sandbox, workers):
    workers.start(
        AGENTDESK_CODEMODE_INTERPRETER_S="2",
        AGENTDESK_CODEMODE_HOST_CALLS="4",
        AGENTDESK_CODEMODE_PROCESSES="4",
    )
    started = time.monotonic()
    sessions = {
        name: ticket_session(sandbox, name, fenced(code)) for name, (code, _) in HOSTILE.items()
    }
    well = ticket_session(sandbox, "well", fenced("lookup_order(order_id='ORD-1002')['status']"))

    assert wait_turn(well, timeout=60).status == "succeeded"
    assert json.loads(run_code_call(well).output or _result(well))["value"] == "shipped"
    for name, session in sessions.items():
        turn = wait_turn(session, timeout=90)
        assert turn.status == "succeeded", name  # the session goes on: the model read the error
        call = run_code_call(session)
        text = _result(session)
        assert call.is_error and re.search(HOSTILE[name][1], text), (name, text)
        assert_invariants(session)
    assert time.monotonic() - started < 90
    assert sandbox.refunds() == []  # the type error ran nothing
    # The model quoted the error to the customer in a second program.
    replies = ToolCall.objects.filter(session=sessions["loop"], name="run_code").count()
    assert replies == 2


def _result(session) -> str:
    from agents.models import Message

    call = run_code_call(session)
    for row in Message.objects.filter(session=session, role="user").order_by("position"):
        for block in row.content:
            if block.get("type") == "tool_result" and block["tool_use_id"] == call.tool_use_id:
                content = block.get("content")
                if isinstance(content, list):
                    return "\n".join(b.get("text", "") for b in content)
                return str(content)
    return call.output
