// The charts of jupyter_supervisor's panel and comparison chart: one canvas per tag, with the
// curves of every run shown, hover readout, zoom by drag, log scale and smoothing. Joined
// before panel.js into one ES module (widget.py); the View (panel.js) owns the charts and
// the points they draw (view.store, view.options, view.runNames()).

const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const CHART_HEIGHT = 190;
const PAD = {left: 58, right: 10, top: 8, bottom: 24};

// -- numbers and times as text -------------------------------------------------------------

function formatValue(v) {
  if (Number.isNaN(v)) return "nan";
  if (!Number.isFinite(v)) return v > 0 ? "inf" : "-inf";
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-4)) return v.toExponential(3);
  return String(Number(v.toPrecision(5)));
}

function formatStep(s) {
  for (const [limit, suffix] of [[1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
    if (Math.abs(s) >= limit) return String(Number((s / limit).toFixed(1))) + suffix;
  }
  return String(Math.round(s));
}

function formatDuration(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  if (seconds < 60) return `${seconds} s`;
  const m = Math.floor(seconds / 60), s = seconds % 60;
  if (m < 60) return `${m} min ${String(s).padStart(2, "0")} s`;
  const h = Math.floor(m / 60);
  return `${h} h ${String(m % 60).padStart(2, "0")} min`;
}

function formatClock(wall) {
  const d = new Date(wall * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map(
    (x) => String(x).padStart(2, "0")).join(":");
}

const X_AXES = {
  step: {label: "step", of: (s, i) => s.steps[i], tick: formatStep,
         text: (x) => `step ${Math.round(x).toLocaleString("en-US")}`},
  relative: {label: "relative time", of: (s, i) => s.walls[i] - s.walls[0], tick: formatDuration,
             text: (x) => `+${formatDuration(x)}`},
  wall: {label: "wall time", of: (s, i) => s.walls[i], tick: formatClock, text: formatClock},
};

// -- drawing --------------------------------------------------------------------------------

// TensorBoard's smoothing: an exponential moving average, debiased so that early points are
// not pulled toward zero; a constant series stays as it is.
function smooth(values, weight) {
  if (weight <= 0 || values.every((v) => v === values[0])) return values.slice();
  let last = 0, count = 0;
  return values.map((v) => {
    if (!Number.isFinite(v)) return v;
    last = last * weight + (1 - weight) * v;
    count += 1;
    return last / (1 - Math.pow(weight, count));
  });
}

function niceTicks(lo, hi, count, integer = false) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
  if (integer) step = Math.max(1, Math.round(step));
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    out.push(Math.abs(t) < step * 1e-9 ? 0 : t);
  }
  return out;
}

function logTicks(lo, hi) {  // lo, hi in log10 units
  const out = [];
  for (let e = Math.ceil(lo); e <= Math.floor(hi); e++) out.push(e);
  if (out.length >= 2) return out;
  return niceTicks(lo, hi, 4);
}

function bounds(values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) { if (Number.isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; } }
  return [lo, hi];
}

