// The front end of jupyter_supervisor's panel and comparison chart (an anywidget ES module).
//
// The kernel sends small state in the `state` trait (the header, progress, checkpoint line,
// timeline, best values, which buttons work) and the points of each series as custom messages:
// {type: "series", run, reset, parts: [{tag, from, n}]} with one buffer holding, for each part,
// n steps, n values and n wall times (float64). A part replaces the points from index `from`
// on. A view that opens asks for every series once ({type: "hello"}, again until the answer
// came); the kernel also sends {type: "beat"} every second, and a view that hears none for
// DEAD_AFTER_MS says that the kernel is gone and disables its buttons. Curves are drawn on canvases; the value under the mouse is
// written as text in each chart's readout.

const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const DEAD_AFTER_MS = 5000;
// A hello can be lost (JupyterLab drops a comm message sent over a subshell the kernel no
// longer knows, seen after a page reload): a view asks again until its full series came.
const HELLO_AGAIN_MS = 2000;
const CHART_HEIGHT = 190;
const PAD = {left: 58, right: 10, top: 8, bottom: 24};

const CSS = `
.jsv-view { font-family: var(--jp-ui-font-family, sans-serif); font-size: 13px;
  color: var(--jp-ui-font-color1, #222); }
.jsv-view .jsv-header-line > span + span::before { content: " | "; color: #9e9e9e; }
.jsv-view .jsv-progress { display: inline-block; width: 50%; height: 8px; background: #e0e0e0;
  border-radius: 4px; overflow: hidden; vertical-align: middle; margin-right: 6px; }
.jsv-view .jsv-progress-bar { height: 100%; }
.jsv-view .jsv-dead { background: #ffebee; border-left: 4px solid #c62828; padding: 4px 8px;
  color: #c62828; font-weight: bold; margin: 4px 0; }
.jsv-view .jsv-warning { background: #fff3e0; border-left: 4px solid #ef6c00;
  padding: 4px 8px; margin: 4px 0; }
.jsv-view .jsv-muted { color: #757575; }
.jsv-view details { margin: 4px 0; }
.jsv-view .jsv-timeline, .jsv-view .jsv-best { margin: 2px 0; padding-left: 22px; }
.jsv-view .jsv-name { font-weight: bold; }
.jsv-view .jsv-controls, .jsv-view .jsv-tools { display: flex; flex-wrap: wrap; gap: 6px;
  align-items: center; margin: 6px 0; }
.jsv-view .jsv-tags { display: flex; flex-wrap: wrap; gap: 4px; margin: 4px 0; }
.jsv-view .jsv-tag { border: 1px solid #bdbdbd; border-radius: 10px; padding: 1px 8px;
  cursor: pointer; background: #fafafa; font-size: 12px; }
.jsv-view .jsv-tag[aria-pressed="false"] { opacity: 0.45; text-decoration: line-through; }
.jsv-view .jsv-charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(330px, 1fr));
  gap: 8px; }
.jsv-view .jsv-chart { border: 1px solid #e0e0e0; padding: 4px; min-width: 0; }
.jsv-view .jsv-chart-title { font-weight: bold; font-size: 12px; overflow-wrap: anywhere; }
.jsv-view .jsv-canvas-box { position: relative; height: ${CHART_HEIGHT}px; cursor: crosshair; }
.jsv-view canvas { position: absolute; left: 0; top: 0; width: 100%; height: 100%; }
.jsv-view .jsv-zoom-box { position: absolute; border: 1px dashed #1565c0;
  background: rgba(21, 101, 192, 0.08); pointer-events: none; display: none; }
.jsv-view .jsv-readout { font-family: var(--jp-code-font-family, monospace); font-size: 11px;
  min-height: 1.3em; white-space: pre-wrap; }
.jsv-view .jsv-legend { display: flex; flex-wrap: wrap; gap: 10px; margin: 4px 0; }
.jsv-view .jsv-legend span::before { content: "\\25A0 "; color: var(--c); }
.jsv-view .jsv-error pre, .jsv-view .jsv-error-box { margin: 0; white-space: pre-wrap; }
.jsv-view .jsv-error-box { border-left: 4px solid #c62828; background: #ffebee; padding: 4px 8px; }
.jsv-view button:disabled { opacity: 0.5; }
`;

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

