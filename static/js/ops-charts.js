// The operations charts, drawn with uPlot (static/vendor/, see its README)
// from the figures the server put in each chart's json_script block: a UTC
// time axis, a value axis with its unit, and the value under the pointer,
// also reachable from the keyboard (focus a chart, then ←/→, Home/End).
// The server's SVG bars stay underneath for a page without script.
//
// CSP: no inline script or style. uPlot sets sizes through the CSSOM
// (element.style), which the policy allows; our data comes from json_script
// (a data block, never run) and every word we show is set with textContent.
(function () {
  "use strict";

  const HEIGHT = 180;
  const COLORS = {
    "chart-throughput": "#2563eb",
    "chart-approval-wait": "#2563eb",
    "chart-failures": "#dc2626",
    "chart-recoveries": "#b45309",
    "chart-spend": "#047857",
  };
  const plots = new Map(); // figure id -> {plot, idx}

  const utc = (ts) => window.uPlot.tzDate(new Date(ts * 1000), "Etc/UTC");
  const two = (n) => String(n).padStart(2, "0");
  const hhmm = (ts) => {
    const d = new Date(ts * 1000);
    return two(d.getUTCHours()) + ":" + two(d.getUTCMinutes());
  };
  const day = (ts) => {
    const d = new Date(ts * 1000);
    return two(d.getUTCMonth() + 1) + "-" + two(d.getUTCDate());
  };
  const fmt = (v, unit) => {
    if (v === null || v === undefined) return "nothing";
    const n = Math.abs(v) >= 100 || Number.isInteger(v) ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : String(Number(v.toPrecision(3)));
    if (unit === "USD") return "$" + n;
    return unit ? n + " " + unit : n;
  };

  function readout(figure, data, idx) {
    const out = figure.querySelector(".ops-readout");
    if (!out) return;
    if (idx === null || idx === undefined || idx < 0 || idx >= data.x.length) {
      out.textContent = "";
      return;
    }
    const until = data.x[idx] + data.width_s;
    out.textContent = hhmm(data.x[idx]) + "–" + hhmm(until) + " UTC: " + fmt(data.y[idx], data.unit);
    out.dataset.index = String(idx);
  }

  function draw(figure) {
    const plotBox = figure.querySelector(".ops-plot[data-chart]");
    const source = plotBox && document.getElementById(plotBox.dataset.chart);
    if (!plotBox || !source || !window.uPlot) return;
    let data;
    try {
      data = JSON.parse(source.textContent);
    } catch (_) {
      return;
    }
    const color = COLORS[figure.id] || "#2563eb";
    const width = Math.max(280, plotBox.clientWidth || figure.clientWidth - 32);
    const opts = {
      width: width,
      height: HEIGHT,
      tzDate: utc,
      legend: { show: true, live: true },
      cursor: { points: { show: true }, drag: { x: false, y: false } },
      scales: {
        // Each bar covers its bucket, starting at its time: room for the last one.
        x: { time: true, range: (u, min, max) => [min, max + data.width_s] },
        // From zero; an empty chart still has a scale (a cent, a second, one).
        y: { range: (u, min, max) => [0, Math.max(data.unit === "USD" ? 0.01 : 1, max || 0) * 1.1] },
      },
      axes: [
        {
          label: "UTC",
          stroke: "#3b4450",
          grid: { stroke: "#e2e8f0" },
          ticks: { stroke: "#94a3b8" },
          values: (u, splits) => splits.map((ts) => (hhmm(ts) === "00:00" ? day(ts) : hhmm(ts))),
        },
        {
          label: data.unit || "count",
          stroke: "#3b4450",
          grid: { stroke: "#e2e8f0" },
          ticks: { stroke: "#94a3b8" },
          size: 60,
          values: (u, splits) => splits.map((v) => fmt(v, data.unit === "USD" ? "USD" : "")),
        },
      ],
      series: [
        { label: "Time (UTC)", value: (u, ts) => (ts === null ? "--" : hhmm(ts)) },
        {
          label: data.title,
          stroke: color,
          fill: color + "cc",
          width: 0,
          paths: window.uPlot.paths.bars({ size: [0.9, 40], align: 1 }),
          points: { show: false },
          value: (u, v) => fmt(v, data.unit),
        },
      ],
      hooks: {
        setCursor: [
          (u) => {
            const state = plots.get(figure.id);
            if (state) state.idx = u.cursor.idx;
            readout(figure, data, u.cursor.idx);
          },
        ],
      },
    };
    plotBox.replaceChildren();
    const plot = new window.uPlot(opts, [data.x, data.y], plotBox);
    plots.set(figure.id, { plot: plot, data: data, idx: null });
    figure.classList.add("drawn");
  }

  // The keyboard moves the same cursor the pointer does.
  function point(figure, idx) {
    const state = plots.get(figure.id);
    if (!state || !state.data.x.length) return;
    const last = state.data.x.length - 1;
    idx = Math.max(0, Math.min(last, idx));
    const u = state.plot;
    const left = u.valToPos(state.data.x[idx], "x");
    const value = state.data.y[idx];
    const top = value === null ? u.over.clientHeight / 2 : u.valToPos(value, "y");
    u.setCursor({ left: left, top: top });
    state.idx = idx;
    readout(figure, state.data, idx);
  }

  document.addEventListener("keydown", (e) => {
    const figure = e.target.closest && e.target.closest(".ops-chart.drawn");
    if (!figure || e.ctrlKey || e.metaKey || e.altKey) return;
    const state = plots.get(figure.id);
    if (!state) return;
    const last = state.data.x.length - 1;
    const at = state.idx === null || state.idx === undefined ? last + 1 : state.idx;
    const to = { ArrowLeft: at - 1, ArrowRight: at + 1, Home: 0, End: last }[e.key];
    if (to === undefined) return;
    e.preventDefault();
    point(figure, to);
  });

  function drawAll(root) {
    for (const figure of (root || document).querySelectorAll(".ops-chart:not(.drawn)")) draw(figure);
  }

  // htmx replaces the charts every 10 s: draw the new ones, and give a
  // keyboard reader back the chart and the point they were on.
  let keep = null;
  document.addEventListener("htmx:beforeSwap", (e) => {
    if (!e.detail.target || e.detail.target.id !== "ops-charts") return;
    const active = document.activeElement && document.activeElement.closest(".ops-chart");
    keep = active ? { id: active.id, idx: (plots.get(active.id) || {}).idx } : null;
    for (const state of plots.values()) state.plot.destroy(); // its listeners go with it
    plots.clear();
  });
  document.addEventListener("htmx:afterSettle", () => {
    const box = document.getElementById("ops-charts");
    if (!box || !box.querySelector(".ops-chart:not(.drawn)")) return;
    drawAll(box);
    if (keep) {
      const figure = document.getElementById(keep.id);
      if (figure) {
        figure.focus({ preventScroll: true });
        if (keep.idx !== null && keep.idx !== undefined) point(figure, keep.idx);
      }
      keep = null;
    }
  });

  let resized = null;
  window.addEventListener("resize", () => {
    clearTimeout(resized);
    resized = setTimeout(() => {
      for (const [id, state] of plots) {
        const figure = document.getElementById(id);
        const box = figure && figure.querySelector(".ops-plot");
        if (box) state.plot.setSize({ width: Math.max(280, box.clientWidth), height: HEIGHT });
      }
    }, 150);
  });

  document.addEventListener("DOMContentLoaded", () => drawAll(document));
})();
