// The front end of jupyter_supervisor's panel and comparison chart: the View (its header,
// controls, tags, timeline and the charts of chart.js, joined before this file into one
// anywidget ES module by widget.py).
//
// The kernel sends small state in the `state` trait (the header, progress, checkpoint line,
// timeline, best values, which buttons work) and the points of each series as custom messages:
// {type: "series", run, reset, parts: [{tag, from, n}]} with one buffer holding, for each part,
// n steps, n values and n wall times (float64). A part replaces the points from index `from`
// on. A view that opens asks for every series once ({type: "hello"}, again until the answer
// came); the kernel also sends {type: "beat"} every second, and a view that hears none for
// DEAD_AFTER_MS says that the kernel is gone and disables its buttons.

const DEAD_AFTER_MS = 5000;
// A hello can be lost (JupyterLab drops a comm message sent over a subshell the kernel no
// longer knows, seen after a page reload): a view asks again until its full series came.
const HELLO_AGAIN_MS = 2000;

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
.jsv-view .jsv-error pre, .jsv-view .jsv-error-box { margin: 0; white-space: pre-wrap; }
.jsv-view .jsv-error-box { border-left: 4px solid #c62828; background: #ffebee; padding: 4px 8px; }
.jsv-view button:disabled { opacity: 0.5; }
`;

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
    this.options = {log: false, smoothing: model.get("smoothing"), xAxis: "step",
                    ignoreOutliers: true, hiddenRuns: []};
    this.hidden = new Set();
    this.charts = new Map();
    this.lastBeat = Date.now();
    this.dead = false;
    root.classList.add("jsv-view");
    const style = el("style");
    style.textContent = CSS + CHART_CSS;
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
    const outliers = el("label", "jsv-outliers");
    outliers.title = "The y range leaves out values far outside the 5th to 95th percentile";
    const ignore = el("input");
    ignore.type = "checkbox";
    ignore.checked = this.options.ignoreOutliers;
    ignore.addEventListener("change", () => {
      this.options.ignoreOutliers = ignore.checked;
      this.redraw();
    });
    outliers.append(ignore, " ignore outliers");
    tools.append(log, outliers, smoothLabel, axisLabel,
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
      this.legendEl.replaceChildren(...legendItems(this));
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
