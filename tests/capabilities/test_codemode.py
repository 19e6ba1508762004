"""Code Mode: programs the model writes, run in Monty subprocesses, with every
host call a durable step (capabilities/codemode/). Real workers, the
sandbox (which counts side effects) and real Monty subprocesses."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest

from agents.models import ToolCall
from capabilities.codemode import INPUT_SCHEMA, MAX_PROGRAM_CHARS, run_code_tool, stubs
from capabilities.connectors import ISSUE_REFUND, LOOKUP_ORDER
from capabilities.registry import code_profile
from tests.agents.helpers import assert_invariants, wait_turn
from tests.capabilities.conftest import make_profile, start_session
from tests.processes import wait_for

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


def test_the_desk_highlights_a_program_escaped():
    from dashboard.templatetags.program import python_highlight

    shown = python_highlight("if x:\n    print('<script>')  # done\n")
    assert '<span class="py-kw">if</span>' in shown
    assert '<span class="py-str">&#x27;&lt;script&gt;&#x27;</span>' in shown
    assert "<script>" not in shown
    assert python_highlight('"""open <b>') == "&quot;&quot;&quot;open &lt;b&gt;"


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


OVER_BUDGET = """statuses = []
for order_id in ['ORD-1001', 'ORD-1002', 'ORD-1013']:
    try:
        statuses.append(lookup_order(order_id=order_id)['status'])
    except PermissionError as refused:
        statuses.append(str(refused)[19:41])
statuses"""


def test_hostile_programs_end_with_a_clear_error_and_the_session_goes_on(sandbox, workers):
    make_profile(
        "cm_budget", "run_code", "lookup_order", **{"lookup_order": {"max_calls_per_turn": 2}}
    )
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
    # Host calls count against the profile's per-tool limits (two lookups per turn here).
    ticket = sandbox.ticket(email="alice.martin@example.com", subject="budget", body="budget")
    budget = start_session(f"ticket:{ticket['id']}", "cm_budget", fenced(OVER_BUDGET))

    assert wait_turn(well, timeout=60).status == "succeeded"
    assert json.loads(run_code_call(well).output or _result(well))["value"] == "shipped"
    for name, session in sessions.items():
        turn = wait_turn(session, timeout=90)
        assert turn.status == "succeeded", name  # the session goes on: the model read the error
        call = run_code_call(session)
        text = _result(session)
        assert call.is_error and re.search(HOSTILE[name][1], text), (name, text)
        assert_invariants(session)
    assert wait_turn(budget, timeout=60).status == "succeeded"
    assert program_value(budget) == ["delivered", "shipped", "call budget: at most 2"]
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


# --- The durable execution log: approvals and dead workers -----------------------------

LOOKUPS = """customer = lookup_customer(email='alice.martin@example.com')
statuses = []
for order_id in ['ORD-1001', 'ORD-1002', 'ORD-1013', 'ORD-1014', 'ORD-1003']:
    statuses.append(lookup_order(order_id=order_id)['status'])
"""


def inner(session) -> list[ToolCall]:
    """The host calls of the session's first program (a second one sends the reply)."""
    program = run_code_call(session)
    return list(ToolCall.objects.filter(parent=program).order_by("step")) if program else []


def pending(session):
    from approvals.models import Approval

    return wait_for(
        lambda: Approval.objects.filter(session=session, status="pending").first(),
        timeout=90,
        what="a pending approval",
    )


def program_value(session):
    return json.loads(_result(session))["value"]


def test_a_refund_over_the_limit_pauses_the_program_until_approved_on_the_desk(
    sandbox, workers, alice, bob
):
    from django.test import Client

    first = workers.start("w1")
    code = LOOKUPS + (
        "refund = issue_refund(order_id='ORD-1002', amount_cents=18900, reason='damaged')\n"
        "{'customer': customer['name'], 'statuses': statuses, 'refund': refund['refund_id']}"
    )
    session = ticket_session(sandbox, "approve", fenced(code))

    approval = pending(session)
    steps = inner(session)
    assert [s.name for s in steps] == ["lookup_customer"] + ["lookup_order"] * 5 + ["issue_refund"]
    assert [s.status for s in steps[:6]] == ["succeeded"] * 6
    assert all(s.snapshot for s in steps[:6])  # the program's state with every call
    assert steps[6].status == "waiting_for_approval" and approval.tool_call_id == steps[6].id
    outer = run_code_call(session)
    assert steps[6].idempotency_key == f"{session.key}:{outer.tool_use_id}:7"
    preview = approval.preview
    assert preview["program"] == code + "\n"
    assert [c["name"] for c in preview["calls"]] == [s.name for s in steps[:6]]
    assert '"status": "delivered"' in preview["calls"][1]["output"]
    assert preview["pending"] == {
        "n": 7,
        "name": "issue_refund",
        "arguments": {"order_id": "ORD-1002", "amount_cents": 18900, "reason": "damaged"},
    }
    assert sandbox.refunds() == []
    first.stop()  # another worker's process finishes the program

    workers.start("w2")
    desk = Client()
    desk.force_login(bob)
    page = desk.get(f"/approvals/{approval.id}/")
    assert page.status_code == 200
    assert b"issue_refund" in page.content and b"lookup_customer" in page.content
    response = desk.post(
        f"/approvals/{approval.id}/decide",
        {
            "decision": "approve",
            "expected_hash": approval.arguments_hash,
            "expected_version": approval.version,
        },
    )
    assert response.status_code in (200, 303), response.content[:500]

    assert wait_turn(session, timeout=90).status == "succeeded", workers.logs()
    refunds = sandbox.refunds()
    assert [(r["order_id"], r["amount"], r["key"]) for r in refunds] == [
        ("ORD-1002", 18900, steps[6].idempotency_key)
    ]
    assert [s.attempts for s in inner(session)] == [1] * 7  # nothing ran twice
    value = program_value(session)
    assert value["customer"] == "Alice Martin" and value["refund"] == refunds[0]["id"]
    assert_invariants(session)


