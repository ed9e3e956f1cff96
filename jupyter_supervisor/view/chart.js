// The charts of jupyter_supervisor's panel and comparison chart: one canvas per tag, with the
// curves of every run shown, hover readout (pinned by a click), zoom by drag, log scale,
// smoothing, an outlier-ignoring y range, markers for non-finite values, and the points as CSV
// and JSON; the numbers, scales and text it draws are scales.js's. A module of the front end
// (widget.py joins its files): the View (panel.js) owns the charts and gives each one its host,
// which is all a chart sees of the View.
//
// What a chart reads of its host:
// - host.series(run, tag): that run's points of the tag {steps, values, walls, version}, or
//   nothing;
// - host.runNames(): the runs shown, in order; host.compare: whether the view compares runs;
// - host.options: log, smoothing, xAxis, ignoreOutliers (the y range leaves outliers out; on
//   unless false), hiddenRuns (names of the runs not drawn: the comparison's legend);
// - host.theme: the canvas's colours and font {text, grid, frame, background, font, series
//   (run i takes series[i % series.length])}, read from the page's CSS; FALLBACK_THEME where
//   the View has none;
// - host.digits(): the state's `format.digits`, the significant digits of a value, as the
//   kernel writes it (Python's format "g"); DEFAULT_VALUE_DIGITS before a state says;
// - host.zoomed(tag, zoom): a drag, a double click or a key changed the chart's zoom (the View
//   keeps it with what the user set, and sets chart.zoom);
// - host.redraw(): the legend changed host.options.hiddenRuns (the View keeps it and draws);
// - host.tags(): the view's tags (a download's name tells them apart);
// - host.exportPoints(tag): a promise of every point of the tag, of each run, at full
//   resolution (Map(run -> {steps, values, walls})), or of null without a kernel.
// A series whose points are means of several (past the kernel's 2,000 a tag) has mins, maxs and
// counts too: its min/max band is drawn faint behind its line, and the readout says "mean of".
// The View calls update(), which draws only when what is drawn changed (each series carries a
// version). A chart can be focused: its keys move the readout's point and zoom (onKey), and
// its canvas has a text alternative (describe).

import {
  DEFAULT_VALUE_DIGITS, formatValue, tickLabels, formatDuration, formatClock, formatCount,
  shortNumber, X_AXES, smooth, linearTicks, logTicks, yExtent, bounds, padded, logScale,
  nonFiniteText, exportRows, toCsv, toJson, xTickLabels, fileName
} from "./scales.js";
import {download, el, isolated, setText, userEl} from "./dom.js";
import {PAD, frameOf, nearest, paintAxes, paintCurves, paintNonFinite} from "./paint.js";

const FALLBACK_THEME = {
  text: "#555", grid: "#e0e0e0", frame: "#9e9e9e", background: "#fff", font: "10px sans-serif",
  series: ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]};
const CHART_HEIGHT = 190;
const X_TICKS = 5, Y_TICKS = 4;

function themeOf(host) {
  return host.theme || FALLBACK_THEME;
}

function digitsOf(host) {
  return host.digits() || DEFAULT_VALUE_DIGITS;
}

// The downloads a chart offers: each format's button, file type and text.
const EXPORTS = {
  csv: {label: "CSV", type: "text/csv", text: toCsv},
  json: {label: "JSON", type: "application/json", text: toJson},
};

// -- one chart -------------------------------------------------------------------------------

