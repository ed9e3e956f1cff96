// The front end of jupyter_supervisor's panel and comparison chart: the View (its header,
// progress, notices, timeline, tools, tag chips, error and buttons). The link to the kernel that
// the views of one model share is link.js's (with what travels), the charts chart.js's, the
// theme's colours theme.js's (its rules: theme.css). The last of the front end's modules, which
// widget.py joins into one anywidget ES module: its default export is the module's.
//
// The `settings` trait holds what the user set (log scale, smoothing, x axis, hidden tags,
// zooms, the timeline open): written by the views and kept by the kernel, so that every view of
// the model, and one re-created after a page reload, shows it. With "Notify me" on, the views
// of a model show a browser notification for each of the state's `alerts` they had not seen
// and when the kernel is gone (notify.js).

import {X_AXES, formatPercent} from "./scales.js";
import {
  el, keepShortcutsOff, setText, setUserText, showIf, syncChildren, syncFolded, syncList, userEl
} from "./dom.js";
import {readTheme, watchTheme} from "./theme.js";
import {Chart, legendItems} from "./chart.js";
import {linkOf} from "./link.js";
import {notifyAlerts, notifyGone, notifying, toggleNotify} from "./notify.js";

const BUTTONS = [["stop", "Stop", "Stop gracefully: write a final checkpoint, then stop"],
                 ["resume", "Resume", "Continue from the newest checkpoint"],
                 ["save", "Save", "Write a checkpoint now"]];
// text.py's format_ago, in a checkpoint line: " (just now)", " (30 s ago)", " (1 h 05 min ago)".
const AGO = / \((just now|\d+ s ago|\d+ min ago|\d+ h \d+ min ago)\)/;
// The header's parts after the name and status, in order.
const HEADER_PARTS = [["step", "jsv-step"], ["rate", "jsv-rate"], ["position", "jsv-fit"],
                      ["elapsed", "jsv-elapsed"], ["role", "jsv-role"]];
const DEFAULT_SETTINGS = {log: false, smoothing: 0.6, xAxis: "step", ignoreOutliers: true,
                          hidden: [], hiddenRuns: [], zoom: {}, timeline: true, filter: "",
                          closedGroups: [], notify: false};
// How far outside the window a chart counts as on screen, in pixels (drawn before it shows).
const NEAR_PX = 200;
// The settings the charts read as host.options (chart.js).
const CHART_OPTIONS = ["log", "smoothing", "xAxis", "ignoreOutliers", "hiddenRuns"];

class View {
  constructor(model, root) {
    this.model = model;
    this.root = root;
    this.link = linkOf(model);
    this.compare = model.get("compare");
    this.charts = new Map();
    this.chips = new Map();
    this.groups = new Map();               // prefix -> {el, box, charts}
    this.options = {};                     // what the charts read: the settings they use
    this.host = this.chartHost();
    root.classList.add("jsv-view");
    this.build();
    this.setTheme(readTheme(root, this.link.state.palette));
    this.onSettings = () => this.applySettings();
    model.on("change:settings", this.onSettings);
    // Also when the view is first attached to the page: a detached element has no theme yet.
    this.resize = new ResizeObserver(() => { this.readTheme(); this.updateCharts(); });
    this.resize.observe(this.chartsEl);
    // A chart that comes into view is drawn then (updateCharts draws those on screen only).
    this.seen = new IntersectionObserver((entries) => {
      for (const entry of entries) {
        if (entry.isIntersecting) this.chartOf.get(entry.target)?.update();
      }
    }, {rootMargin: `${NEAR_PX}px`});
    this.chartOf = new WeakMap();
    this.unwatchTheme = watchTheme(() => this.readTheme());
    this.restoreShortcuts = keepShortcutsOff(root);
    this.applySettings();
    this.renderState();
    this.renderHealth();
    this.link.attach(this);
  }

  // All that the charts see of the view (chart.js's host): the points, the runs shown, the
  // options and the theme they draw with, the number format, and where a chart's zoom and the
  // legend's hidden runs go.
  chartHost() {
    const view = this;
    return {
      compare: this.compare,
      options: this.options,
      get theme() { return view.theme; },
      runNames: () => this.runNames(),
      series: (run, tag) => this.link.runs.get(run)?.get(tag),
      digits: () => (this.model.get("state") || {}).format?.digits,
      zoomed: (tag, zoom) => this.zoomed(tag, zoom),
      redraw: () => this.redraw(),
      exportPoints: (tag) => this.link.exportPoints(tag),
      tags: () => this.allTags || [],
    };
  }

