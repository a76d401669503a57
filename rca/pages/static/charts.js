// One uPlot chart per breached finding: the kept series, the threshold (dashed), the baseline
// period shaded and the onset marked. Data comes from the JSON block inside each <figure>.
(function () {
  "use strict";
  function colours() {
    const css = getComputedStyle(document.documentElement);
    const get = (name) => css.getPropertyValue(name).trim();
    return {
      text: get("--fg"), grid: get("--grid"), line: get("--series"), threshold: get("--threshold"),
      baseline: get("--baseline"), onset: get("--onset"),
    };
  }
  function format(value, unit) {
    if (value === null || value === undefined) return "-";
    if (unit === "ratio" || unit === "probability") return `${(value * 100).toFixed(1)}%`;
    return Math.abs(value) >= 1000 ? Math.round(value).toLocaleString() : String(Number(value.toPrecision(3)));
  }
  // The x axis in the viewer's zone, 24-hour like every time on the page: HH:MM, and the date
  // (MM-DD) under the first tick and wherever the day changes.
  function timeTicks(u, ticks) {
    const T = window.rcaTime;
    let last = null;
    return ticks.map((t) => {
      const date = new Date(t * 1000);
      const day = T.day(date);
      const label = day !== last ? `${T.clock(date)}\n${day.slice(5)}` : T.clock(date);
      last = day;
      return label;
    });
  }
  function marks(spec, c) {
    return (u) => {
      const ctx = u.ctx, top = u.bbox.top, height = u.bbox.height;
      ctx.save();
      if (spec.baseline_end !== null) {
        const x0 = u.valToPos(spec.start, "x", true);
        const x1 = u.valToPos(Math.min(spec.baseline_end, u.scales.x.max), "x", true);
        ctx.fillStyle = c.baseline;
        ctx.fillRect(x0, top, Math.max(0, x1 - x0), height);
      }
      if (spec.onset !== null) {
        const x = u.valToPos(spec.onset, "x", true);
        ctx.strokeStyle = c.onset;
        ctx.lineWidth = 2 * devicePixelRatio;
        ctx.beginPath();
        ctx.moveTo(x, top);
        ctx.lineTo(x, top + height);
        ctx.stroke();
      }
      ctx.restore();
    };
  }
  function draw(figure) {
    const spec = JSON.parse(figure.querySelector("script.chart-data").textContent);
    const times = spec.values.map((_, i) => spec.start + i * spec.step);
    const c = colours();
    const data = [times, spec.values];
    const series = [{ value: (u, v) => (v === null || v === undefined ? "" : window.rcaTime.local(new Date(v * 1000))) }, { label: spec.title, stroke: c.line, width: 1.5, value: (u, v) => format(v, spec.unit) }];
    if (spec.threshold !== null) {
      data.push(times.map(() => spec.threshold));
      series.push({ label: "threshold", stroke: c.threshold, dash: [6, 4], width: 1, value: (u, v) => format(v, spec.unit) });
    }
    const plot = figure.querySelector(".plot");
    const ticks = (u, splits) => {
      const labels = timeTicks(u, splits);
      figure.dataset.xTicks = labels.join(" | ");  // what the axis shows, for the page tests
      return labels;
    };
    const axis = { stroke: c.text, grid: { stroke: c.grid }, ticks: { stroke: c.grid } };
    const chart = new uPlot({
      width: Math.max(280, plot.clientWidth),
      height: 220,
      scales: { x: { time: true } },
      series: series,
      axes: [Object.assign({ values: ticks, space: 60 }, axis), Object.assign({ size: 64, values: (u, ticks) => ticks.map((v) => format(v, spec.unit)) }, axis)],
      hooks: { drawClear: [marks(spec, c)] },
    }, data, plot);
    figure.dataset.drawn = String(series.length - 1);
    return chart;
  }
  document.addEventListener("DOMContentLoaded", () => {
    const charts = [...document.querySelectorAll("figure.chart")].map(draw);
    window.addEventListener("resize", () => {
      for (const chart of charts) chart.setSize({ width: Math.max(280, chart.root.parentElement.clientWidth), height: 220 });
    });
    matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => location.reload());
  });
})();