// One chart: the curves of one tag for every run shown, with its own zoom, hover and pin.
// draw() computes the scene (curves, domains, ticks) from the points and the View's options;
// paint() puts the scene, the non-finite markers and the readout on the canvas (alone on
// hover).
export class Chart {
  constructor(host, tag) {
    this.host = host;
    this.tag = tag;
    this.zoom = null;       // {x: [lo, hi], y: [lo, hi] | null} in data units, or null
    this.hover = null;      // the mouse's x in pixels
    this.pin = null;        // {axis, x}: where the readout is pinned (x axis, data units)
    this.cursor = null;     // the keyboard's point: an index into the first curve's points
    this.drawn = null;      // what the canvas shows (drawKey)
    this.scene = null;
    this.el = el("div", "jsv-chart");
    this.el.dataset.tag = tag;
    const head = el("div", "jsv-chart-head");
    this.title = el("div", "jsv-chart-title");
    this.titleText = el("span", "jsv-chart-value");
    this.titleTag = userEl("span", "jsv-chart-tag", tag);
    this.titleValue = el("span", "jsv-chart-newest");
    this.titleText.append(this.titleTag, " ", this.titleValue);
    this.nonFinite = el("span", "jsv-chart-nonfinite");
    this.title.append(this.titleText, this.nonFinite);
    const actions = el("span", "jsv-chart-export");
    for (const [format, spec] of Object.entries(EXPORTS)) {
      const button = el("button", `jsv-download-${format}`, spec.label);
      button.title = `Download every point of this tag as ${spec.label}, as the event files ` +
        "hold it (step, wall time, value, smoothed value, run)";
      button.addEventListener("click", () => this.download(format));
      actions.append(button);
    }
    head.append(this.title, actions);
    this.notice = el("div", "jsv-chart-notice");
    this.box = el("div", "jsv-canvas-box");
    this.box.style.height = `${CHART_HEIGHT}px`;  // the canvas's height, in CSS pixels
    // Focusable, with its text alternative (set at each draw) and its keys (onKey).
    this.box.tabIndex = 0;
    this.box.setAttribute("role", "img");
    this.box.setAttribute("aria-roledescription", "chart");
    this.canvas = el("canvas");
    this.zoomBox = el("div", "jsv-zoom-box");
    this.box.append(this.canvas, this.zoomBox);
    this.readout = el("div", "jsv-readout");
    this.readout.dataset.pinned = "false";
    this.readout.setAttribute("aria-live", "polite");
    this.hint = el("div", "jsv-readout-hint");
    this.el.append(head, this.notice, this.box, this.readout, this.hint);
    this.listen();
  }

  listen() {
    const box = this.box;
    let press = null;
    const local = (e) => {
      const r = box.getBoundingClientRect();
      return [e.clientX - r.left, e.clientY - r.top];
    };
    box.addEventListener("mousedown", (e) => { press = local(e); e.preventDefault(); });
    box.addEventListener("mousemove", (e) => {
      const [x, y] = local(e);
      this.hover = x;
      if (press && Math.abs(x - press[0]) >= 5) {
        const s = this.zoomBox.style;
        s.display = "block";
        s.left = `${Math.min(press[0], x)}px`; s.width = `${Math.abs(x - press[0])}px`;
        s.top = `${Math.min(press[1], y)}px`; s.height = `${Math.abs(y - press[1])}px`;
      }
      this.paint();
    });
    box.addEventListener("mouseleave", () => { this.hover = null; this.paint(); });
    window.addEventListener("mouseup", this.onUp = (e) => {
      if (!press) return;
      const start = press;
      press = null;
      this.zoomBox.style.display = "none";
      if (this.frame) this.release(start, local(e));
    });
    box.addEventListener("dblclick", () => this.setZoom(null));
    box.addEventListener("keydown", (e) => this.onKey(e));
    box.addEventListener("blur", () => {
      if (this.cursor === null) return;
      this.cursor = null;
      this.paint();
    });
  }

  setZoom(zoom) {
    this.zoom = zoom;
    this.host.zoomed(this.tag, zoom);
    this.update();
  }

  // The keys of a focused chart: arrows move the readout's point (with Shift, a tenth of the
  // points), Home / End go to the first / last; + and - zoom the x axis in and out around it,
  // 0 shows everything again.
  onKey(e) {
    const s = this.scene;
    if (!s) return;
    const xs = s.lines[0].xs, last = xs.length - 1;
    const at = this.cursor === null ? last : Math.min(this.cursor, last);
    const stride = e.shiftKey ? Math.max(1, Math.round(xs.length / 10)) : 1;
    const moves = {ArrowLeft: at - stride, ArrowRight: at + stride, Home: 0, End: last};
    if (e.key in moves) {
      this.cursor = Math.max(0, Math.min(last, moves[e.key]));
      this.paint();
    } else if (e.key === "+" || e.key === "=" || e.key === "-") {
      const full = padded(bounds(s.lines.flatMap((l) => l.xs)),
                          this.host.options.xAxis === "step");
      const half = ((s.x[1] - s.x[0]) / 2) * (e.key === "-" ? 2 : 0.5);
      this.cursor = at;
      this.setZoom(e.key === "-" && 2 * half >= full[1] - full[0] ? null
        : {x: [Math.max(full[0], xs[at] - half), Math.min(full[1], xs[at] + half)], y: null});
    } else if (e.key === "0") {
      this.setZoom(null);
    } else {
      return;
    }
    e.preventDefault();
  }

  // What the canvas shows depends on: each curve's points (their version), the options, the
  // zoom, the number format, the theme and the size (the mouse, the pin and the keyboard's
  // point only repaint).
  drawKey() {
    const versions = this.host.runNames().map(
      (run) => this.host.series(run, this.tag)?.version ?? 0);
    return JSON.stringify([versions, this.host.options, this.zoom, digitsOf(this.host),
                           themeOf(this.host).key, this.box.clientWidth,
                           window.devicePixelRatio || 1]);
  }

