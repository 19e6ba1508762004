"""Summarization requests: the memory snapshots Agentdesk asks for.

Kept apart from the triage policy: a request whose system prompt opens with
SUMMARY_MARKER (agents/runtime/memory.py::SUMMARY_SYSTEM) and offers no
tools is answered with a deterministic summary of the text it carries:
the customers, orders and amounts it mentions, the tools the agent called
(counted, merged with the previous summary's counts), how many requests
were summarized and the last one. Same input, same summary.

`[[sandbox:slow_summary]]` anywhere in the summarized text streams the
summary in >= 20 chunks 150 ms apart (to kill a worker mid-summary).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from sandbox.messages.rules import AMOUNT_RE, EMAIL_RE, ORDER_RE

SUMMARY_MARKER = "You maintain the memory of a customer-support agent."
SLOW_DIRECTIVE = "[[sandbox:slow_summary]]"
CALLED_RE = re.compile(r"^Agent called tool (\w+) with ", re.M)
PREVIOUS_ACTIONS_RE = re.compile(r"(\w+) x(\d+)")
PREVIOUS_REQUESTS_RE = re.compile(r"^Requests summarized: (\d+)", re.M)
USER_RE = re.compile(r"^User: (.*)$", re.M)
PREVIOUS_RE = re.compile(r"<previous_summary>\n(.*?)\n</previous_summary>", re.S)


def _system_text(system: Any) -> str:
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return system if isinstance(system, str) else ""


def _user_text(body: dict[str, Any]) -> str:
    parts = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(b.get("text", "")) for b in content if isinstance(b, dict)]
    return "\n".join(parts)


def is_summary_request(body: dict[str, Any]) -> bool:
    return not body.get("tools") and _system_text(body.get("system")).startswith(SUMMARY_MARKER)


def wants_slow(body: dict[str, Any]) -> bool:
    return SLOW_DIRECTIVE in _user_text(body)


def summarize(body: dict[str, Any]) -> str:
    text = _user_text(body)
    previous_match = PREVIOUS_RE.search(text)
    previous = previous_match.group(1) if previous_match else ""
    fresh = text[previous_match.end() :] if previous_match else text
    actions: Counter[str] = Counter()
    actions_line = next((ln for ln in previous.splitlines() if ln.startswith("Actions:")), "")
    for name, count in PREVIOUS_ACTIONS_RE.findall(actions_line):
        actions[name] += int(count)
    actions.update(CALLED_RE.findall(fresh))
    requests = USER_RE.findall(fresh)
    earlier = PREVIOUS_REQUESTS_RE.search(previous)
    total = len(requests) + (int(earlier.group(1)) if earlier else 0)
    emails = sorted(set(EMAIL_RE.findall(text)))
    orders = sorted(set(ORDER_RE.findall(text)))
    amounts = sorted({m.group(0).replace(" ", "") for m in AMOUNT_RE.finditer(text)})
    last = requests[-1] if requests else ""
    if not last and previous:
        last_line = next((ln for ln in previous.splitlines() if ln.startswith("Last request:")), "")
        last = last_line.removeprefix("Last request: ")
    lines = [
        f"Requests summarized: {total}",
        f"Customers: {', '.join(emails) or 'none named'}",
        f"Orders: {', '.join(orders) or 'none named'}",
        f"Amounts: {', '.join(amounts[:10]) or 'none'}",
        "Actions: " + (", ".join(f"{n} x{c}" for n, c in sorted(actions.items())) or "none"),
        f"Last request: {last[:300]}",
    ]
    return "\n".join(lines)