  // -- the DOM, built once ---------------------------------------------------------------------

  build() {
    const root = this.root;
    this.headerEl = el("div", "jsv-header");
    this.lineEl = el("div", "jsv-header-line");
    this.nameEl = userEl("span", "jsv-name");
    this.statusEl = el("span", "jsv-status");
    this.lineEl.append(this.nameEl, el("span", "jsv-sep", " | "), this.statusEl);
    this.parts = {};
    for (const [key, className] of HEADER_PARTS) {
      const sep = el("span", "jsv-sep", " | ");
      const part = el("span", className);
      this.parts[key] = {sep, part};
      this.lineEl.append(sep, part);
    }
    this.progressEl = el("div", "jsv-progress-line");
    this.barEl = el("div", "jsv-progress");
    this.barEl.setAttribute("role", "progressbar");
    this.barEl.setAttribute("aria-valuemin", "0");
    this.barEl.setAttribute("aria-valuemax", "100");
    this.fillEl = el("div", "jsv-progress-bar");
    this.barEl.append(this.fillEl);
    this.progressTextEl = el("span", "jsv-progress-text");
    this.etaSepEl = el("span", "jsv-sep", " | ");
    this.etaEl = el("span", "jsv-eta");
    this.progressEl.append(this.barEl, this.progressTextEl, this.etaSepEl, this.etaEl);
    this.headerEl.append(this.lineEl, this.progressEl);
    this.deadEl = el("div", "jsv-notice jsv-dead", "kernel gone — re-run the cell");
    this.busyEl = el("div", "jsv-notice jsv-busy",
                     "kernel busy: a cell is running; the buttons act when it ends");
    for (const notice of [this.deadEl, this.busyEl]) notice.setAttribute("role", "status");
    this.warningEl = el("div", "jsv-notice jsv-warning");
    this.checkpointEl = el("div", "jsv-checkpoint");
    this.historyEl = el("details", "jsv-history");
    this.timelineEl = el("ul", "jsv-timeline");
    this.bestEl = el("ul", "jsv-best");
    this.historyEl.append(el("summary", "", "What happened"), this.timelineEl, this.bestEl);
    this.historyEl.addEventListener("toggle", () => {
      if (this.historyEl.open !== this.settings().timeline) {
        this.change({timeline: this.historyEl.open});
      }
    });
    this.errorEl = el("div", "jsv-error jsv-error-box");
    this.errorEl.append(el("b", "", "Error"), this.errorTextEl = el("pre"));
    this.controls = el("div", "jsv-controls");
    this.buttons = {};
    for (const [name, label, tip] of BUTTONS) {
      const b = el("button", `jsv-${name} jupyter-button`, label);
      b.title = tip;
      b.disabled = true;
      b.addEventListener("click", () => this.link.press(name));
      this.buttons[name] = b;
      this.controls.append(b);
    }
    this.notifyButton = el("button", "jsv-notify jupyter-button", "Notify me");
    this.notifyButton.title = "Browser notifications when the run ends, fails, stops on a " +
      "value that is not finite or stalls, and when the kernel is gone";
    this.notifyButton.addEventListener("click", () => toggleNotify(this));
    this.controls.append(this.notifyButton);
    this.messageEl = el("span", "jsv-message");
    this.messageEl.setAttribute("role", "status");
    this.controls.append(this.messageEl);
    this.legendEl = el("div", "jsv-legend");
    this.tools = this.makeTools();
    this.tagsEl = el("div", "jsv-tags");
    this.tagsEl.setAttribute("role", "group");
    this.tagsEl.setAttribute("aria-label", "Tags: show or hide each one's chart");
    this.chartsEl = el("div", "jsv-charts");
    root.append(this.headerEl, this.deadEl, this.busyEl, this.warningEl,
                this.checkpointEl, this.historyEl, this.legendEl, this.tools, this.tagsEl,
                this.chartsEl, this.errorEl, this.controls);
    for (const e of this.compare ? [this.headerEl, this.warningEl, this.checkpointEl,
                                    this.historyEl, this.errorEl, this.controls]
      : [this.legendEl]) e.hidden = true;
  }

