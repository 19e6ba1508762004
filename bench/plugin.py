"""What the benchmark plugs into Agentdesk, through the seams production uses.

- `FakeModel`: a model client (AGENTDESK_MODEL_CLIENT) that answers with the
  workload's `fake_model(i, k, S)`. Everything it needs comes from the
  request, i.e. from durable data: S from the profile's system prompt, the
  run index i from the ticket (the first user message), the step k from the
  number of assistant messages already in the transcript.
- Profiles `bench_triage_<S>` whose three tools call the workload's
  FakeTools in-process; `issue_refund` is IDEMPOTENT_BY_KEY and gets the
  runtime's idempotency key (`<session key>:<tool_use_id>`).
- `Recorder`: the timer hooks of workload.md §4, installed from outside the
  runtime (a wrapper around the model call, a wrapper around the tools, a
  database execute wrapper and commit wrapper). Step k's latency runs from the
  instant the model returned step k to the instant the first commit after
  step k's last I/O (its tool, or for k = S its model call) returned.

Importing this module registers the profiles; Celery workers get it with
`--include bench.plugin`, in-process workers import it.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from agents.llm.base import ModelReply, ModelRequest
from agents.tools.base import Kind, Tool, ToolContext, ToolOutput
from agents.tools.profile import Profile
from bench import workload
from capabilities.registry import register_profile

STEP_COUNTS = (10, 50, 200)
REAL_PROFILE = "bench_real"
_S_RE = re.compile(r"\bS=(\d+)\b")
_TICKET_RE = re.compile(r"^Ticket #(\d+) ")


def profile_name(max_steps: int) -> str:
    return f"bench_triage_{max_steps}"


# --- Timer hooks ---------------------------------------------------------------


class Recorder:
    """Per-process step timings. One session is advanced at a time per process
    (in-process workers run their runs in order; Celery workers use the solo pool)."""

    def __init__(self) -> None:
        self.latencies: list[float] = []  # seconds, one per step
        self.model_s: list[float] = []  # time inside the model client, per call
        self.refund_keys: list[str] = []
        self.run_key = ""
        self.final = False
        self.model_at = 0.0
        self.awaiting = False
        self.installed: set[int] = set()
        self.on_run_end = None  # callable(key, ended, latencies, refund_keys): Celery workers
        self._run_start_index = 0
        self._refund_start = 0

    def model_called(self, run_key: str) -> None:
        if run_key != self.run_key:
            self.run_key = run_key
            self._run_start_index = len(self.latencies)
            self._refund_start = len(self.refund_keys)

    def model_returned(self, started: float, final: bool) -> None:
        self.model_at = time.perf_counter()
        self.model_s.append(self.model_at - started)
        self.final = final
        self.awaiting = final  # a final answer has no tool: its reply's commit ends the step

    def tool_returned(self) -> None:
        self.awaiting = True

    def committed(self) -> None:
        if not self.awaiting:
            return
        now = time.perf_counter()
        self.awaiting = False
        self.latencies.append(now - self.model_at)
        if self.final and self.on_run_end is not None:
            self.on_run_end(
                self.run_key,
                now,
                self.latencies[self._run_start_index :],
                self.refund_keys[self._refund_start :],
            )

    def install(self) -> None:
        """Watch this thread's database connection for commits."""
        from django.db import connection

        if id(connection) in self.installed:
            return
        self.installed.add(id(connection))
        recorder = self

        def on_execute(execute, sql, params, many, context):
            result = execute(sql, params, many, context)
            # Outside atomic() every statement is its own transaction: one that
            # writes has committed when it returns. Pure reads are not commits.
            if not context["connection"].in_atomic_block and not _is_read(sql):
                recorder.committed()
            return result

        connection.execute_wrappers.append(on_execute)
        original_commit = connection.commit

        def commit() -> None:
            original_commit()
            recorder.committed()

        connection.commit = commit


def _is_read(sql: str) -> bool:
    return sql[:32].lstrip()[:6].upper() == "SELECT"  # not a copy of the whole statement


RECORDER = Recorder()
TOOLS = workload.FakeTools()


# --- The fake model ------------------------------------------------------------


def _run_of(request: ModelRequest) -> tuple[int, int, int]:
    """(i, k, S) from durable data only."""
    max_steps = int(_S_RE.search(request.system).group(1))
    first = request.messages[0]["content"]
    text = first if isinstance(first, str) else first[0]["text"]
    run_index = int(_TICKET_RE.match(text).group(1))
    step = 1 + sum(1 for m in request.messages if m["role"] == "assistant")
    return run_index, step, max_steps


