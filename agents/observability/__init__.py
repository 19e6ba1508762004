"""Observability: traces, metrics and structured logs of the step engine.

- `observe`: what the engine calls (a turn, a model step, a tool step, a
  finished turn, a decided approval); it feeds the three below and costs a
  few microseconds per step, with no I/O.
- `tracing`: OpenTelemetry spans, one trace per turn across the Celery tasks
  and workers that run it, exported over OTLP/HTTP when configured.
- `metrics`: Prometheus counters and histograms (multiprocess mode when
  PROMETHEUS_MULTIPROC_DIR is set) and the gauges computed at scrape time.
- `logs`: the step context (session key, turn, step) and the JSON formatter.
- `series`: the operations page's time series, aggregated in Postgres.

This package imports no Django models at import time: settings.LOGGING
names `logs.JsonFormatter`, which is loaded before the app registry is ready.
"""
