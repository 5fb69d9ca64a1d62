// Bar charts drawn with uPlot (console/vendor, loaded before the modules as a global).

import { $ } from "./dom.js";
import { state } from "./state.js";

/// Draws (or updates) the bar chart in element `id`: `xs` and `ys`, on a time axis or, with
/// `labels`, one bar per label.
export function bars(id, xs, ys, labels) {
  const box = $(id);
  const chart = state.charts[id];
  if (chart && chart.tenant === state.tenant) {
    chart.plot.setData([xs, ys]);
    return;
  }
  if (chart) {
    chart.plot.destroy();
  }
  box.replaceChildren();
  if (typeof uPlot === "undefined") {
    box.textContent = "(the chart library did not load)";
    return;
  }
  const x = labels
    ? {
        scale: { time: false, range: [-0.5, labels.length - 0.5] },
        axis: {
          splits: () => labels.map((_, i) => i),
          values: (_, splits) => splits.map((i) => labels[i] || ""),
        },
      }
    : { scale: { time: true }, axis: {} };
  const plot = new uPlot(
    {
      width: Math.max(320, Math.min(960, box.clientWidth || 800)),
      height: 180,
      legend: { show: false },
      scales: { x: x.scale },
      axes: [x.axis, { label: "timers" }],
      series: [
        {},
        {
          label: "timers",
          stroke: "#2b6cb0",
          fill: "rgba(43,108,176,0.25)",
          points: { show: false },
          paths: uPlot.paths.bars({ size: [0.9] }),
        },
      ],
    },
    [xs, ys],
    box,
  );
  state.charts[id] = { tenant: state.tenant, plot };
}

export const byTime = (entries) => [entries.map((m) => Date.parse(m.minute) / 1000), entries.map((m) => m.due)];