  // Draws if anything drawn changed; true if it drew. Off screen (`onScreen` false) it only
  // says how many points and runs it holds, and is drawn when the View calls it on screen.
  update(onScreen = true) {
    if (!onScreen) {
      this.count();
      return false;
    }
    const key = this.drawKey();
    if (key === this.drawn) return false;
    this.draw();
    this.drawn = key;
    this.el.dataset.draws = String(Number(this.el.dataset.draws || 0) + 1);
    return true;
  }

  // Its title (text a search of the page finds) and the points and runs it would draw (as
  // attributes), without drawing: draw writes them too.
  count() {
    const hidden = this.host.options.hiddenRuns || [];
    const lines = this.host.runNames().filter((run) => !hidden.includes(run)).map(
      (run) => ({run, series: this.host.series(run, this.tag)})).filter(
      (l) => l.series && l.series.steps.length);
    this.writeTitle(lines, digitsOf(this.host));
    const d = this.el.dataset, runs = lines.map((l) => l.run).join(",");
    const points = String(lines.reduce((n, l) => n + l.series.steps.length, 0));
    const said = {points, runs, xaxis: this.host.options.xAxis, zoomed: String(!!this.zoom)};
    for (const [key, value] of Object.entries(said)) if (d[key] !== value) d[key] = value;
  }

  // The chart's text alternative: its tag, and for each curve its last value and its range.
  describe(lines, digits) {
    if (!lines.length) return `${this.tag}: no points yet`;
    const curves = lines.map((l) => {
      const s = l.series, last = s.values.length - 1;
      const [lo, hi] = bounds(s.values);
      const run = lines.length > 1 || this.host.compare ? `${l.run}: ` : "";
      const range = Number.isFinite(lo)
        ? `, from ${formatValue(lo, digits)} to ${formatValue(hi, digits)}` : "";
      const [first, newest] = [formatCount(s.steps[0]), formatCount(s.steps[last])];
      return `${run}last ${formatValue(s.values[last], digits)} at step ${newest}` +
             `${range} over steps ${first} to ${newest}`;
    });
    return `${this.tag}: ${curves.join("; ")}`;
  }

  // A press released: a drag zooms into its box (only x where it was flat), a click unpins
  // the readout, or pins it where it was in the plot.
  release(start, [x, y]) {
    const f = this.frame;
    if (Math.abs(x - start[0]) < 5) {
      if (Math.abs(y - start[1]) >= 5) return;
      if (this.pinned()) this.pin = null;
      else if (x >= PAD.left && x <= PAD.left + f.w) {
        this.pin = {axis: this.host.options.xAxis, x: f.xData(x)};
      }
      this.paint();
      return;
    }
    const ys = Math.abs(y - start[1]) < 5 ? null
      : [f.yValue(Math.max(y, start[1])), f.yValue(Math.min(y, start[1]))];
    this.setZoom({x: [f.xData(Math.min(x, start[0])), f.xData(Math.max(x, start[0]))], y: ys});
  }

  // A pin holds on the x axis it was made on.
  pinned() {
    return this.pin !== null && this.pin.axis === this.host.options.xAxis;
  }

  remove() {
    window.removeEventListener("mouseup", this.onUp);
    this.el.remove();
  }

  // The curves of the runs drawn: each run's points, x values, smoothed values and colour (a
  // run keeps its colour when another is hidden).
  curves() {
    const opts = this.host.options;
    const axis = X_AXES[opts.xAxis];
    const hidden = opts.hiddenRuns || [];
    const palette = themeOf(this.host).series;
    const lines = [];
    this.host.runNames().forEach((run, index) => {
      const series = this.host.series(run, this.tag);
      if (hidden.includes(run) || !series || !series.steps.length) return;
      lines.push({run, series, xs: series.steps.map((_, i) => axis.of(series, i)),
                  smoothed: smooth(series.values, opts.smoothing),
                  colour: palette[index % palette.length]});
    });
    return lines;
  }

  draw() {
    const lines = this.curves();
    const digits = digitsOf(this.host);
    this.writeTitle(lines, digits);
    this.box.setAttribute("aria-label", this.describe(lines, digits));
    this.el.dataset.points = String(lines.reduce((n, l) => n + l.xs.length, 0));
    this.el.dataset.runs = lines.map((l) => l.run).join(",");
    this.el.dataset.band = String(lines.some((l) => !!l.series.mins));
    this.scene = lines.length ? this.scale(lines, digits) : null;
    this.notice.textContent = this.scene ? this.scene.notice : "";
    if (this.scene) this.record(this.scene);
    this.paint();
  }

