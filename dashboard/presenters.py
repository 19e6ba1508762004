"""How the desk shows things: untrusted text made visible, events in words,
tokens in dollars, edited arguments as a diff.

Pure functions (no queries); the template filters in templatetags/desk.py
and the views call these.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from agents import budgets

# --- Untrusted text -------------------------------------------------------------------


def _codepoint(ch: str) -> str:
    n = ord(ch)
    return f"\\u{n:04x}" if n <= 0xFFFF else f"\\U{n:08x}"


# Past this many characters a text shows its first part, says its full
# length, and folds the rest into a <details> the reader opens: a browser
# lays out a closed <details>' content only when it is opened, so a
# 600,000-character ticket costs what 5,000 do (it took Chromium 70-90 s to
# lay out unbroken, shown whole). Never silently cut: the rest is there.
FOLD_CHARS = 5000


def visible(text: Any, *, keep_newlines: bool = True) -> SafeString:
    """`_visible(text)`, folded past FOLD_CHARS (see there)."""
    text = "" if text is None else str(text)
    if len(text) <= FOLD_CHARS:
        return _visible(text, keep_newlines=keep_newlines)
    head, rest = text[:FOLD_CHARS], text[FOLD_CHARS:]
    summary = f"Show all {len(text):,} characters ({len(rest):,} more)"
    return mark_safe(  # noqa: S308 (both parts escaped by _visible, the summary is ours)
        f"{_visible(head, keep_newlines=keep_newlines)}"
        f'<details class="fold" data-length="{len(text)}"><summary>{summary}</summary>'
        f"{_visible(rest, keep_newlines=keep_newlines)}</details>"
    )


def _visible(text: str, *, keep_newlines: bool = True) -> SafeString:
    """Escape `text` and show every invisible character as its code point.

    An approver must see exactly what will run: a right-to-left override, a
    zero-width space or a stray escape code must not hide inside an amount or
    an address. `str.isprintable()` is False for exactly those (control,
    format, separator and private-use characters, and spaces other than
    U+0020); each becomes a marked `\\uXXXX`. Newlines and tabs stay as they
    are in free text (shown with white-space: pre-wrap).
    """
    plain = text.replace("\n", "").replace("\t", "") if keep_newlines else text
    if plain.isprintable():  # the common case, without a loop in Python
        return escape(text)
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch.isprintable() or (keep_newlines and ch in "\n\t"):
            continue
        out.append(escape(text[start:i]))
        out.append(f'<span class="ctl" title="invisible character">{_codepoint(ch)}</span>')
        start = i + 1
    out.append(escape(text[start:]))
    return mark_safe("".join(out))  # noqa: S308 (every piece above is escaped)


def pretty_json(value: Any) -> str:
    """JSON as it will be sent, indented; nothing elided. Control characters
    inside strings come out as JSON escapes (`\\n`, `\\u0000`)."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def visible_json(value: Any) -> SafeString:
    return visible(pretty_json(value), keep_newlines=True)


def _json_escape(ch: str) -> str:
    n = ord(ch)
    if n <= 0xFFFF:
        return f"\\u{n:04x}"
    n -= 0x10000  # outside the BMP: a UTF-16 surrogate pair, as JSON spells it
    return f"\\u{0xD800 + (n >> 10):04x}\\u{0xDC00 + (n & 0x3FF):04x}"


def editable_json(value: Any) -> str:
    """JSON for an approver to edit: the same value, with every invisible
    character written as a JSON escape, so nothing hides in the text box.
    (Outside strings JSON has only spaces and newlines, so every other
    invisible character is inside a string, where an escape means the same.)"""
    text = pretty_json(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == "\n" else _json_escape(ch) for ch in text)


# --- Events in words ----------------------------------------------------------------------


def _calls(data: dict[str, Any]) -> str:
    calls = data.get("tool_calls") or []  # names; older events: {"name": ...} each
    names = [c.get("name", "?") if isinstance(c, dict) else str(c) for c in calls]
    return f"; asks for {', '.join(names)}" if names else ""