// -- the series, shared by every view of one model -----------------------------------------

const stores = new WeakMap();

function storeOf(model) {
  let store = stores.get(model);
  if (!store) {
    store = {runs: new Map(), listeners: new Set()};
    stores.set(model, store);
  }
  return store;
}

function applySeries(store, msg, buffers) {
  if (msg.reset) store.runs.delete(msg.run);
  if (!store.runs.has(msg.run)) store.runs.set(msg.run, new Map());
  const tags = store.runs.get(msg.run);
  const view = buffers && buffers.length ? buffers[0] : null;
  // Copied out: a DataView's offset need not be a multiple of 8.
  const all = view ? new Float64Array(view.buffer.slice(view.byteOffset,
                                                        view.byteOffset + view.byteLength))
                   : new Float64Array(0);
  let at = 0;
  for (const part of msg.parts) {
    const take = () => {
      const out = Array.from(all.subarray(at, at + part.n));
      at += part.n;
      return out;
    };
    const steps = take(), values = take(), walls = take();
    const old = tags.get(part.tag) || {steps: [], values: [], walls: []};
    const keep = Math.min(part.from, old.steps.length);
    const series = {steps: old.steps.slice(0, keep).concat(steps),
                    values: old.values.slice(0, keep).concat(values),
                    walls: old.walls.slice(0, keep).concat(walls)};
    if (series.steps.length) tags.set(part.tag, series); else tags.delete(part.tag);
  }
}

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

// -- the view -------------------------------------------------------------------------------

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

const BUTTONS = [["stop", "Stop", "Stop gracefully: write a final checkpoint, then stop"],
                 ["resume", "Resume", "Continue from the newest checkpoint"],
                 ["save", "Save", "Write a checkpoint now"]];

class View {
  constructor(model, root) {
    this.model = model;
    this.store = storeOf(model);
    this.compare = model.get("compare");
    this.options = {log: false, smoothing: model.get("smoothing"), xAxis: "step"};
    this.hidden = new Set();
    this.charts = new Map();
    this.lastBeat = Date.now();
    this.dead = false;
    root.classList.add("jsv-view");
    const style = el("style");
    style.textContent = CSS;
    this.headerEl = el("div", "jsv-header");
    this.deadEl = el("div", "jsv-dead", "kernel gone — re-run the cell");
    this.deadEl.style.display = "none";
    this.warningEl = el("div", "jsv-warning");
    this.checkpointEl = el("div", "jsv-checkpoint");
    this.historyEl = el("details", "jsv-history");
    this.historyEl.open = true;
    this.errorEl = el("div", "jsv-error");
    this.controls = el("div", "jsv-controls");
    this.buttons = {};
    for (const [name, label, tip] of BUTTONS) {
      const b = el("button", `jsv-${name} jupyter-button`, label);
      b.title = tip;
      b.disabled = true;
      b.addEventListener("click", () => model.send({type: "button", name}));
      this.buttons[name] = b;
      this.controls.append(b);
    }
    this.messageEl = el("span", "jsv-message");
    this.messageEl.style.color = "#c62828";
    this.controls.append(this.messageEl);
    this.legendEl = el("div", "jsv-legend");
    this.tools = this.makeTools();
    this.tagsEl = el("div", "jsv-tags");
    this.chartsEl = el("div", "jsv-charts");
    root.append(style, this.headerEl, this.deadEl, this.warningEl, this.checkpointEl,
                this.historyEl, this.legendEl, this.tools, this.tagsEl, this.chartsEl,
                this.errorEl, this.controls);
    if (this.compare) {
      for (const e of [this.headerEl, this.warningEl, this.checkpointEl, this.historyEl,
                       this.errorEl, this.controls]) e.style.display = "none";
    }
    this.onState = () => this.renderState();
    this.onMsg = (msg, buffers) => this.receive(msg, buffers);
    model.on("change:state", this.onState);
    model.on("msg:custom", this.onMsg);
    this.timer = setInterval(() => this.checkAlive(), 500);
    this.resize = new ResizeObserver(() => this.redraw());
    this.resize.observe(this.chartsEl);
    this.renderState();
    this.renderCharts();
    this.synced = false;  // the full series (a reset) has come
    this.sayHello();
  }

