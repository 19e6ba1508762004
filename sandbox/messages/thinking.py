"""`[[sandbox:thinking]]`: replies that open with a thinking block, as a
model that thinks by default (Claude Sonnet 5) sends them.
`[[sandbox:thinking_cut]]`: the same, but the turn's first reply is cut at
max_tokens while thinking (the block, no signature, nothing else); the same
request asked again is answered in full.

The block is streamed as the real API streams it (its text in
`thinking_delta`s, then one `signature_delta`), and its signature is checked
when a later request sends it back: a thinking block whose text or
signature was changed, or dropped to empty, is refused with a 400, as the
real API refuses it. So a client that loses part of a thinking block on its
way through the stream breaks the first tool call of such a turn.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

DIRECTIVES = ("thinking", "thinking_cut")
_KEY = secrets.token_bytes(32)  # this sandbox process's: signatures from another are refused


def sign(thinking: str) -> str:
    digest = hmac.new(_KEY, thinking.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def thought(text: str, calls_so_far: int) -> str:
    """What the stand-in 'thought' before this reply (a few sentences)."""
    return (
        f"The customer's message is {len(text)} characters long. "
        f"{calls_so_far} tool call(s) have answered so far this turn. "
        "Decide the next step from the ticket and the results, then act."
    )


def problem(index: int, message: dict[str, Any]) -> str | None:
    """The first thinking block of an assistant message the real API would refuse."""
    for position, block in enumerate(message["content"]):
        if block.get("type") != "thinking":
            continue
        text, signature = block.get("thinking"), block.get("signature")
        if not isinstance(text, str) or not isinstance(signature, str) or not signature:
            return f"messages.{index}.content.{position}.thinking.signature: Field required"
        if not hmac.compare_digest(signature, sign(text)):
            return f"messages.{index}.content.{position}: Invalid `signature` in `thinking` block"
    return None
