"""The operations page: throughput, approval wait, failures, recoveries and
spend over the last hours, from Postgres (agents/observability/series.py).
Server-drawn SVG bars first (no script needed to read them); then
static/js/ops-charts.js draws each chart with uPlot (static/vendor/) from
the same figures, with a time axis, labels and the value under the pointer
or the arrow keys. htmx re-fetches the charts every 10 s."""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from agents.observability.series import WINDOWS, Series, ops_series
from dashboard.charts import _fmt, bar_chart
from dashboard.views.common import desk_view

DEFAULT_HOURS = 6


@require_GET
@never_cache
@desk_view("agents.view_session")
def operations(request: HttpRequest) -> HttpResponse:
    try:
        hours = int(request.GET.get("hours", DEFAULT_HOURS))
    except ValueError:
        hours = DEFAULT_HOURS
    if hours not in WINDOWS:
        hours = DEFAULT_HOURS
    started = time.perf_counter()
    series = ops_series(hours=hours)
    context = {
        "hours": hours,
        "windows": list(WINDOWS),
        "charts": _charts(series),
        "series": series,
        "query_ms": round((time.perf_counter() - started) * 1000, 1),
    }
    if request.htmx:
        return render(request, "dashboard/partials/_ops_charts.html", context)
    return render(request, "dashboard/operations.html", context)


def _charts(series: Series) -> list[dict]:
    per_minute = 60 / series.width_s
    labels = [f"{b.start:%H:%M}" for b in series.buckets]
    wait = series.wait_avg_s
    steps, decided = series.total("steps"), series.total("decided")
    failures, recoveries = series.total("failures"), series.total("recoveries")
    rows = [
        (
            "throughput",
            "Throughput",
            "steps/min",
            "Model and tool steps recorded.",
            [b.steps * per_minute for b in series.buckets],
            f"{_fmt(steps)} steps",
        ),
        (
            "approval-wait",
            "Approval wait",
            "s",
            "Mean time from request to decision.",
            [b.wait_avg_s for b in series.buckets],
            f"{_fmt(decided)} decided" + (f", mean {_fmt(wait)} s" if wait is not None else ""),
        ),
        (
            "failures",
            "Failures",
            "",
            "Failed turns, model errors, failed tools, calls in doubt.",
            [b.failures for b in series.buckets],
            f"{_fmt(failures)} failures",
        ),
        (
            "recoveries",
            "Recoveries",
            "",
            "A worker died mid-turn and another took over.",
            [b.recoveries for b in series.buckets],
            f"{_fmt(recoveries)} recoveries",
        ),
        (
            "spend",
            "Spend",
            "USD",
            "Recorded token usage at the configured prices.",
            [b.cost_usd for b in series.buckets],
            f"${series.total('cost_usd'):,.2f} for {_fmt(series.total('tokens'))} tokens",
        ),
    ]
    times = [int(b.start.timestamp()) for b in series.buckets]
    charts = []
    for slug, title, unit, note, values, summary in rows:
        chart = bar_chart(values, labels, unit=f" {unit}" if unit else "")
        # What uPlot draws (json_script in the template: numbers and our own words).
        data = {
            "title": title,
            "unit": unit,
            "width_s": series.width_s,
            "x": times,
            "y": [None if v is None else round(float(v), 4) for v in values],
        }
        charts.append(
            {
                "slug": slug,
                "title": title,
                "note": note,
                "summary": summary,
                "chart": chart,
                "data": data,
                "data_id": f"chart-{slug}-data",
            }
        )
    return charts