function padded([lo, hi], integer = false) {
  if (!Number.isFinite(lo)) return [0, 1];
  if (hi <= lo) {
    const pad = integer || lo === 0 ? 1 : Math.abs(lo) * 0.05;
    return [lo - pad, hi + pad];
  }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

// One chart: the curves of one tag for every run shown, with its own zoom and hover.
class Chart {
  constructor(view, tag) {
    this.view = view;
    this.tag = tag;
    this.zoom = null;       // {x: [lo, hi], y: [lo, hi] | null} in data units, or null
    this.hover = null;      // the mouse's x in pixels
    this.el = document.createElement("div");
    this.el.className = "jsv-chart";
    this.el.dataset.tag = tag;
    this.title = document.createElement("div");
    this.title.className = "jsv-chart-title";
    this.box = document.createElement("div");
    this.box.className = "jsv-canvas-box";
    this.canvas = document.createElement("canvas");
    this.zoomBox = document.createElement("div");
    this.zoomBox.className = "jsv-zoom-box";
    this.box.append(this.canvas, this.zoomBox);
    this.readout = document.createElement("div");
    this.readout.className = "jsv-readout";
    this.el.append(this.title, this.box, this.readout);
    this.listen();
  }

  listen() {
    const box = this.box;
    let drag = null;
    const local = (e) => {
      const r = box.getBoundingClientRect();
      return [e.clientX - r.left, e.clientY - r.top];
    };
    box.addEventListener("mousedown", (e) => { drag = local(e); e.preventDefault(); });
    box.addEventListener("mousemove", (e) => {
      const [x, y] = local(e);
      this.hover = x;
      if (drag) {
        const s = this.zoomBox.style;
        s.display = "block";
        s.left = `${Math.min(drag[0], x)}px`; s.width = `${Math.abs(x - drag[0])}px`;
        s.top = `${Math.min(drag[1], y)}px`; s.height = `${Math.abs(y - drag[1])}px`;
      }
      this.draw();
    });
    box.addEventListener("mouseleave", () => { this.hover = null; this.draw(); });
    window.addEventListener("mouseup", this.onUp = (e) => {
      if (!drag) return;
      const [x, y] = local(e);
      const start = drag;
      drag = null;
      this.zoomBox.style.display = "none";
      if (Math.abs(x - start[0]) < 5 || !this.frame) return;
      const f = this.frame;
      const xs = [f.xData(Math.min(x, start[0])), f.xData(Math.max(x, start[0]))];
      const ys = Math.abs(y - start[1]) < 5 ? null
        : [f.yData(Math.max(y, start[1])), f.yData(Math.min(y, start[1]))];
      this.zoom = {x: xs, y: ys};
      this.draw();
    });
    box.addEventListener("dblclick", () => { this.zoom = null; this.draw(); });
  }

  remove() {
    window.removeEventListener("mouseup", this.onUp);
    this.el.remove();
  }

  draw() {
    const opts = this.view.options;
    const axis = X_AXES[opts.xAxis];
    const log = opts.log;
    const lines = [];
    for (const [index, run] of this.view.runNames().entries()) {
      const series = this.view.store.runs.get(run)?.get(this.tag);
      if (!series || !series.steps.length) continue;
      const xs = series.steps.map((_, i) => axis.of(series, i));
      const smoothed = smooth(series.values, opts.smoothing);
      lines.push({run, series, xs, smoothed, colour: COLOURS[index % COLOURS.length]});
    }
    const width = Math.max(100, this.box.clientWidth || 330);
    const height = CHART_HEIGHT;
    const ratio = window.devicePixelRatio || 1;
    const [pixelsW, pixelsH] = [Math.round(width * ratio), Math.round(height * ratio)];
    if (this.canvas.width !== pixelsW) this.canvas.width = pixelsW;
    if (this.canvas.height !== pixelsH) this.canvas.height = pixelsH;
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const newest = lines.map((l) => {
      const i = l.series.values.length - 1;
      const step = l.series.steps[i].toLocaleString("en-US");
      const run = lines.length > 1 ? l.run + " " : "";
      return `${run}${formatValue(l.series.values[i])} (step ${step})`;
    });
    this.title.textContent = `${this.tag}${newest.length ? " = " + newest.join(", ") : ""}`;
    this.el.dataset.points = String(lines.reduce((n, l) => n + l.xs.length, 0));
    if (!lines.length) { this.frame = null; this.readout.textContent = ""; return; }

    // Domains: the zoom, else every point.
    const yOf = (v) => (log ? (v > 0 ? Math.log10(v) : NaN) : v);
    const integer = opts.xAxis === "step";
    let xDomain = this.zoom ? this.zoom.x : padded(bounds(lines.flatMap((l) => l.xs)), integer);
    if (xDomain[1] <= xDomain[0]) xDomain = padded([xDomain[0], xDomain[0]], integer);
    let yDomain;
    if (this.zoom && this.zoom.y) {
      yDomain = this.zoom.y;
    } else {
      const visible = [];
      for (const l of lines) {
        l.xs.forEach((x, i) => {
          if (x >= xDomain[0] && x <= xDomain[1]) {
            visible.push(yOf(l.series.values[i]), yOf(l.smoothed[i]));
          }
        });
      }
      yDomain = padded(bounds(visible));
    }
    const plotW = width - PAD.left - PAD.right, plotH = height - PAD.top - PAD.bottom;
    const px = (x) => PAD.left + ((x - xDomain[0]) / (xDomain[1] - xDomain[0])) * plotW;
    const py = (y) => PAD.top + plotH - ((y - yDomain[0]) / (yDomain[1] - yDomain[0])) * plotH;
    this.frame = {
      xData: (p) => xDomain[0] + ((p - PAD.left) / plotW) * (xDomain[1] - xDomain[0]),
      yData: (p) => yDomain[0] + ((PAD.top + plotH - p) / plotH) * (yDomain[1] - yDomain[0]),
    };
    const xTicks = niceTicks(xDomain[0], xDomain[1], 5, integer);
    const yTicks = log ? logTicks(yDomain[0], yDomain[1]) : niceTicks(yDomain[0], yDomain[1], 4);
    const yLabel = (t) => (log ? formatValue(Math.pow(10, t)) : formatValue(t));
    this.el.dataset.yscale = log ? "log" : "linear";
    this.el.dataset.xaxis = opts.xAxis;
    this.el.dataset.xDomain = xDomain.map((v) => Number(v.toPrecision(6))).join(",");
    this.el.dataset.yTicks = yTicks.map(yLabel).join(",");
    this.el.dataset.zoomed = this.zoom ? "true" : "false";

    // Axes and grid.
    ctx.font = "10px sans-serif";
    ctx.strokeStyle = "#e0e0e0";
    ctx.fillStyle = "#555";
    ctx.lineWidth = 1;
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const t of xTicks) {
      const x = px(t);
      ctx.beginPath(); ctx.moveTo(x, PAD.top); ctx.lineTo(x, PAD.top + plotH); ctx.stroke();
      ctx.fillText(axis.tick(t), x, PAD.top + plotH + 4);
    }
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const t of yTicks) {
      const y = py(t);
      ctx.beginPath(); ctx.moveTo(PAD.left, y); ctx.lineTo(PAD.left + plotW, y); ctx.stroke();
      ctx.fillText(yLabel(t), PAD.left - 4, y);
    }
    ctx.strokeStyle = "#9e9e9e";
    ctx.strokeRect(PAD.left, PAD.top, plotW, plotH);

    // Curves: the raw line faint behind the smoothed one; a lone point as a dot.
    ctx.save();
    ctx.beginPath(); ctx.rect(PAD.left, PAD.top, plotW, plotH); ctx.clip();
    const smoothing = opts.smoothing > 0;
    for (const l of lines) {
      const path = (values, alpha, widthPx) => {
        ctx.globalAlpha = alpha;
        ctx.strokeStyle = l.colour;
        ctx.fillStyle = l.colour;
        ctx.lineWidth = widthPx;
        if (values.length === 1) {
          ctx.beginPath(); ctx.arc(px(l.xs[0]), py(yOf(values[0])), 3, 0, 2 * Math.PI); ctx.fill();
          return;
        }
        ctx.beginPath();
        let pen = false;
        values.forEach((v, i) => {
          const y = yOf(v);
          if (!Number.isFinite(y)) { pen = false; return; }
          if (pen) ctx.lineTo(px(l.xs[i]), py(y)); else ctx.moveTo(px(l.xs[i]), py(y));
          pen = true;
        });
        ctx.stroke();
      };
      if (smoothing) path(l.series.values, 0.25, 1);
      path(l.smoothed, 1, 1.5);
    }
    ctx.restore();
    ctx.globalAlpha = 1;

    // The point under the mouse, of each run: marked, and written out in the readout.
    if (this.hover === null || this.hover < PAD.left || this.hover > PAD.left + plotW) {
      this.readout.textContent = "";
      return;
    }
    const target = this.frame.xData(this.hover);
    const rows = [];
    for (const l of lines) {
      let best = 0;
      for (let i = 1; i < l.xs.length; i++) {
        if (Math.abs(l.xs[i] - target) < Math.abs(l.xs[best] - target)) best = i;
      }
      const raw = l.series.values[best], sm = l.smoothed[best];
      const y = yOf(smoothing ? sm : raw);
      if (Number.isFinite(y)) {
        ctx.fillStyle = l.colour;
        ctx.beginPath(); ctx.arc(px(l.xs[best]), py(y), 3.5, 0, 2 * Math.PI); ctx.fill();
      }
      const value = smoothing ? `${formatValue(sm)} (raw ${formatValue(raw)})` : formatValue(raw);
      const s = l.series;
      rows.push(`${lines.length > 1 || this.view.compare ? l.run + ": " : ""}${value}  step ` +
                `${s.steps[best].toLocaleString("en-US")}  ${formatClock(s.walls[best])}  ` +
                `+${formatDuration(s.walls[best] - s.walls[0])}`);
    }
    this.readout.textContent = rows.join("\n");
  }
}