def event_summary(kind: str, data: dict[str, Any] | None) -> str:
    """One line about an event, for the activity list and the history."""
    d = data or {}
    n = d.get("number", "")
    if kind == "turn.accepted":
        queued = ", queued behind the running turn" if d.get("queued") else ""
        return f"Turn {n} accepted ({d.get('trigger', '')}){queued}"
    if kind in ("turn.failed",):
        return f"Turn {n} failed: {d.get('error', '')}"
    if kind == "turn.waiting":
        waits = len(d.get("tool_use_ids") or [])
        return f"Turn waits for a human ({waits} call{'s' if waits != 1 else ''})"
    if kind.startswith("turn."):
        return f"Turn {n} {kind.split('.', 1)[1].replace('_', ' ')}".replace("  ", " ")
    if kind == "model.replied":
        usage = d.get("usage") or {}
        tokens = f"{usage.get('input', 0)} in / {usage.get('output', 0)} out tokens"
        return (
            f"Model replied ({d.get('stop_reason', '')}, {tokens}, {d.get('ms', 0)} ms){_calls(d)}"
        )
    if kind == "model.failed":
        retry = d.get("retry_in_s")
        return f"Model call failed (attempt {d.get('attempt', '?')}, retry in {retry} s): {d.get('reason', '')}"
    if kind == "tool.finished":
        again = ", re-issued after a crash" if d.get("reissued") else ""
        return (
            f"{d.get('name', 'tool')} {d.get('status', '')} in {d.get('ms', 0)} ms "
            f"(attempt {d.get('attempt', 1)}{again})"
        )
    if kind == "browser.step":
        refused = len(d.get("refused") or [])
        note = f", {refused} request{'s' if refused != 1 else ''} refused" if refused else ""
        error = f": {d.get('error')}" if d.get("error") else ""
        return f"Browser {d.get('action', '')} at {d.get('url', '')}{note}{error}"
    if kind == "browser.refused":
        refused = len(d.get("refused") or [])
        return (
            f"Browser: {refused} request{'s' if refused != 1 else ''} refused between "
            "actions (a page's own timer or script)"
        )
    if kind == "tool.closed":
        return f"{d.get('name', 'tool')} closed with the turn ({d.get('status', '')})"
    if kind == "transcript.copied":
        return f"Transcript row {d.get('from_position', '')} copied from the original"
    if kind == "transcript.row":
        return "Transcript row (recorded before transcript rows were events)"
    if kind == "tool.in_doubt":
        return f"{d.get('name', 'tool')} is in doubt: {d.get('note', '')}"
    if kind == "tool.resolved":
        return f"In-doubt call resolved as {d.get('resolution', '')}: {d.get('note', '')}"
    if kind == "approval.requested":
        if d.get("external"):
            # Not this session's agent: someone's token, through MCP (api/external.py).
            return (
                "An outside agent (through MCP, not this session's agent) asked for approval "
                f"(policy {d.get('policy', '')})"
            )
        return f"Approval requested (policy {d.get('policy', '')})"
    if kind == "approval.decided":
        edited = " with edited arguments" if d.get("edited") else ""
        reason = f": {d['reason']}" if d.get("reason") else ""
        return f"Approval {d.get('decision', '')}{edited}{reason}"
    if kind == "approval.expired":
        return "Approval expired; the action did not run"
    if kind == "approval.canceled":
        return f"{d.get('count', '')} pending approval(s) canceled with the turn"
    if kind == "budget.exceeded":
        return f"Budget exceeded, turn {d.get('action', 'stopped')}: {d.get('reason', '')}"
    if kind == "budget.raised":
        after = d.get("after") or {}
        tokens = after.get("max_total_tokens")
        money = after.get("max_total_cost_micros")
        return (
            f"Session budget set to {f'{tokens:,} tokens' if tokens else 'no token limit'}, "
            f"{budgets.usd(money) if money else 'no cost limit'}"
        )
    if kind == "memory.snapshot":
        usage = d.get("usage") or {}
        return (
            f"Memory: rows {d.get('from_position', 0)}–{d.get('upto_position', '?')} summarized "
            f"({d.get('chars', 0)} characters, {usage.get('input', 0)} in / "
            f"{usage.get('output', 0)} out tokens); the model now reads the summary and the rest"
        )
    if kind == "memory.failed":
        return f"Memory summary failed (retry in {d.get('retry_in_s')} s): {d.get('reason', '')}"
    if kind == "recovery":
        return (
            f"Recovered: the previous owner {d.get('previous_owner', '')} stopped "
            f"({d.get('stalled_s', '?')} s without progress)"
        )
    return kind


# --- Tokens and cost ------------------------------------------------------------------------

# The price table is the setting AGENTDESK_PRICES (agents/budgets.py); the
# engine records each call's cost in micro-dollars (SessionRuntime.cost_micros,
# Turn.cost_micros), which is what the desk shows where it can.


def cost_usd(input_tokens: int, output_tokens: int, model: str | None = None) -> Decimal | None:
    """An estimate from tokens alone (rows recorded before costs were)."""
    model = model or settings.AGENTDESK_MODEL
    if budgets.prices_for(model) is None:
        return None
    micros = budgets.cost_micros(model, input_tokens, output_tokens)
    return (Decimal(micros) / Decimal(1_000_000)).quantize(Decimal("0.0001"))


# --- Edited arguments -------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    path: str
    change: str  # "changed", "added", "removed"
    old: Any = None
    new: Any = None


def arguments_diff(old: Any, new: Any, path: str = "") -> list[Change]:
    """What an edit changed, leaf by leaf (`refund.amount_cents: 18900 -> 9000`)."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[Change] = []
        for key in list(old) + [k for k in new if k not in old]:
            where = f"{path}.{key}" if path else str(key)
            if key not in new:
                changes.append(Change(where, "removed", old=old[key]))
            elif key not in old:
                changes.append(Change(where, "added", new=new[key]))
            else:
                changes += arguments_diff(old[key], new[key], where)
        return changes
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        changes = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            changes += arguments_diff(a, b, f"{path}[{i}]")
        return changes
    if old == new and type(old) is type(new):
        return []
    return [Change(path or "(arguments)", "changed", old=old, new=new)]


_THUMB_RE = re.compile(r"^data:image/(?:jpeg|png);base64,[A-Za-z0-9+/]+={0,2}$")


def browser_thumb(value: Any) -> str:
    """A browser step's screenshot as an <img> src, only when it is plainly
    one (a data URL of base64 image bytes); "" for anything else."""
    return value if isinstance(value, str) and _THUMB_RE.match(value) else ""