  writeTitle(lines, digits) {
    const newest = lines.map((l) => {
      const i = l.series.values.length - 1;
      const step = formatCount(l.series.steps[i]);
      const run = lines.length > 1 ? isolated(l.run) + " " : "";
      return `${run}${formatValue(l.series.values[i], digits)} (step ${step})`;
    });
    setText(this.titleValue, newest.length ? "= " + newest.join(", ") : "");
    const nonFinite = nonFiniteText(lines);
    setText(this.nonFinite, nonFinite ? ` · ${nonFinite}` : "");
    if (this.el.dataset.nonfinite !== nonFinite) this.el.dataset.nonfinite = nonFinite;
  }

  // Domains (x in data units, y in the scale's: log10 of the value on a log axis) and ticks.
  // Without a zoom, x spans every point and y the values in view, outliers left out when the
  // View's option says so.
  scale(lines, digits) {
    const opts = this.host.options;
    const integer = opts.xAxis === "step";
    let x = this.zoom ? this.zoom.x : padded(bounds(lines.flatMap((l) => l.xs)), integer);
    if (!(x[1] > x[0])) x = padded([x[0], x[0]], integer);
    const {log, notice} = logScale(lines, opts.log);
    const toY = log ? (v) => (v > 0 ? Math.log10(v) : NaN) : (v) => v;
    const zoomed = this.zoom && this.zoom.y && this.zoom.y.map(toY);
    let y;
    if (zoomed && zoomed.every(Number.isFinite) && zoomed[1] > zoomed[0]) {
      y = zoomed;
    } else {
      const raw = [], smoothed = [];
      for (const l of lines) {
        l.xs.forEach((xv, i) => {
          if (xv >= x[0] && xv <= x[1]) {
            raw.push(toY(l.series.values[i]));
            smoothed.push(toY(l.smoothed[i]));
          }
        });
      }
      y = padded(yExtent(raw, smoothed, opts.ignoreOutliers !== false) || [NaN, NaN]);
    }
    const yTicks = log ? logTicks(Math.pow(10, y[0]), Math.pow(10, y[1]), Y_TICKS)
      : linearTicks(y[0], y[1], Y_TICKS);
    const {ticks: xTicks, labels: xLabels} = xTickLabels(
      opts.xAxis, linearTicks(x[0], x[1], X_TICKS, integer));
    return {lines, log, toY, x, y, notice, xTicks, xLabels, yTicks,
            yLabels: tickLabels(yTicks, digits), digits};
  }

  // What the chart shows, as attributes (read by tests and by whoever inspects the page).
  record(s) {
    const d = this.el.dataset;
    d.yscale = s.log ? "log" : "linear";
    d.xaxis = this.host.options.xAxis;
    d.xDomain = s.x.map(shortNumber).join(",");
    d.yDomain = s.y.map((v) => shortNumber(s.log ? Math.pow(10, v) : v)).join(",");
    d.yTicks = s.yLabels.join(",");
    d.xTicks = s.xLabels.join("|");
    d.zoomed = this.zoom ? "true" : "false";
  }