  makeTools() {
    const tools = el("div", "jsv-tools");
    const log = el("label", "jsv-log");
    this.logBox = el("input");
    this.logBox.type = "checkbox";
    this.logBox.addEventListener("change", () => this.change({log: this.logBox.checked}));
    log.append(this.logBox, " log scale");
    const smoothLabel = el("label", "jsv-smoothing", "smoothing ");
    this.slider = el("input");
    this.slider.type = "range";
    this.slider.min = "0"; this.slider.max = "0.99"; this.slider.step = "0.01";
    this.smoothingEl = el("output", "jsv-smoothing-value");
    this.slider.addEventListener("input",
                                 () => this.change({smoothing: Number(this.slider.value)}));
    smoothLabel.append(this.slider, " ", this.smoothingEl);
    const axisLabel = el("label", "jsv-xaxis", "x axis ");
    this.axisSelect = el("select");
    for (const [key, axis] of Object.entries(X_AXES)) {
      const option = el("option", "", axis.label);
      option.value = key;
      this.axisSelect.append(option);
    }
    // Zooms are in the axis' units: they end with it.
    this.axisSelect.addEventListener("change", () => this.change({xAxis: this.axisSelect.value,
                                                                  zoom: {}}));
    axisLabel.append(this.axisSelect);
    const outliers = el("label", "jsv-outliers");
    outliers.title = "The y range leaves out values far outside the 5th to 95th percentile";
    this.outliersBox = el("input");
    this.outliersBox.type = "checkbox";
    this.outliersBox.addEventListener("change", () => this.change(
      {ignoreOutliers: this.outliersBox.checked}));
    outliers.append(this.outliersBox, " ignore outliers");
    const filter = el("label", "jsv-filter", "tags ");
    this.filterBox = el("input");
    this.filterBox.type = "search";
    this.filterBox.placeholder = "filter (regex)";
    this.filterBox.spellcheck = false;
    this.filterBox.addEventListener("input", () => this.change({filter: this.filterBox.value}));
    this.filterCount = el("output", "jsv-filter-count");
    filter.append(this.filterBox, " ", this.filterCount);
    tools.append(log, outliers, smoothLabel, axisLabel, filter, el(
      "span", "jsv-muted",
      "drag to zoom, double-click to reset; on a chart: ←/→ step, +/− zoom, 0 reset"));
    return tools;
  }

  // -- what the user set: in the model, shared by its views ----------------------------------

  settings() {
    return {...DEFAULT_SETTINGS, ...(this.model.get("settings") || {})};
  }

  // Sent at once: a change kept back would be overwritten by the echo of the one before it
  // (ipywidgets applies the kernel's echo of the last change it sent). Only what the user
  // changed is kept: a default stays a default (not written for every view).
  change(patch) {
    const kept = this.model.get("settings") || {}, settings = this.settings();
    const changed = Object.keys(patch).filter(
      (key) => JSON.stringify(patch[key]) !== JSON.stringify(settings[key]));
    if (!changed.length) return;
    this.model.set("settings", {...kept, ...Object.fromEntries(changed.map((k) => [k, patch[k]]))});
    try {
      this.model.save_changes();
    } catch (error) {  // no kernel: kept in this page only
      this.link.noKernel = true;
    }
  }

  // The chart's zoom changed (a drag, a double click, a key): kept with the settings.
  zoomed(tag, zoom) {
    const zooms = {...this.settings().zoom};
    if (zoom) zooms[tag] = zoom; else delete zooms[tag];
    this.change({zoom: zooms});
  }

  // A chart changed view.options itself (the comparison's legend hides a run): kept with the
  // settings, and drawn.
  redraw() {
    const s = this.settings();
    const patch = Object.fromEntries(CHART_OPTIONS.filter(
      (key) => JSON.stringify(this.options[key]) !== JSON.stringify(s[key])).map(
      (key) => [key, this.options[key]]));
    if (Object.keys(patch).length) this.change(patch); else this.updateCharts();
  }

  applySettings() {
    const s = this.settings();
    if (!(s.xAxis in X_AXES)) s.xAxis = "step";
    for (const key of CHART_OPTIONS) this.options[key] = s[key];
    if (this.logBox.checked !== s.log) this.logBox.checked = s.log;
    if (this.outliersBox.checked !== s.ignoreOutliers) this.outliersBox.checked = s.ignoreOutliers;
    if (Number(this.slider.value) !== s.smoothing) this.slider.value = String(s.smoothing);
    setText(this.smoothingEl, String(s.smoothing));
    if (this.axisSelect.value !== this.options.xAxis) this.axisSelect.value = this.options.xAxis;
    if (this.historyEl.open !== s.timeline) this.historyEl.open = s.timeline;
    if (this.filterBox.value !== s.filter) this.filterBox.value = s.filter;
    this.notifyButton.setAttribute("aria-pressed", String(notifying(this)));
    this.renderBest();
    if (this.compare) this.renderLegend();
    this.renderCharts();
  }

