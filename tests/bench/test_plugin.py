"""The fake model finds its run, step and S in the request alone (durable data)."""

from __future__ import annotations

import pytest

from agents.llm.base import ModelRequest
from agents.runtime.engine import build_messages
from bench import plugin, workload
from capabilities.profiles import get_profile

# get_profile reads the capabilities tables (a profile may be edited there).
pytestmark = pytest.mark.django_db


class NoAbort:
    def is_set(self) -> bool:
        return False

    def on_abort(self, callback) -> None:
        pass


def transcript_rows(run_index: int, max_steps: int, upto: int) -> list[dict]:
    """Transcript rows as the runtime stores them after `upto` steps."""
    messages = workload.run_in_memory(run_index, max_steps)[: 2 * upto + 1]
    rows = [{"role": "user", "content": [{"type": "text", "text": messages[0]["content"]}]}]
    rows += [{"role": m["role"], "content": m["content"]} for m in messages[1:]]
    return rows


def test_fake_model_answers_step_k_of_run_i():
    profile = get_profile(plugin.profile_name(10))
    for upto in (0, 3, 9):
        request = ModelRequest(
            system=profile.system,
            tools=[t.schema_for_model() for t in profile.tools],
            messages=build_messages(transcript_rows(42, 10, upto)),
            max_tokens=1024,
        )
        seen: list[str] = []
        reply = plugin.FakeModel().complete(request, on_text=seen.append, abort=NoAbort())
        expected = workload.fake_model(42, upto + 1, 10)
        assert reply.content == expected["content"]
        assert reply.stop_reason == expected["stop_reason"]
        assert reply.input_tokens == expected["usage"]["input_tokens"]


def test_fake_tools_take_the_runtime_key_and_accept_the_model_input():
    from agents.tools.base import ToolContext

    reply = workload.fake_model(7, 3, 10)
    use = workload.tool_use_of(reply)
    tool = get_profile(plugin.profile_name(10)).tool(use["name"])
    assert tool.validate(use["input"]) is None
    key = f"run-10-000007:{use['id']}"
    output = tool.run(ToolContext("run-10-000007", key, 1), use["input"])
    assert output.content == workload.FakeTools()(use["name"], use["input"], use["id"], key)
    assert plugin.TOOLS.executions[key] == 1
