"""A test-only tool that gates inside: two inner steps against the sandbox,
the second one gated (as a Code Mode program or a browser submit would be).

- step 1: escalate the ticket (the helpdesk's escalation ignores keys, so the
  sandbox counts every send: a repeated step would show);
- step 2: reply to the customer with the step's own idempotency key; the
  gate is asked with `side_effect=True`, so it waits for a person.

It reads its steps' log on every run, so a re-run after a decision (or after
its worker died) resumes where the log says. Workers load it with
`--include tests.agents.runtime.stepping`; the test process imports it too
(an approver's edit is checked against the profile's tools).
"""

from __future__ import annotations

import json
import time
from typing import Any

from agents.gate import NeedsApproval
from agents.tools import http
from agents.tools.base import Kind, OutcomeUnknown, Tool, ToolContext, ToolError, ToolOutput
from agents.tools.profile import Profile
from capabilities.registry import register_profile

PROFILE = "inner_steps"


def _ticket(ctx: ToolContext, suffix: str) -> str:
    if ctx.ticket_id is None:
        raise ToolError("this session is not about a ticket")
    return http.helpdesk_url(f"/helpdesk/tickets/{ctx.ticket_id}{suffix}")


def escalate_then_reply(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    steps = ctx.steps
    assert steps is not None, "run by the engine"
    done = {s.n: s for s in steps.log()}
    first = done.get(1)
    if first is not None and first.status == "running":
        # Not idempotent, and no check that tells: unknown (the call goes in_doubt).
        raise OutcomeUnknown("the escalation may or may not have been sent")
    if first is None:
        reason = {"reason": args["note"]}
        steps.begin(1, "escalate", reason, tool_kind=Kind.NOT_IDEMPOTENT)
        body = http.call("POST", _ticket(ctx, "/escalations"), json=reason, timeout_s=5)
        steps.end(1, status="succeeded", output=json.dumps(body), snapshot=b"escalated")
        time.sleep(float(args.get("pause_s", 0)))  # a window to kill the worker in
    return _reply(ctx, done.get(2), {"body": args["reply"]})


def _reply(ctx: ToolContext, second, reply: dict[str, Any]) -> ToolOutput:
    steps = ctx.steps
    assert steps is not None
    if second is None:
        verdict = steps.gate(
            "send_reply", reply, tool_kind=Kind.IDEMPOTENT_BY_KEY, side_effect=True
        )
        if verdict.refused:
            return ToolOutput(f"Refused: {verdict.detail}", is_error=True)
        if verdict.waits:
            raise NeedsApproval(
                step=2,
                name="send_reply",
                arguments=reply,
                verdict=verdict,
                preview={"done": ["escalate"], "next": reply},
            )
    elif second.status in ("denied", "canceled"):
        return ToolOutput(f"Escalated; the reply was not sent: {second.reason}", is_error=True)
    elif second.status == "succeeded":
        return ToolOutput(f"Escalated and replied: {second.output}")
    else:  # approved (maybe edited), or left running: idempotent by key, send again
        reply = second.input
    key = steps.begin(2, "send_reply", reply, tool_kind=Kind.IDEMPOTENT_BY_KEY)
    body = http.call(
        "POST",
        _ticket(ctx, "/replies"),
        json=reply,
        headers={"Idempotency-Key": key},
        timeout_s=5,
    )
    steps.end(2, status="succeeded", output=json.dumps(body))
    return ToolOutput(f"Escalated and replied: {json.dumps(body)}")


ESCALATE_THEN_REPLY = Tool(
    name="escalate_then_reply",
    description="Escalate the ticket, then reply to the customer (the reply is reviewed).",
    input_schema={
        "type": "object",
        "properties": {
            "note": {"type": "string"},
            "reply": {"type": "string"},
            "pause_s": {"type": "number"},
        },
        "required": ["note", "reply"],
    },
    kind=Kind.NOT_IDEMPOTENT,
    run=escalate_then_reply,
    timeout_s=20.0,
    gated_inside=True,
)

register_profile(Profile(PROFILE, "Test profile: a tool with inner steps.", (ESCALATE_THEN_REPLY,)))
