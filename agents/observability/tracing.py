"""OpenTelemetry traces: one trace per turn, whatever runs it.

A turn spans several Celery tasks (time slices, a wait for an approver) and
may outlive the worker that started it, so no in-memory span can be the
turn. Instead every id is derived from durable data:

- trace id and the turn span's id: a hash of the turn's id and session key.
  Any process can compute them, so a step run by a second worker after the
  first one died lands in the same trace, under the same parent.
- step spans (`model.call`, `tool.call`) are started and ended around the
  step by the worker running it, as children of the turn span.
- `approval.wait` is emitted when the decision lands (web or beat), with
  start = approval.created_at and end = decided_at.
- `agent.turn` itself is emitted once, when the turn ends, with start =
  turn.started_at from the database and end = now.

A step that dies with its worker leaves no span (it never ended); its replay
does. Exported over OTLP/HTTP (protobuf) when OTEL_EXPORTER_OTLP_ENDPOINT (or
..._TRACES_ENDPOINT, or settings.AGENTDESK_OTLP_ENDPOINT) is set, through a
batch processor (a thread; a step never waits on the collector). Otherwise
`enabled()` is False and the engine's hooks return before building anything.

Many slots per process: the current span and the forced ids live in
contextvars, which are per thread, so the steps of concurrent sessions in one
process never share a parent; the batch processor's queue is thread-safe.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

log = logging.getLogger(__name__)

SCOPE = "agentdesk.runtime"
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class _Ids(IdGenerator):
    """Random ids, except for the one span whose ids are derived (the turn)."""

    forced: ContextVar[tuple[int, int] | None] = ContextVar("agentdesk_forced_ids", default=None)

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        forced = self.forced.get()
        return forced[0] if forced else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        forced = self.forced.get()
        return forced[1] if forced else self._random.generate_span_id()


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.configured = False
        self.provider: TracerProvider | None = None
        self.tracer: trace.Tracer | None = None


_state = _State()


def turn_ids(turn_id: int, session_key: str) -> tuple[int, int]:
    """(trace id, turn span id), the same in every process, never zero."""
    digest = hashlib.sha256(f"agentdesk.turn:{turn_id}:{session_key}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def enabled() -> bool:
    if not _state.configured:
        _configure_from_settings()
    return _state.tracer is not None


def configure(processor: SpanProcessor | None = None, exporter: SpanExporter | None = None):
    """Use this processor (or a batch processor around this exporter) from
    now on; None for both turns tracing off. Tests and bench call it."""
    with _state.lock:
        old = _state.provider
        _state.provider = _state.tracer = None
        if processor is None and exporter is not None:
            processor = BatchSpanProcessor(exporter)
        if processor is not None:
            provider = TracerProvider(
                resource=Resource.create({"service.name": _service_name()}),
                id_generator=_Ids(),
                shutdown_on_exit=True,
            )
            provider.add_span_processor(processor)
            _state.provider, _state.tracer = provider, provider.get_tracer(SCOPE)
        _state.configured = True
    if old is not None:
        old.shutdown()
    return _state.provider


def _configure_from_settings() -> None:
    from django.conf import settings

    endpoint = getattr(settings, "AGENTDESK_OTLP_ENDPOINT", "") or ""
    env = os.environ
    if not endpoint and not (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        with _state.lock:
            _state.configured = True
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # An explicit AGENTDESK_OTLP_ENDPOINT is the collector's base URL, like
    # OTEL_EXPORTER_OTLP_ENDPOINT; the exporter reads the OTEL_* variables itself.
    exporter = (
        OTLPSpanExporter(endpoint=f"{endpoint.rstrip('/')}/v1/traces")
        if endpoint
        else (OTLPSpanExporter())
    )
    configure(exporter=exporter)
    log.info("tracing: exporting spans over OTLP/HTTP")


def _service_name() -> str:
    return os.environ.get("OTEL_SERVICE_NAME", "agentdesk")


def flush(timeout_ms: int = 5000) -> None:
    if _state.provider is not None:
        _state.provider.force_flush(timeout_ms)


def _parent(turn_id: int, session_key: str):
    trace_id, span_id = turn_ids(turn_id, session_key)
    parent = SpanContext(trace_id, span_id, is_remote=True, trace_flags=_SAMPLED)
    return trace.set_span_in_context(NonRecordingSpan(parent))


def emit_child(
    name: str,
    *,
    turn_id: int,
    session_key: str,
    start_ns: int,
    end_ns: int,
    attributes: dict[str, Any],
    error: str | None = None,
) -> None:
    """A finished span under the turn's span (a step, an approval wait)."""
    tracer = _state.tracer
    if tracer is None:
        return
    span = tracer.start_span(
        name,
        context=_parent(turn_id, session_key),
        kind=SpanKind.INTERNAL,
        start_time=start_ns,
        attributes=attributes,
    )
    _end(span, start_ns, end_ns, error)


def emit_turn(
    *,
    turn_id: int,
    session_key: str,
    start_ns: int,
    end_ns: int,
    attributes: dict[str, Any],
    error: str | None = None,
) -> None:
    """The turn's own span, with the derived ids its children point at."""
    tracer = _state.tracer
    if tracer is None:
        return
    token = _Ids.forced.set(turn_ids(turn_id, session_key))
    try:
        span = tracer.start_span(
            "agent.turn",
            context=trace.set_span_in_context(trace.INVALID_SPAN),  # a root
            kind=SpanKind.INTERNAL,
            start_time=start_ns,
            attributes=attributes,
        )
    finally:
        _Ids.forced.reset(token)
    _end(span, start_ns, end_ns, error)


def _end(span: Any, start_ns: int, end_ns: int, error: str | None) -> None:
    """End a span recorded after the fact (clock skew never makes it negative)."""
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error[:500]))
    span.end(end_time=max(end_ns, start_ns))


def _flush_on_worker_exit(**_: Any) -> None:
    flush(2000)


try:  # a prefork child leaves without running atexit handlers: flush first
    from celery.signals import worker_process_shutdown, worker_shutdown

    worker_process_shutdown.connect(_flush_on_worker_exit, weak=False)
    worker_shutdown.connect(_flush_on_worker_exit, weak=False)
except ImportError:  # pragma: no cover (celery is a dependency)
    pass
