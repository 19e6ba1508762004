"""A scripted mode of the Messages-API stand-in, for tools the triage policy
does not know (MCP tools, sub-agents, tools outside a profile).

A turn whose text holds `[[call:NAME {json input}]]` directives calls those
tools one per response, in order, whether or not the request offers them (a
model may ask for a tool it was not given: that is what least privilege is
for), then ends the turn with a text naming the last result:
"Finished. Last result: ...". The input may itself contain directives (a
sub-agent's task), which belong to that string, not to this turn.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sandbox.messages.transcript import Turn

CALL_RE = re.compile(r"\[\[call:([A-Za-z0-9_-]{1,64})\s*")


def script(text: str) -> list[tuple[str, dict[str, Any]]]:
    steps: list[tuple[str, dict[str, Any]]] = []
    decoder = json.JSONDecoder()
    position = 0
    while match := CALL_RE.search(text, position):
        name, position = match.group(1), match.end()
        arguments: dict[str, Any] = {}
        if text.startswith("{", position):
            try:
                arguments, position = decoder.raw_decode(text, position)
            except ValueError:
                arguments = {}
        steps.append((name, arguments))
        end = text.find("]]", position)
        position = end + 2 if end >= 0 else len(text)
    return steps


def decide(turn: Turn):
    """The scripted reply for this turn, or None when the turn has no script."""
    from sandbox.messages.policy import Reply, ToolUse

    steps = script(turn.text)
    if not steps:
        return None
    done = len(turn.calls)
    if done < len(steps):
        name, arguments = steps[done]
        return Reply(f"Step {done + 1}: calling {name}.", ToolUse(name, arguments))
    last = turn.calls[-1] if turn.calls else None
    if last is None:
        return Reply("Finished.")
    return Reply(f"Finished. Last result: {(last.result or '').strip()[:2000]}")
