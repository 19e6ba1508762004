"""A tool call runs on a thread of its own and is cut at its deadline
(agents/runtime/tooling.py): a hung call is an unknown outcome, its late
result is logged and dropped, and the calls around it are not held up."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from agents.runtime import tooling
from agents.tools.base import Kind, Tool, ToolContext, ToolError, ToolOutput


def _tool(run, kind=Kind.NOT_IDEMPOTENT, timeout_s=0.2) -> Tool:
    schema = {"type": "object"}
    return Tool("probe", "a test tool", schema, kind, run, timeout_s=timeout_s)


def _ctx() -> ToolContext:
    return ToolContext("ticket:1", "ticket:1:toolu_1", 1)


def test_a_call_returns_its_result_from_its_own_thread():
    seen = []

    def run(ctx, args):
        seen.append(threading.current_thread().name)
        return ToolOutput(content=f"hello {args['who']}", external_id="x1")

    outcome = tooling.execute(_tool(run), _ctx(), {"who": "alice"})
    assert (outcome.status, outcome.content, outcome.external_id) == (
        "succeeded",
        "hello alice",
        "x1",
    )
    assert seen[0].startswith("tool-call") and seen[0] != threading.current_thread().name


def test_a_tool_that_raises_fails_the_call_the_model_reads_why():
    def run(ctx, args):
        raise ToolError("order not found")

    outcome = tooling.execute(_tool(run), _ctx(), {})
    assert (outcome.status, outcome.is_error) == ("failed", True)
    assert "order not found" in outcome.content


def test_a_hung_call_is_cut_at_its_deadline_and_its_late_result_logged(monkeypatch, caplog):
    monkeypatch.setattr(tooling, "GRACE_S", 0.0)
    release = threading.Event()

    def run(ctx, args):
        release.wait(10)
        return ToolOutput(content="too late")

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agents.runtime.tooling"):
        outcome = tooling.execute(_tool(run, timeout_s=0.2), _ctx(), {})
        assert time.monotonic() - started < 5
        assert outcome.status == "in_doubt"  # not idempotent: never sent again
        assert "cut by the engine" in outcome.content
        release.set()
        deadline = time.monotonic() + 5
        while "finished after the engine cut it" not in caplog.text:
            assert time.monotonic() < deadline, "the late result was not logged"
            time.sleep(0.01)
    assert "probe finished after the engine cut it (succeeded)" in caplog.text


def test_many_calls_at_once_each_get_a_thread():
    """20 calls that each wait for all the others: they only all finish if
    none waits for another's thread."""
    barrier = threading.Barrier(20, timeout=5)

    def run(ctx, args):
        barrier.wait()
        return ToolOutput(content="ok")

    tool = _tool(run, kind=Kind.READ_ONLY, timeout_s=5)
    with ThreadPoolExecutor(20) as slots:
        outcomes = list(slots.map(lambda _: tooling.execute(tool, _ctx(), {}), range(20)))
    assert [o.status for o in outcomes] == ["succeeded"] * 20