  // -- what the kernel says ------------------------------------------------------------------

  onLink(what) {
    if (what === "state") this.renderState();
    else if (what === "series") this.renderCharts();
    else if (what === "health") this.renderHealth();
  }

  renderState() {
    const s = this.link.state;
    if (s.key) this.root.dataset.jsvKey = s.key;
    if (s.palette && JSON.stringify(s.palette) !== JSON.stringify(this.theme.series)) {
      this.readTheme();
    }
    if (this.compare) {
      this.renderLegend();
      return;
    }
    this.renderHeader(s);
    this.renderProgress(s);
    showIf(this.warningEl, !!s.warning);
    setText(this.warningEl, s.warning || "");
    this.renderCheckpoint(s);
    this.renderTimeline(s);
    this.renderBest();
    showIf(this.historyEl, (s.timeline || []).length > 0);
    showIf(this.errorEl, !!s.error);
    setText(this.errorTextEl, s.error || "");
    setText(this.messageEl, s.message || "");
    this.renderButtons();
    notifyAlerts(this, s.alerts || []);
  }

  // The timeline as text.py's `folded` shows it: its first event, "… 14 earlier events" (a
  // button that shows them, and folds them again), its newest. What the kernel let go of is
  // counted, not shown.
  renderTimeline(s) {
    const lines = (s.timeline || []).map(([when, text]) => `${when}  ${text}`);
    const hidden = Math.max(0, lines.length - (s.timeline_shown || lines.length));
    const dropped = s.timeline_dropped || 0, open = !!this.timelineAll && hidden > 0;
    const count = (n) => `${n.toLocaleString("en-US")} earlier event${n === 1 ? "" : "s"}`;
    syncFolded(this.timelineEl, hidden || dropped
      ? [lines[0], null, ...lines.slice(open ? 1 : 1 + hidden)] : lines, {
      toggle: () => {
        this.timelineAll = !this.timelineAll;
        this.renderTimeline(this.link.state);
      },
      write: (button) => {
        setText(button, open ? `fold the ${count(hidden)}` +
          (dropped ? ` (${dropped.toLocaleString("en-US")} more not kept)` : "")
          : `… ${count(hidden + dropped)}`);
        button.disabled = !hidden;
        button.setAttribute("aria-expanded", String(open));
      },
    });
  }

  // Without a kernel, what the last state said of the present is not said: the step rate, the
  // ETA, how long ago the newest checkpoint was written (text.py's format_ago).
  renderCheckpoint(s) {
    const lines = s.checkpoint || [];
    syncList(this.checkpointEl, this.link.health === "gone"
      ? lines.map((line) => line.replace(AGO, "")) : lines, "div");
  }

  renderHeader(s) {
    const gone = this.link.health === "gone";
    setUserText(this.nameEl, s.name || "");
    // Without a kernel the last state the view heard of may be stale ("running" forever).
    setText(this.statusEl, gone ? "unknown" : s.label || "");
    const statusClass = `jsv-status jsv-status-${gone ? "unknown" : s.status || ""}`;
    if (this.statusEl.className !== statusClass) this.statusEl.className = statusClass;
    this.root.style.setProperty("--jsv-tone", this.theme.tones[gone ? "muted" : s.tone] ||
                                this.theme.tones.muted);
    const texts = {step: s.step_text ? `step ${s.step_text}` : "", rate: gone ? "" : s.rate,
                   position: s.position, elapsed: s.elapsed, role: s.role};
    for (const [key] of HEADER_PARTS) {
      const {sep, part} = this.parts[key];
      setText(part, texts[key] || "");
      showIf(part, !!texts[key]);
      showIf(sep, !!texts[key]);
    }
    this.parts.step.part.dataset.step = s.step === null || s.step === undefined ? ""
      : String(s.step);
  }

  renderProgress(s) {
    showIf(this.progressEl, !!s.progress);
    if (!s.progress) return;
    const percent = formatPercent(s.progress.fraction);
    this.barEl.dataset.fraction = String(s.progress.fraction);
    this.barEl.setAttribute("aria-valuenow", percent);
    this.barEl.setAttribute("aria-label", s.progress.text);
    this.fillEl.style.width = `${percent}%`;
    setText(this.progressTextEl, s.progress.text);
    const eta = this.link.health === "gone" ? "" : s.eta || "";
    setText(this.etaEl, eta);
    showIf(this.etaEl, !!eta);
    showIf(this.etaSepEl, !!eta);
  }