  sayHello() {
    this.helloAt = Date.now();
    this.model.send({type: "hello"});
  }

  makeTools() {
    const tools = el("div", "jsv-tools");
    const log = el("label", "jsv-log");
    const box = el("input");
    box.type = "checkbox";
    box.addEventListener("change", () => { this.options.log = box.checked; this.redraw(); });
    log.append(box, " log scale");
    const smoothLabel = el("label", "jsv-smoothing", "smoothing ");
    const slider = el("input");
    slider.type = "range"; slider.min = "0"; slider.max = "0.99"; slider.step = "0.01";
    slider.value = String(this.options.smoothing);
    const shown = el("span", "jsv-smoothing-value", String(this.options.smoothing));
    slider.addEventListener("input", () => {
      this.options.smoothing = Number(slider.value);
      shown.textContent = slider.value;
      this.redraw();
    });
    smoothLabel.append(slider, " ", shown);
    const axisLabel = el("label", "jsv-xaxis", "x axis ");
    const select = el("select");
    for (const [key, axis] of Object.entries(X_AXES)) {
      const option = el("option", "", axis.label);
      option.value = key;
      select.append(option);
    }
    select.addEventListener("change", () => {
      this.options.xAxis = select.value;
      for (const chart of this.charts.values()) chart.zoom = null;
      this.redraw();
    });
    axisLabel.append(select);
    tools.append(log, smoothLabel, axisLabel,
                 el("span", "jsv-muted", "drag to zoom, double-click to reset"));
    return tools;
  }

  runNames() {
    return this.compare ? this.model.get("runs") : Array.from(this.store.runs.keys());
  }

  receive(msg, buffers) {
    if (msg.type === "beat") {
      this.lastBeat = Date.now();
      if (this.dead) { this.dead = false; this.renderState(); }
    } else if (msg.type === "series") {
      this.lastBeat = Date.now();
      if (msg.reset) this.synced = true;
      applySeries(this.store, msg, buffers);
      for (const listener of this.store.listeners) listener();
      this.renderCharts();
    }
  }

  checkAlive() {
    const dead = Date.now() - this.lastBeat > DEAD_AFTER_MS;
    if (dead !== this.dead) { this.dead = dead; this.renderState(); }
    if (!this.synced && !dead && Date.now() - this.helloAt > HELLO_AGAIN_MS) this.sayHello();
  }