def test_a_denied_host_call_raises_inside_the_program_with_the_reason(sandbox, workers, alice, bob):
    from approvals.services import approval_decide

    workers.start()
    code = (
        "try:\n"
        "    issue_refund(order_id='ORD-1002', amount_cents=18900)\n"
        "    outcome = 'refunded'\n"
        "except PermissionError as denied:\n"
        "    outcome = 'not refunded: ' + str(denied)\n"
        "outcome"
    )
    session = ticket_session(sandbox, "deny", fenced(code))
    approval = pending(session)

    approval_decide(approval_id=approval.id, user=bob, decision="deny", reason="Ask for photos.")

    assert wait_turn(session, timeout=60).status == "succeeded", workers.logs()
    assert program_value(session) == "not refunded: Denied by bob: Ask for photos."
    assert sandbox.refunds() == []
    assert [s.status for s in inner(session)] == ["denied"]
    assert_invariants(session)


KILLED = LOOKUPS + (
    "refund = issue_refund(order_id='ORD-1001', amount_cents=1450)\n"
    "{'statuses': statuses, 'refund': refund['refund_id']}"
)


def held(sandbox) -> dict:
    """The test's one hold rule, as the sandbox lists it."""
    return next(f for f in sandbox.get("/_faults")["faults"] if f["kind"] == "hold")


def killed_at_hold(sandbox, workers, **hold):
    """The program's worker, SIGKILLed while the sandbox holds one host call
    (a hold: the call waits at the sandbox until released or its caller is
    gone); then a fresh worker. Returns the session and its steps at the kill."""
    sandbox.fault(kind="hold", **hold)
    victim = workers.start("victim")
    workers.beat()  # the sweeper notices the dead owner
    session = ticket_session(sandbox, "kill", fenced(KILLED))
    wait_for(lambda: held(sandbox)["holding"] == 1, timeout=90, what="a host call held")
    at_kill = inner(session)
    victim.kill(signal.SIGKILL)
    victim.popen.wait(10)
    workers.start("fresh")
    assert wait_turn(session, timeout=90).status == "succeeded", workers.logs()
    return session, at_kill


def ran_once_each(sandbox, steps, twice=()) -> None:
    """By key at the sandbox: every host call reached it once (`twice`: sent
    again with the same key after the kill)."""
    by_key = sandbox.stats()["requests_by_key"]
    assert {s.idempotency_key: by_key.get(s.idempotency_key) for s in steps} == {
        s.idempotency_key: 2 if s.step in twice else 1 for s in steps
    }


def test_a_program_resumes_from_its_snapshot_when_its_worker_dies_between_host_calls(
    sandbox, workers
):
    """Between host calls 3 and 4: call 3's result and call 4 `running` are
    one commit, and call 4 is held at the sandbox before it does anything;
    the worker dies there. The fresh worker resumes from call 3's snapshot:
    calls 1-3 are answered from the log, call 4 (read-only) is sent again
    with its key, and it ran once: its first request never reached the helpdesk."""
    session, at_kill = killed_at_hold(
        sandbox,
        workers,
        target="helpdesk",
        match={"path_prefix": "/helpdesk/orders/ORD-1013", "method": "GET"},
    )
    assert [(s.step, s.status) for s in at_kill] == [
        (1, "succeeded"),
        (2, "succeeded"),
        (3, "succeeded"),
        (4, "running"),
    ]
    assert all(s.snapshot for s in at_kill[:3]) and at_kill[3].snapshot is None
    assert held(sandbox)["abandoned"] == 1  # the kill closed its socket: it never ran

    steps = inner(session)
    assert [s.status for s in steps] == ["succeeded"] * 7
    assert [s.attempts for s in steps] == [1, 1, 1, 2, 1, 1, 1]
    ran_once_each(sandbox, steps)
    refunds = sandbox.refunds()
    assert [(r["order_id"], r["key"]) for r in refunds] == [("ORD-1001", steps[6].idempotency_key)]
    value = program_value(session)  # the answers from the log reached the program
    assert value["statuses"] == [json.loads(s.output)["status"] for s in steps[1:6]]
    assert value["refund"] == refunds[0]["id"]
    assert_invariants(session)


def test_a_program_resumes_from_its_snapshot_when_its_worker_dies_during_a_refund(sandbox, workers):
    """The refund is made at the provider and its answer held: the worker
    dies not knowing it happened. The fresh worker resumes from call 6's
    snapshot and sends the refund again with the same key (it is idempotent
    by key): the provider answers with the first refund; one refund."""
    session, at_kill = killed_at_hold(
        sandbox,
        workers,
        target="payments",
        phase="after_commit",
        match={"path_prefix": "/v1/refunds", "method": "POST"},
    )
    assert [s.status for s in at_kill] == ["succeeded"] * 6 + ["running"]
    assert len(sandbox.refunds()) == 1  # made before the kill

    steps = inner(session)
    assert [s.status for s in steps] == ["succeeded"] * 7
    assert [s.attempts for s in steps] == [1] * 6 + [2]
    ran_once_each(sandbox, steps, twice={7})  # the lookups once; the refund asked twice ...
    refunds = sandbox.refunds()  # ... and made once
    assert [(r["order_id"], r["key"]) for r in refunds] == [("ORD-1001", steps[6].idempotency_key)]
    assert sandbox.stats()["refunds"]["by_idempotency_key"] == {steps[6].idempotency_key: 1}
    assert program_value(session)["refund"] == refunds[0]["id"]
    assert_invariants(session)