class FakeModel:
    """Zero latency, in-process; the same seam as agents.llm.anthropic.AnthropicModel."""

    def complete(self, request: ModelRequest, *, on_text, abort) -> ModelReply:
        started = time.perf_counter()
        run_index, step, max_steps = _run_of(request)
        RECORDER.model_called(workload.run_id(max_steps, run_index))
        message = workload.fake_model(run_index, step, max_steps)
        for block in message["content"]:
            if block["type"] == "text":
                on_text(block["text"])  # arrives in one go, as a fast stream would
        reply = ModelReply(
            content=message["content"],
            stop_reason=message["stop_reason"],
            input_tokens=message["usage"]["input_tokens"],
            output_tokens=message["usage"]["output_tokens"],
            model="bench-fake-triage-v1",
        )
        RECORDER.model_returned(started, final=step >= max_steps)
        return reply


class TimedAnthropicModel:
    """The production client, with the same timer hooks (the real client path row)."""

    def __init__(self) -> None:
        from agents.llm.anthropic import AnthropicModel

        self.inner = AnthropicModel()

    def complete(self, request: ModelRequest, *, on_text, abort) -> ModelReply:
        started = time.perf_counter()
        first = request.messages[0]["content"]
        text = first if isinstance(first, str) else first[0]["text"]
        RECORDER.model_called(f"real-{_TICKET_RE.match(text).group(1)}")
        reply = self.inner.complete(request, on_text=on_text, abort=abort)
        RECORDER.model_returned(started, final=not reply.tool_uses)
        return reply


# --- The fake tools --------------------------------------------------------------


def _runner(name: str):
    def run(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        # ToolContext carries the key, not the tool_use_id; the key is
        # `<session key>:<tool_use_id>` (agents/runtime/engine.py).
        tool_use_id = ctx.idempotency_key[len(ctx.session_key) + 1 :]
        result = TOOLS(name, args, tool_use_id, ctx.idempotency_key)
        external_id = ""
        if name == "issue_refund":
            RECORDER.refund_keys.append(ctx.idempotency_key)
            external_id = json.loads(result)["refund_id"]
        RECORDER.tool_returned()
        return ToolOutput(content=result, external_id=external_id)

    return run


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_ORDER = {"type": "string", "pattern": "^ORD-[0-9-]+$"}
BENCH_TOOLS = (
    Tool(
        name="lookup_customer",
        description="Look up a customer account by email address.",
        input_schema=_schema({"email": {"type": "string", "format": "email"}}, ["email"]),
        kind=Kind.READ_ONLY,
        run=_runner("lookup_customer"),
    ),
    Tool(
        name="lookup_order",
        description="Look up an order by id.",
        input_schema=_schema({"order_id": _ORDER}, ["order_id"]),
        kind=Kind.READ_ONLY,
        run=_runner("lookup_order"),
    ),
    Tool(
        name="issue_refund",
        description="Refund part or all of an order (idempotent by key).",
        input_schema=_schema(
            {
                "order_id": _ORDER,
                "amount_cents": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
                # The sandbox's model adds a reason (the real client path row).
                "reason": {"type": "string", "maxLength": 500},
            },
            ["order_id", "amount_cents"],
        ),
        kind=Kind.IDEMPOTENT_BY_KEY,
        run=_runner("issue_refund"),
    ),
)


def register() -> None:
    for max_steps in STEP_COUNTS:
        system = (
            "You are a support agent. Benchmark: the triage loop of workload.md v1, "
            f"S={max_steps} steps."
        )
        register_profile(Profile(profile_name(max_steps), system, BENCH_TOOLS))
    system = "You are a support agent for an online shop. Triage the ticket."
    register_profile(Profile(REAL_PROFILE, system, BENCH_TOOLS))


register()


# --- Celery workers -----------------------------------------------------------------


def _connect_celery_signals() -> None:
    """In a Celery worker: install the hooks in the task thread and ship each
    run's timings to the harness through Redis when its last step is durable."""
    url = os.environ.get("BENCH_REPORT_REDIS_URL")
    if not url:
        return
    import redis
    from celery.signals import task_prerun

    client = redis.Redis.from_url(url)

    def on_run_end(key, ended, latencies, refund_keys):
        refunds = {k: TOOLS.executions.get(k, 0) for k in refund_keys}
        body = {"key": key, "ended": ended, "latencies": latencies, "refunds": refunds}
        body["model_s"] = sum(RECORDER.model_s[-len(latencies) :])
        client.rpush(f"bench:done:{key}", json.dumps(body))

    RECORDER.on_run_end = on_run_end

    @task_prerun.connect(weak=False)
    def _install(**_kwargs) -> None:
        RECORDER.install()


_connect_celery_signals()