  renderState() {
    const s = this.model.get("state") || {};
    const root = this.headerEl.parentElement;
    root.classList.toggle("jsv-kernel-gone", this.dead);
    this.deadEl.style.display = this.dead ? "" : "none";
    for (const [name, button] of Object.entries(this.buttons)) {
      button.disabled = this.dead || !(s.buttons && s.buttons[name]);
    }
    if (this.compare) {
      this.legendEl.replaceChildren(...this.runNames().map((run, i) => {
        const item = el("span", "jsv-legend-item", run);
        item.style.setProperty("--c", COLOURS[i % COLOURS.length]);
        return item;
      }));
      return;
    }
    this.legendEl.style.display = "none";
    const header = [];
    const line = el("div", "jsv-header-line");
    const name = el("span", "jsv-name", s.name || "");
    // Without a kernel the last state the view heard of may be stale ("running" forever).
    const status = this.dead ? el("span", "jsv-status jsv-status-unknown", "unknown")
      : el("span", `jsv-status jsv-status-${s.status || ""}`, s.label || "");
    status.style.color = this.dead ? "#757575" : s.tone || "#757575";
    status.style.fontWeight = "bold";
    const step = el("span", "jsv-step", s.step_text ? `step ${s.step_text}` : "");
    step.dataset.step = s.step === null || s.step === undefined ? "" : String(s.step);
    line.append(name, status);
    if (s.step_text) line.append(step);
    for (const [key, cls] of [["rate", "jsv-rate"], ["position", "jsv-fit"],
                              ["elapsed", "jsv-elapsed"], ["role", "jsv-role"]]) {
      if (s[key]) line.append(el("span", cls, s[key]));
    }
    header.push(line);
    if (s.progress) {
      const row = el("div", "jsv-progress-line");
      const bar = el("div", "jsv-progress");
      bar.dataset.fraction = String(s.progress.fraction);
      const fill = el("div", "jsv-progress-bar");
      fill.style.width = `${(s.progress.fraction * 100).toFixed(1)}%`;
      fill.style.background = s.tone || "#757575";
      bar.append(fill);
      row.append(bar, el("span", "jsv-progress-text", s.progress.text));
      if (s.eta) row.append(" ", el("span", "jsv-eta", s.eta));
      header.push(row);
    }
    this.headerEl.replaceChildren(...header);
    this.warningEl.textContent = s.warning || "";
    this.warningEl.style.display = s.warning ? "" : "none";
    this.checkpointEl.replaceChildren(...(s.checkpoint || []).map((text) => el("div", "", text)));
    const summary = el("summary", "", "What happened");
    const timeline = el("ul", "jsv-timeline");
    for (const [when, text] of s.timeline || []) timeline.append(el("li", "", `${when}  ${text}`));
    const best = el("ul", "jsv-best");
    for (const text of s.best || []) best.append(el("li", "", text));
    this.historyEl.replaceChildren(summary, timeline, best);
    this.historyEl.style.display = (s.timeline || []).length ? "" : "none";
    if (s.error) {
      const box = el("div", "jsv-error-box");
      box.append(el("b", "", "Error"), el("pre", "", s.error));
      this.errorEl.replaceChildren(box);
    } else {
      this.errorEl.replaceChildren();
    }
    this.messageEl.textContent = s.message || "";
  }

  renderCharts() {
    const tags = new Set();
    for (const run of this.runNames()) {
      for (const tag of this.store.runs.get(run)?.keys() || []) tags.add(tag);
    }
    const sorted = Array.from(tags).sort();
    const chips = sorted.map((tag) => {
      const chip = el("button", "jsv-tag", tag);
      chip.setAttribute("aria-pressed", this.hidden.has(tag) ? "false" : "true");
      chip.addEventListener("click", () => {
        if (this.hidden.has(tag)) this.hidden.delete(tag); else this.hidden.add(tag);
        this.renderCharts();
      });
      return chip;
    });
    this.tagsEl.replaceChildren(...chips);
    this.tagsEl.style.display = sorted.length > 1 ? "" : "none";
    const wanted = sorted.filter((tag) => !this.hidden.has(tag));
    for (const [tag, chart] of this.charts) {
      if (!wanted.includes(tag)) { chart.remove(); this.charts.delete(tag); }
    }
    for (const tag of wanted) {
      if (!this.charts.has(tag)) this.charts.set(tag, new Chart(this, tag));
      this.chartsEl.append(this.charts.get(tag).el);  // keeps them in tag order
    }
    this.redraw();
  }

  redraw() {
    const started = performance.now();
    for (const chart of this.charts.values()) chart.draw();
    this.chartsEl.dataset.drawMs = String(performance.now() - started);
  }

  destroy() {
    clearInterval(this.timer);
    this.resize.disconnect();
    this.model.off("change:state", this.onState);
    this.model.off("msg:custom", this.onMsg);
    for (const chart of this.charts.values()) chart.remove();
  }
}

export default {
  render({model, el: root}) {
    const view = new View(model, root);
    return () => view.destroy();
  },
};