  renderButtons() {
    const s = this.link.state, gone = this.link.health === "gone";
    for (const [name, button] of Object.entries(this.buttons)) {
      const enabled = !gone && !!(s.buttons && s.buttons[name]);
      if (button.disabled === enabled) button.disabled = !enabled;
    }
  }

  renderHealth() {
    const health = this.link.health;
    this.root.dataset.jsvHealth = health;
    this.root.classList.toggle("jsv-kernel-gone", health === "gone");
    // Never answered: no kernel behind this view (a notebook's saved widget state); the
    // record below it shows then (text.py's style).
    if (health === "gone" && this.link.answered === null) this.root.dataset.jsvOffline = "";
    else if (this.link.answered !== null) delete this.root.dataset.jsvOffline;
    showIf(this.deadEl, health === "gone");
    notifyGone(this);
    showIf(this.busyEl, health === "busy");
    if (!this.compare) {
      this.renderHeader(this.link.state);
      this.renderProgress(this.link.state);
      this.renderCheckpoint(this.link.state);
      this.renderButtons();
    }
  }

  // The comparison's legend (chart.js's legendItems): made again only when its runs, their
  // colours or the runs hidden changed.
  renderLegend() {
    const key = JSON.stringify([this.runNames(), this.theme.series, this.options.hiddenRuns]);
    if (key === this.legendKey) return;
    this.legendKey = key;
    this.legendEl.replaceChildren(...legendItems(this.host));
  }

  runNames() {
    return this.compare ? this.model.get("runs") : Array.from(this.link.runs.keys());
  }

  // -- tags and charts: created once per tag, drawn when what they show changed --------------

  // The tag filter (a regular expression, as TensorBoard's): a test of a tag, and whether the
  // filter reads as one.
  tagFilter() {
    const source = this.settings().filter || "";
    try {
      const pattern = new RegExp(source, "i");
      return {valid: true, test: (tag) => pattern.test(tag)};
    } catch (error) {
      return {valid: false, error: error.message, test: () => true};
    }
  }

  // The best values, compactly: one item per metric, those the tag filter keeps.
  renderBest() {
    const filter = this.tagFilter();
    const best = (this.link.state.best || []).filter(([tag]) => filter.test(tag));
    while (this.bestEl.children.length > best.length) this.bestEl.lastElementChild.remove();
    best.forEach(([tag, text], i) => {
      if (i >= this.bestEl.children.length) {
        const item = el("li");
        item.append(userEl("span", "jsv-best-tag"), el("span", "jsv-best-value"));
        this.bestEl.append(item);
      }
      const [name, value] = this.bestEl.children[i].children;
      setUserText(name, tag);
      setText(value, `: ${text}`);
    });
  }

  renderCharts() {
    const tags = new Set();
    for (const run of this.runNames()) {
      for (const tag of this.link.runs.get(run)?.keys() || []) tags.add(tag);
    }
    const all = this.allTags = Array.from(tags).sort();
    const settings = this.settings();
    const hidden = new Set(settings.hidden);
    const filter = this.tagFilter();
    this.filterBox.setAttribute("aria-invalid", String(!filter.valid));
    this.filterBox.title = filter.valid ? "" : `Not a regular expression: ${filter.error}`;
    const sorted = all.filter(filter.test);
    setText(this.filterCount, settings.filter && all.length ? `${sorted.length} of ${all.length}`
      : "");
    syncChildren(this.tagsEl, this.chips, sorted, (tag) => this.makeChip(tag));
    for (const [tag, chip] of this.chips) {
      const pressed = hidden.has(tag) ? "false" : "true";
      if (chip.getAttribute("aria-pressed") !== pressed) chip.setAttribute("aria-pressed", pressed);
    }
    showIf(this.tagsEl, sorted.length > 1);
    // Charts grouped by the tag's prefix (train/loss: "train"), as TensorBoard groups them;
    // tags without one come first, in a group without a heading.
    const wanted = sorted.filter((tag) => !hidden.has(tag));
    const byGroup = new Map();
    for (const tag of wanted) {
      const prefix = tag.includes("/") ? tag.slice(0, tag.indexOf("/")) : "";
      if (!byGroup.has(prefix)) byGroup.set(prefix, []);
      byGroup.get(prefix).push(tag);
    }
    const prefixes = Array.from(byGroup.keys()).sort();
    syncChildren(this.chartsEl, this.groups, prefixes, (prefix) => this.makeGroup(prefix));
    const closed = new Set(settings.closedGroups);
    for (const [prefix, group] of this.groups) {
      const members = byGroup.get(prefix);
      if (group.summary) {
        setText(group.count, ` (${members.length})`);
        if (group.el.open === closed.has(prefix)) group.el.open = !closed.has(prefix);
      }
      syncChildren(group.box, group.charts, members, (tag) => {
        const chart = new Chart(this.host, tag);
        this.charts.set(tag, chart);
        this.chartOf.set(chart.el, chart);
        this.seen.observe(chart.el);
        return chart;
      });
    }
    const kept = new Set(wanted);
    for (const [tag, chart] of this.charts) {
      if (kept.has(tag)) {
        chart.zoom = settings.zoom[tag] || null;
      } else {
        this.charts.delete(tag);
        this.seen.unobserve(chart.el);
      }
    }
    this.updateCharts();
  }

