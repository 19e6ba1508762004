"""Memory: a long transcript is summarized, and model calls read the summary
plus the recent rows instead of everything.

When the rows a model call would read (the latest summary plus the rows
after it) pass AGENTDESK_MEMORY_TRIGGER_TOKENS (estimated as JSON characters
/ 4: no tokenizer on the hot path), the engine first makes one summarization
call through the same model client (its own step: a crash costs at most
that call) and records a MemorySnapshot of the rows before a cut. Later
calls send the summary as an addendum to the system prompt, then the rows
from the cut on. The full transcript stays: the desk and the history read
every row; only what the model reads shrinks.

The cut is always at the start of a turn (a user row with text): no tool_use
is separated from its tool_result, the request still opens with a user
message, and the current turn is read whole (its per-tool budgets count its
calls from the transcript). A single turn larger than the trigger is
therefore not compacted inside itself; the turn budgets bound it.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from agents.llm.base import ModelRequest
from agents.runtime.state import Claimed
from agents.tools.profile import Profile

# The sandbox's Messages-API stand-in recognizes a summarization request by
# this first line (sandbox/messages/memory.py); keep the two in step.
SUMMARY_SYSTEM = (
    "You maintain the memory of a customer-support agent.\n"
    "Merge the previous summary (if any) and the conversation below into one compact "
    "summary the agent will read instead of that conversation. Keep what the agent needs "
    "to carry on: who the customer is, order and ticket ids, amounts, every action already "
    "taken (refunds, replies, notes, escalations) with its outcome, promises made and open "
    "questions. At most 200 words. Reply with the summary only."
)
RESULT_CHARS = 2000  # of one tool result, in the text the summarizer reads


def _row_chars(row: dict[str, Any]) -> int:
    # As the request will spell it (json's default separators), plus the
    # message wrapper: an estimate on the high side rather than the low.
    return len(json.dumps(row["content"])) + 32


def context_tokens(claimed: Claimed) -> int:
    """Estimated tokens of what the next model call reads from the session
    (summary + rows in memory). Counted incrementally: each row once."""
    rows = claimed.transcript
    if claimed.chars_counted > len(rows):  # rows were dropped: count afresh
        claimed.transcript_chars = claimed.chars_counted = 0
    for row in rows[claimed.chars_counted :]:
        claimed.transcript_chars += _row_chars(row)
    claimed.chars_counted = len(rows)
    return (claimed.transcript_chars + len(claimed.memory_summary)) // 4


def due(claimed: Claimed) -> int | None:
    """The position to summarize up to, when a snapshot is due; else None."""
    trigger = settings.AGENTDESK_MEMORY_TRIGGER_TOKENS
    if not trigger or context_tokens(claimed) < trigger:
        return None
    return choose_cut(claimed.transcript, claimed.transcript_base)


def _is_turn_start(row: dict[str, Any]) -> bool:
    return row["role"] == "user" and any(b.get("type") == "text" for b in row["content"])


def choose_cut(rows: list[dict[str, Any]], base: int) -> int | None:
    """The earliest turn start after which at most KEEP tokens remain, else
    the latest turn start; never the first row in memory (nothing to
    summarize). An absolute position, or None when no cut is possible."""
    keep_chars = settings.AGENTDESK_MEMORY_KEEP_TOKENS * 4
    starts = [i for i in range(1, len(rows)) if _is_turn_start(rows[i])]
    start_set = set(starts)
    if not starts:
        return None
    tail = 0
    fits = None
    for i in range(len(rows) - 1, starts[0] - 1, -1):
        tail += _row_chars(rows[i])
        if tail > keep_chars:
            break
        if i in start_set:
            fits = i
    return base + (fits if fits is not None else starts[-1])


def summary_request(claimed: Claimed, upto: int) -> ModelRequest:
    """The summarization call: the previous summary and the rows from the
    current base up to `upto`, as plain text."""
    rows = claimed.transcript[: upto - claimed.transcript_base]
    parts = []
    if claimed.memory_summary:
        parts.append(f"<previous_summary>\n{claimed.memory_summary}\n</previous_summary>")
    lines = "\n".join(_render(row) for row in rows)
    parts.append(
        f'<conversation from="{claimed.transcript_base}" to="{upto}">\n{lines}\n</conversation>'
    )
    return ModelRequest(
        system=SUMMARY_SYSTEM,
        tools=[],
        messages=[{"role": "user", "content": [{"type": "text", "text": "\n\n".join(parts)}]}],
        max_tokens=settings.AGENTDESK_MEMORY_MAX_TOKENS,
    )


def _render(row: dict[str, Any]) -> str:
    out = []
    for block in row["content"]:
        kind = block.get("type")
        if kind == "text":
            who = "Agent" if row["role"] == "assistant" else "User"
            out.append(f"{who}: {block.get('text', '')}")
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input"), ensure_ascii=False)
            out.append(f"Agent called tool {block.get('name')} with {arguments}")
        elif kind == "tool_result":
            content = block.get("content")
            if not isinstance(content, str):
                content = json.dumps(content, ensure_ascii=False)
            error = " (error)" if block.get("is_error") else ""
            out.append(f"Tool result{error}: {content[:RESULT_CHARS]}")
    return "\n".join(out)


def remember(claimed: Claimed, upto: int, summary: str) -> None:
    """After the snapshot commits: drop the summarized rows from memory."""
    claimed.transcript = claimed.transcript[upto - claimed.transcript_base :]
    claimed.transcript_base = upto
    claimed.memory_summary = summary
    claimed.transcript_chars = claimed.chars_counted = 0


def system_with_memory(system: str, summary: str) -> str:
    """The system prompt with the summary of what the model no longer reads."""
    if not summary:
        return system
    return (
        f"{system}\n\n<conversation_summary>\nEarlier in this session (summarized; the "
        f"messages below continue from here):\n{summary}\n</conversation_summary>"
    )


# --- The next model call's messages and size ----------------------------------------


# After a reply that stopped short of an answer (max_tokens, pause_turn) the
# next call asks the model to go on. Sending the reply back as the last,
# assistant, message ("prefill") did that until Claude 4.6; those models and
# later ones (claude-sonnet-5, the default) answer such a request with a 400.
# Asked in a user message, every model goes on; the request is built from the
# recorded rows, so a replay sends the same words.
GO_ON_PROMPT = "(Your reply was cut off before it was finished. Go on from where it stopped.)"


def build_messages(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Transcript rows to Messages-API messages: consecutive user rows (each
    tool result is its own row) merge into one message, and GO_ON_PROMPT
    follows an assistant row that another assistant row follows or that ends
    the transcript (as the model was asked then, and is now)."""
    messages: list[dict[str, Any]] = []
    for row in transcript:
        if not row["content"]:  # a reply cut before anything could be kept
            continue  # (the API refuses an empty message)
        if messages and messages[-1]["role"] == row["role"]:
            if row["role"] == "user":
                messages[-1]["content"] = messages[-1]["content"] + row["content"]
                continue
            messages.append(_go_on())
        messages.append({"role": row["role"], "content": list(row["content"])})
    if messages and messages[-1]["role"] == "assistant":
        messages.append(_go_on())
    return messages


def _go_on() -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": GO_ON_PROMPT}]}


def next_input_tokens(claimed: Claimed, profile: Profile) -> int:
    """The next call's input, estimated (characters / 4) without building it."""
    return context_tokens(claimed) + _profile_tokens(profile)


# id(profile) -> (profile, its system prompt and tool schemas in tokens): the
# same for every step of every turn; a JSON dump of the schemas per step was
# measurable on the hot path. The profile is kept so that its id stays unique.
_PROFILE_TOKENS: dict[int, tuple[Profile, int]] = {}


def _profile_tokens(profile: Profile) -> int:
    cached = _PROFILE_TOKENS.get(id(profile))
    if cached is not None and cached[0] is profile:
        return cached[1]
    schemas = json.dumps([t.schema_for_model() for t in profile.tools])
    tokens = (len(profile.system) + len(schemas)) // 4
    if len(_PROFILE_TOKENS) > 256:  # profiles reloaded from the database: start over
        _PROFILE_TOKENS.clear()
    _PROFILE_TOKENS[id(profile)] = (profile, tokens)
    return tokens
