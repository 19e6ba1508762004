"""What the runtime needs from a model, whoever serves it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ModelRequest:
    system: str
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    max_tokens: int


@dataclass
class ModelReply:
    content: list[dict[str, Any]]  # Anthropic content blocks, as recorded
    stop_reason: str
    input_tokens: int
    output_tokens: int
    model: str = ""
    # tool_use id -> why its input could not be used (not JSON, not an object).
    # The recorded block then carries {} as input and the call fails cleanly.
    malformed_inputs: dict[str, str] = field(default_factory=dict)

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [block for block in self.content if block.get("type") == "tool_use"]

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")


class ModelUnavailable(Exception):
    """The model could not answer after the client's own retries (429/529/5xx,
    timeouts). The step is tried again later; nothing was recorded."""


class ModelAborted(Exception):
    """The call was abandoned because the turn was canceled."""


class Abort(Protocol):
    """Fired when the turn is canceled (see agents/runtime/cancel.py)."""

    def is_set(self) -> bool: ...

    def on_abort(self, callback: Callable[[], None]) -> None: ...


class ModelClient(Protocol):
    def complete(
        self,
        request: ModelRequest,
        *,
        on_text: Callable[[str], None],
        abort: Abort,
    ) -> ModelReply:
        """The model's reply; raises ModelUnavailable or ModelAborted."""
        ...