  // A group of charts: a collapsible section named by the prefix (its state kept with the
  // settings), or, for the tags without a prefix, a plain one.
  makeGroup(prefix) {
    const group = {charts: new Map(), box: el("div", "jsv-group-charts")};
    if (prefix) {
      group.el = el("details", "jsv-group");
      group.el.open = true;
      group.summary = el("summary");
      group.count = el("span");
      group.summary.append(userEl("span", "jsv-group-name", prefix), group.count);
      group.el.append(group.summary, group.box);
      group.el.addEventListener("toggle", () => {
        const closed = new Set(this.settings().closedGroups);
        if (group.el.open === !closed.has(prefix)) return;
        if (group.el.open) closed.delete(prefix); else closed.add(prefix);
        this.change({closedGroups: Array.from(closed).sort()});
        this.updateCharts();
      });
    } else {
      group.el = el("div", "jsv-group jsv-group-plain");
      group.el.append(group.box);
    }
    group.el.dataset.group = prefix;
    group.remove = () => {
      for (const chart of group.charts.values()) chart.remove();
      group.el.remove();
    };
    return group;
  }

  makeChip(tag) {
    const chip = userEl("button", "jsv-tag", tag);
    chip.addEventListener("click", () => {
      const hidden = new Set(this.settings().hidden);
      if (hidden.has(tag)) hidden.delete(tag); else hidden.add(tag);
      this.change({hidden: Array.from(hidden).sort()});
    });
    return chip;
  }

  // Draws the charts on screen whose points or settings changed (those of a closed group when
  // it opens); the others count their points and are drawn when they come into view, so that
  // a view of hundreds of tags answers a click at once. Where each chart is, is read first,
  // all in one layout.
  updateCharts() {
    const started = performance.now();
    const open = [];
    for (const group of this.groups.values()) {
      if (group.el.open !== false) open.push(...group.charts.values());
    }
    const bottom = window.innerHeight + NEAR_PX;
    const near = open.map((chart) => {
      const r = chart.el.getBoundingClientRect();
      return r.width > 0 && r.bottom > -NEAR_PX && r.top < bottom;
    });
    let drawn = 0;
    open.forEach((chart, i) => { if (chart.update(near[i])) drawn += 1; });
    if (drawn) this.chartsEl.dataset.drawMs = String(performance.now() - started);
  }

  readTheme() {
    const theme = readTheme(this.root, this.link.state.palette);
    if (theme.key === this.theme.key) return;
    this.setTheme(theme);
    this.renderState();
    this.renderHealth();
    this.updateCharts();
  }

  setTheme(theme) {
    this.theme = theme;
    this.root.style.setProperty("--jsv-error-text", theme.tones.error);
    // What the canvas draws its labels in, on what (for a reader of the page: its contrast).
    this.root.dataset.jsvInk = theme.text || "";
    this.root.dataset.jsvBackground = theme.background;
  }

  destroy() {
    this.link.detach(this);
    this.unwatchTheme();
    this.resize.disconnect();
    this.seen.disconnect();
    this.restoreShortcuts();
    this.model.off("change:settings", this.onSettings);
    for (const chart of this.charts.values()) chart.remove();
  }
}

export default {
  render({model, el: root}) {
    const view = new View(model, root);
    return () => view.destroy();
  },
};
