"""Reading a Messages-API request the way the triage policy needs it.

The model is stateless: everything it knows comes from `messages`, `tools`
and `system`. A *turn* starts at the last user message carrying text; the
tool_use / tool_result pairs after it are the turn's progress so far.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from sandbox.messages import thinking

DIRECTIVE_RE = re.compile(r"\[\[sandbox:(\w+)\]\]")
# How Agentdesk asks a model to go on after a reply cut short (its
# agents/runtime/memory.py GO_ON_PROMPT): read as "go on", not as a new turn.
GO_ON_RE = re.compile(r"^\(Your reply was cut off before it was finished\.")
# Models that refuse a request ending with an assistant message (prefill),
# as Claude 4.6 and later do.
NO_PREFILL_RE = re.compile(r"^claude-[a-z]+-(?:4-[6-9]|[5-9])\b")


class TranscriptError(ValueError):
    """The request breaks a Messages-API rule; answered with a 400 like the real API."""


@dataclass
class ToolCall:
    id: str
    name: str
    input: Any
    result: str | None = None
    is_error: bool = False

    def result_json(self) -> dict[str, Any] | None:
        """The tool result as a JSON object, if it is one (or embeds one)."""
        if self.result is None or self.is_error:
            return None
        for candidate in (
            self.result,
            self.result[self.result.find("{") : self.result.rfind("}") + 1],
        ):
            try:
                value = json.loads(candidate)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
        return None


@dataclass
class Turn:
    text: str
    system: str = ""
    tools: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    # The request ends with an assistant message: the client asks the model
    # to go on from it (after a reply cut at max_tokens, or a pause_turn).
    continues: bool = False

    @property
    def directives(self) -> list[str]:
        return DIRECTIVE_RE.findall(self.text)

    def offers(self, tool: str) -> bool:
        return tool in self.tools


def parse_turn(body: dict[str, Any]) -> Turn:
    messages = _merge_consecutive(body["messages"])
    _check_tool_pairs(messages)
    prefill = bool(messages) and messages[-1]["role"] == "assistant"
    if prefill and NO_PREFILL_RE.match(str(body.get("model", ""))):
        raise TranscriptError(
            "This model does not support assistant message prefill. "
            "The conversation must end with a user message."
        )
    start = _turn_start(messages)
    text = _text_of(messages[start]["content"]) if start is not None else ""
    after = messages[start + 1 :] if start is not None else messages
    return Turn(
        text=text,
        system=_system_text(body.get("system")),
        tools=[t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)],
        calls=_calls(after),
        continues=prefill or (bool(messages) and _asks_to_go_on(messages[-1])),
    )


def _asks_to_go_on(message: dict[str, Any]) -> bool:
    return message["role"] == "user" and bool(GO_ON_RE.match(_text_of(message["content"])))


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    raise TranscriptError("message content must be a string or a list of content blocks")


def _merge_consecutive(messages: list[Any]) -> list[dict[str, Any]]:
    """Consecutive messages with the same role count as one, as in the real API."""
    merged: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise TranscriptError(f"messages.{index}: role must be 'user' or 'assistant'")
        blocks = _blocks(message.get("content"))
        if not blocks and not (index == len(messages) - 1 and message["role"] == "assistant"):
            raise TranscriptError(
                f"messages.{index}: all messages must have non-empty content "
                "except for the optional final assistant message"
            )
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1]["content"] = merged[-1]["content"] + blocks
        else:
            merged.append({"role": message["role"], "content": blocks})
    return merged


def _ids(message: dict[str, Any], block_type: str, id_key: str) -> set[str]:
    return {b.get(id_key, "") for b in message["content"] if b.get("type") == block_type}


def _check_tool_pairs(messages: list[dict[str, Any]]) -> None:
    """Every tool_use is answered in the next message, every tool_result answers
    one; and every thinking block sent back is the one the model signed."""
    for index, message in enumerate(messages):
        if message["role"] == "assistant":
            if problem := thinking.problem(index, message):
                raise TranscriptError(problem)
            uses = _ids(message, "tool_use", "id")
            answered = (
                _ids(messages[index + 1], "tool_result", "tool_use_id")
                if index + 1 < len(messages)
                else set()
            )
            missing = uses - answered
            if missing and index + 1 < len(messages):
                raise TranscriptError(
                    f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(sorted(missing))}. Each `tool_use` block must have a corresponding "
                    "`tool_result` block in the next message."
                )
        else:
            results = _ids(message, "tool_result", "tool_use_id")
            previous = _ids(messages[index - 1], "tool_use", "id") if index > 0 else set()
            unexpected = results - previous
            if unexpected:
                raise TranscriptError(
                    f"messages.{index}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{', '.join(sorted(unexpected))}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )


def _text_of(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text").strip()


def _turn_start(messages: list[dict[str, Any]]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message["role"] == "user" and _text_of(message["content"]):
            if not _asks_to_go_on(message):
                return index
    return None


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return ""


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _calls(messages: list[dict[str, Any]]) -> list[ToolCall]:
    calls: dict[str, ToolCall] = {}
    for message in messages:
        for block in message["content"]:
            if message["role"] == "assistant" and block.get("type") == "tool_use":
                calls[block.get("id", "")] = ToolCall(
                    block.get("id", ""), block.get("name", ""), block.get("input")
                )
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in calls:
                call = calls[block["tool_use_id"]]
                call.result = _result_text(block.get("content"))
                call.is_error = bool(block.get("is_error"))
    return list(calls.values())


class Progress:
    """What this turn has done so far, with the directive probe (if any) left out."""

    def __init__(self, calls: list[ToolCall]) -> None:
        self.calls = calls

    def done(self, name: str) -> bool:
        return any(c.name == name for c in self.calls)

    def last(self, name: str) -> ToolCall | None:
        return next((c for c in reversed(self.calls) if c.name == name), None)

    def json(self, name: str) -> dict[str, Any] | None:
        call = self.last(name)
        return call.result_json() if call else None

    def order(self) -> dict[str, Any] | None:
        order = self.json("lookup_order")
        return order if order and isinstance(order.get("total_cents"), int) else None
