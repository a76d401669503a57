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
  // A value with its unit, as the readout shows it.
  function withUnit(value, unit) {
    const text = format(value, unit);
    if (value === null || value === undefined || unit === "ratio" || unit === "probability") return text;
    if (unit === "seconds") return `${text} s`;
    return unit && unit !== "proxy_ratio" ? `${text} ${unit}` : text;
  }
  // The baseline period shaded and the onset marked, inside the plot's box only (the x range may
  // open after the series starts).
  function marks(spec, c) {
    return (u) => {
      const ctx = u.ctx, { left, top, width, height } = u.bbox;
      const min = u.scales.x.min, max = u.scales.x.max;
      ctx.save();
      ctx.beginPath();
      ctx.rect(left, top, width, height);
      ctx.clip();
      if (spec.baseline_end !== null && spec.baseline_end > min) {
        const x0 = u.valToPos(Math.max(spec.start, min), "x", true);
        const x1 = u.valToPos(Math.min(spec.baseline_end, max), "x", true);
        ctx.fillStyle = c.baseline;
        ctx.fillRect(x0, top, Math.max(0, x1 - x0), height);
      }
      if (spec.onset !== null && spec.onset >= min && spec.onset <= max) {
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
  // No legend of placeholders: the values under the cursor while it is over the chart, else nothing.
  function readout(figure, spec, times) {
    const out = figure.querySelector(".readout");
    return (u) => {
      const i = u.cursor.idx;
      if (i === null || i === undefined || u.cursor.left < 0) {
        out.textContent = "";
        return;
      }
      const parts = [window.rcaTime.local(new Date(times[i] * 1000)), withUnit(spec.values[i], spec.unit)];
      if (spec.threshold !== null) parts.push(`threshold ${spec.comparison} ${withUnit(spec.threshold, spec.unit)}`);
      out.textContent = parts.join(" · ");
    };
  }
  function draw(figure, focus) {
    const spec = JSON.parse(figure.querySelector("script.chart-data").textContent);
    const times = spec.values.map((_, i) => spec.start + i * spec.step);
    const c = colours();
    const data = [times, spec.values];
    const series = [{}, { label: spec.title, stroke: c.line, width: 1.5 }];
    if (spec.threshold !== null) {
      data.push(times.map(() => spec.threshold));
      series.push({ label: "threshold", stroke: c.threshold, dash: [6, 4], width: 1, points: { show: false } });
    }
    const plot = figure.querySelector(".plot");
    const ticks = (u, splits) => {
      const labels = timeTicks(u, splits);
      figure.dataset.xTicks = labels.join(" | "); // what the axis shows, for the page tests
      return labels;
    };
    const range = (u, key) => {
      if (key !== "x") return;
      figure.dataset.xMin = String(u.scales.x.min);
      figure.dataset.xMax = String(u.scales.x.max);
    };
    const axis = { stroke: c.text, grid: { stroke: c.grid }, ticks: { stroke: c.grid } };
    const chart = new uPlot({
      width: Math.max(280, plot.clientWidth),
      height: 220,
      legend: { show: false },
      scales: { x: { time: true } },
      series: series,
      axes: [
        Object.assign({ values: ticks, space: 60 }, axis),
        Object.assign({ size: 64, values: (u, ticks) => ticks.map((v) => format(v, spec.unit)) }, axis),
      ],
      hooks: { drawClear: [marks(spec, c)], setCursor: [readout(figure, spec, times)], setScale: [range] },
    }, data, plot);
    chart.whole = [times[0], times[times.length - 1]];
    if (focus) chart.setScale("x", { min: focus[0], max: focus[1] });
    figure.dataset.drawn = String(series.length - 1);
    return chart;
  }
  document.addEventListener("DOMContentLoaded", () => {
    const button = document.getElementById("chart-range");
    const focus = button ? JSON.parse(button.dataset.focus) : null;
    const charts = [...document.querySelectorAll("figure.chart")].map((figure) => draw(figure, focus));
    if (button) {
      const note = document.getElementById("chart-range-note");
      button.addEventListener("click", () => {
        const whole = button.getAttribute("aria-pressed") !== "true";
        for (const chart of charts) {
          const [min, max] = whole ? chart.whole : focus;
          chart.setScale("x", { min, max });
        }
        button.setAttribute("aria-pressed", String(whole));
        button.textContent = whole ? "Show the incident only" : `Show the whole ${button.dataset.span}`;
        if (note) note.hidden = whole;
      });
    }
    window.addEventListener("resize", () => {
      for (const chart of charts) chart.setSize({ width: Math.max(280, chart.root.parentElement.clientWidth), height: 220 });
    });
    matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => location.reload());
  });
})();
