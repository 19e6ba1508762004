"""The sandbox's process-wide state: options, storage, fault rules, counters."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from sandbox.db import Database

if TYPE_CHECKING:
    from sandbox.faults import FaultBook
    from sandbox.webhooks import WebhookSender


@dataclass(frozen=True)
class Options:
    rate: float | None = None
    seed: int = 0
    webhook_url: str | None = None
    webhook_secret: str | None = None
    seed_demo: bool = False
    model_chunk_delay_ms: int = 0
    # A real model's pace (ModelPace below): what a fresh sandbox starts with.
    model_ttft_ms: int = 0
    model_tokens_per_s: float = 0.0


@dataclass
class ModelPace:
    """How fast the Messages-API stand-in answers, like a real model: the time
    to its first token, then so many output tokens a second (0: at once).
    Set at start (--model-ttft-ms, --model-tokens-per-s) and at run time
    (POST /_model_pace), so a benchmark or a demo runs at a real model's pace."""

    ttft_ms: int = 0
    tokens_per_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"ttft_ms": self.ttft_ms, "tokens_per_s": self.tokens_per_s}


class Counters:
    """Counts of things that are not rows (model requests, faults applied).

    In memory on purpose: they describe this process's traffic, and
    incrementing one must never wait on SQLite's write lock (a stream that
    is being cancelled counts itself on the way out).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def incr(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._counts[name] += by

    def snapshot(self, prefix: str) -> dict[str, int]:
        with self._lock:
            return {
                k[len(prefix) :]: v for k, v in sorted(self._counts.items()) if k.startswith(prefix)
            }

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()


class RequestLog:
    """The last Messages-API request bodies, newest last (GET /_model_requests):
    what the model was actually sent, for tests of what a client sends."""

    def __init__(self, size: int = 100) -> None:
        self._lock = threading.Lock()
        self._bodies: deque[dict[str, Any]] = deque(maxlen=size)

    def add(self, body: dict[str, Any]) -> None:
        with self._lock:
            self._bodies.append(body)

    def last(self, n: int) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._bodies)[-n:] if n > 0 else []

    def clear(self) -> None:
        with self._lock:
            self._bodies.clear()


def _digest(body: dict[str, Any]) -> bytes:
    request = json.dumps([body.get("system"), body.get("messages")], sort_keys=True)
    return hashlib.blake2b(request.encode(), digest_size=16).digest()


class CompletedCalls:
    """Model calls the sandbox completed, which a provider would bill, by the
    request they answered (its system prompt and messages). The same request
    completed again is a call paid twice: whoever asked lost what it learned
    and asked again. Each repeat keeps when the lost answer was completed and
    the address it went to, so a fault campaign can say which fault lost it
    (GET /_model_repeats): a host cut off, or the database away."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # request digest -> (last completed, epoch s; the client it went to)
        self._last: dict[bytes, tuple[float, str]] = {}
        self._repeats: list[dict[str, Any]] = []

    def completed(self, body: dict[str, Any], client: str = "") -> None:
        digest = _digest(body)
        now = time.time()
        with self._lock:
            before = self._last.get(digest)
            self._last[digest] = (now, client)
            if before is not None:
                lost_at, lost_by = before
                self._repeats.append({"lost_at": lost_at, "lost_by": lost_by, "at": now})

    def seen(self, body: dict[str, Any]) -> bool:
        """Whether this request was completed before."""
        with self._lock:
            return _digest(body) in self._last

    def repeats(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(repeat) for repeat in self._repeats]

    def clear(self) -> None:
        with self._lock:
            self._last.clear()
            self._repeats.clear()


@dataclass
class Sandbox:
    db: Database
    options: Options
    faults: FaultBook
    counters: Counters
    webhooks: WebhookSender
    requests: RequestLog = field(default_factory=RequestLog)
    completed: CompletedCalls = field(default_factory=CompletedCalls)
    slack: Any = None  # sandbox.slack.SlackLog, made by create_app
    pace: ModelPace = field(default_factory=ModelPace)
    carrier: Any = None  # sandbox.carrier.CarrierPortal, made by create_app

    def default_pace(self) -> ModelPace:
        return ModelPace(self.options.model_ttft_ms, self.options.model_tokens_per_s)


def sandbox_of(request: Request) -> Sandbox:
    return request.app.state.sandbox
