"""Bar charts as geometry for inline SVG: numbers in, rectangles out.

The template draws them (templates/dashboard/partials/_ops_charts.html):
no charting library, no script, nothing but numbers and our own labels in
the markup, so the page's CSP (no inline style, no eval) holds.
"""

from __future__ import annotations

from dataclasses import dataclass

WIDTH, HEIGHT, GAP = 720, 140, 1


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str  # the bucket and its value, for the tooltip and screen readers


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: float
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def mid(self) -> float:
        return self.height / 2


def bar_chart(values: list[float | None], labels: list[str], unit: str = "") -> Chart:
    """One bar per value, scaled to the largest; None draws no bar."""
    peak = max((v for v in values if v), default=0.0)
    slot = WIDTH / max(len(values), 1)
    bars = []
    for i, (value, label) in enumerate(zip(values, labels, strict=True)):
        if not value:
            continue
        height = max(1.0, HEIGHT * value / peak)
        bars.append(
            Bar(
                x=round(i * slot, 2),
                y=round(HEIGHT - height, 2),
                width=round(max(slot - GAP, 1.0), 2),
                height=round(height, 2),
                label=f"{label}: {_fmt(value)}{unit}",
            )
        )
    return Chart(bars=bars, peak=peak)


def _fmt(value: float) -> str:
    if value >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.2f}" if value >= 1 else f"{value:.4f}"