  // The canvas at the box's size, cleared.
  context() {
    this.width = Math.max(100, this.box.clientWidth || 330);
    const ratio = window.devicePixelRatio || 1;
    const [w, h] = [Math.round(this.width * ratio), Math.round(CHART_HEIGHT * ratio)];
    if (this.canvas.width !== w) this.canvas.width = w;
    if (this.canvas.height !== h) this.canvas.height = h;
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, this.width, CHART_HEIGHT);
    return ctx;
  }

  paint() {
    const ctx = this.context();
    const s = this.scene;
    if (!s) {
      this.frame = null;
      this.writeReadout("", false);
      return;
    }
    const f = this.frame = frameOf(s, this.width, CHART_HEIGHT);
    const theme = themeOf(this.host);
    paintAxes(ctx, s, f, theme);
    ctx.save();
    ctx.beginPath(); ctx.rect(PAD.left, PAD.top, f.w, f.h); ctx.clip();
    paintCurves(ctx, s, f, this.host.options.smoothing > 0);
    ctx.restore();
    ctx.globalAlpha = 1;
    paintNonFinite(ctx, s, f, theme);
    this.paintReadout(ctx, s, f, theme);
  }

  // The value of each run at the pinned x, else under the mouse, else at the keyboard's point:
  // marked on the canvas and written as text below it.
  paintReadout(ctx, s, f, theme) {
    const pinned = this.pinned();
    const hovering = this.hover !== null && this.hover >= PAD.left && this.hover <= PAD.left + f.w;
    if (!pinned && !hovering && this.cursor === null) { this.writeReadout("", false); return; }
    const xs = s.lines[0].xs;
    const target = pinned ? this.pin.x : hovering ? f.xData(this.hover)
      : xs[Math.min(this.cursor, xs.length - 1)];
    const smoothing = this.host.options.smoothing > 0;
    if (pinned && target >= s.x[0] && target <= s.x[1]) {
      ctx.strokeStyle = theme.frame;
      ctx.lineWidth = 1;
      ctx.setLineDash([3, 3]);
      ctx.beginPath(); ctx.moveTo(f.px(target), PAD.top); ctx.lineTo(f.px(target), PAD.top + f.h);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    const rows = [];
    for (const l of s.lines) {
      const i = nearest(l.xs, target);
      const raw = l.series.values[i], sm = l.smoothed[i];
      const y = s.toY(smoothing ? sm : raw);
      if (Number.isFinite(y)) {
        ctx.fillStyle = l.colour;
        ctx.beginPath(); ctx.arc(f.px(l.xs[i]), f.py(y), 3.5, 0, 2 * Math.PI); ctx.fill();
      }
      const ser = l.series, merged = ser.counts ? ser.counts[i] : 1;
      // A merged point is no value the run logged: its mean, of how many, and their range.
      const rawText = merged > 1 ? `mean of ${merged}: ${formatValue(raw, s.digits)}, ` +
        `${formatValue(ser.mins[i], s.digits)} to ${formatValue(ser.maxs[i], s.digits)}`
        : `raw ${formatValue(raw, s.digits)}`;
      const value = smoothing ? `${formatValue(sm, s.digits)} (${rawText})`
        : merged > 1 ? rawText : formatValue(raw, s.digits);
      rows.push(`${s.lines.length > 1 || this.host.compare ? isolated(l.run) + ": " : ""}` +
                `${value}  step ` +
                `${formatCount(ser.steps[i])}  ${formatClock(ser.walls[i])}  ` +
                `+${formatDuration(ser.walls[i] - ser.walls[0])}`);
    }
    this.writeReadout(rows.join("\n"), pinned);
  }

  // Written only when it changed: a redraw for new points must not drop the user's selection
  // of a pinned readout.
  writeReadout(text, pinned) {
    if (this.readout.textContent !== text) this.readout.textContent = text;
    this.readout.dataset.pinned = pinned ? "true" : "false";
    const hint = pinned ? "pinned: select to copy; click the chart to release" : "";
    if (this.hint.textContent !== hint) this.hint.textContent = hint;
  }

  // Every point of the runs drawn, at full resolution (the kernel reads the event files), as a
  // file: <run or "compare">-<tag>.csv / .json, smoothed as drawn. Without a kernel, the points
  // held, and the chart says so.
  async download(format) {
    const spec = EXPORTS[format];
    const name = this.host.compare ? "compare" : this.host.runNames()[0];
    const full = await this.host.exportPoints(this.tag);
    const lines = this.curves().map((l) => {
      const p = full && full.get(l.run);
      if (!p) return l;
      const series = {steps: Array.from(p.steps), values: Array.from(p.values),
                      walls: Array.from(p.walls)};
      return {run: l.run, series, smoothed: smooth(series.values, this.host.options.smoothing)};
    });
    this.el.dataset.exported = full ? "full" : "drawn";
    if (!full) this.notice.textContent = "no answer from the kernel: the file has the points drawn";
    download(fileName(name, this.tag, this.host.tags(), format), spec.type,
             spec.text(exportRows(lines)));
  }
}

// The comparison's legend: a button per run in its colour; a click hides the run in every
// chart of the view, or shows it again (host.options.hiddenRuns).
export function legendItems(host) {
  const palette = themeOf(host).series;
  return host.runNames().map((run, i) => {
    const item = userEl("button", "jsv-legend-item", run);
    item.style.setProperty("--c", palette[i % palette.length]);
    item.setAttribute("aria-description", "Hide or show this run in the charts");
    const shown = () => !host.options.hiddenRuns.includes(run);
    item.setAttribute("aria-pressed", String(shown()));
    item.addEventListener("click", () => {
      const hidden = host.options.hiddenRuns.filter((r) => r !== run);
      if (shown()) hidden.push(run);
      host.options.hiddenRuns = hidden;
      item.setAttribute("aria-pressed", String(shown()));
      host.redraw();
    });
    return item;
  });
}
