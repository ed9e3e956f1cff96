// The numbers, times and scales of the charts, with nothing of the page (no DOM: node runs this
// file alone, tests/test_chart_js.py): values written as Python's format "g" writes them (the
// kernel's text.format_value), steps, durations and clock times, the x axes, TensorBoard's
// smoothing, 1-2-5 ticks on linear and log axes, the outlier-ignoring y range, what a log axis
// cannot show, the non-finite count, and the points as CSV and JSON. The one place the front end
// writes a number or a time as text: the charts (chart.js) and the View (panel.js) take their
// formats from here.

export const DEFAULT_VALUE_DIGITS = 5;
// TensorBoard's outlier range: the 5th to the 95th percentile of the values in view.
const OUTLIER_QUANTILES = [0.05, 0.95];

// -- numbers and times as text -------------------------------------------------------------

// A value as Python's format(v, f".{digits}g") writes it (the kernel's best values and the
// saved notebook's text): 123456 is "1.2346e+05" on both sides.
export function formatValue(v, digits = DEFAULT_VALUE_DIGITS) {
  if (Number.isNaN(v)) return "nan";
  if (!Number.isFinite(v)) return v > 0 ? "inf" : "-inf";
  const p = Math.max(1, digits);
  const sign = v < 0 || Object.is(v, -0) ? "-" : "";
  const [kept, exp] = roundedDigits(Math.abs(v), p);
  const trim = (s) => s.replace(/\.?0*$/, "");
  if (exp >= -4 && exp < p) {
    const text = exp >= 0 ? `${kept.slice(0, exp + 1)}.${kept.slice(exp + 1)}`
                          : `0.${"0".repeat(-exp - 1)}${kept}`;
    return sign + trim(text);
  }
  const mantissa = p > 1 ? trim(`${kept[0]}.${kept.slice(1)}`) : kept;
  return `${sign}${mantissa}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
}

// The first p significant digits of a >= 0 and the decimal exponent of the first, rounded
// half to even as Python rounds (JavaScript's toPrecision rounds a tie up). toExponential(100)
// is exact for a double whose expansion fits in 101 digits; no tie needs more.
function roundedDigits(a, p) {
  if (a === 0) return ["0".repeat(p), 0];
  const [mantissa, expText] = a.toExponential(100).split("e");
  const all = mantissa.replace(".", "");
  let kept = all.slice(0, p), exp = Number(expText);
  const rest = all.slice(p), half = "5".padEnd(rest.length, "0");
  if (rest > half || (rest === half && Number(kept[p - 1]) % 2 === 1)) {
    kept = String(BigInt(kept) + 1n);
    if (kept.length > p) { kept = kept.slice(0, p); exp += 1; }
  }
  return [kept, exp];
}

// Tick labels: the value's digits, more where neighbouring ticks would read the same.
export function tickLabels(ticks, digits) {
  for (let d = digits; d < 17; d++) {
    const labels = ticks.map((t) => formatValue(t, d));
    if (new Set(labels).size === labels.length) return labels;
  }
  return ticks.map((t) => formatValue(t, 17));
}

// A step as the kernel's format_step writes it: 950, 12k, 1.5M.
export function formatStep(s) {
  return stepText(s, 1);
}

// A step with `decimals` digits at most after the point of a k, M or G.
function stepText(s, decimals) {
  for (const [limit, suffix] of [[1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
    if (Math.abs(s) >= limit) return String(Number((s / limit).toFixed(decimals))) + suffix;
  }
  return String(Math.round(s));
}

// Seconds rounded to `decimals` digits after the point: [whole seconds, "" or ".25"].
function splitSeconds(seconds, decimals) {
  const scale = Math.pow(10, decimals), units = Math.round(seconds * scale);
  const whole = Math.floor(units / scale);
  const fraction = decimals ? "." + String(units - whole * scale).padStart(decimals, "0") : "";
  return [whole, fraction];
}

// A duration down to its seconds, with `decimals` digits after their point: "29.5 s",
// "3 min 05.25 s", "1 h 05 min 30 s" (finer than formatDuration, for ticks close together).
function formatSeconds(seconds, decimals) {
  const [whole, fraction] = splitSeconds(Math.max(0, seconds), decimals);
  const s = whole % 60, m = Math.floor(whole / 60) % 60, h = Math.floor(whole / 3600);
  const sec = `${String(s).padStart(h || m ? 2 : 1, "0")}${fraction} s`;
  if (!h && !m) return sec;
  return h ? `${h} h ${String(m).padStart(2, "0")} min ${sec}` : `${m} min ${sec}`;
}

export function formatDuration(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  if (seconds < 60) return `${seconds} s`;
  const m = Math.floor(seconds / 60), s = seconds % 60;
  if (m < 60) return `${m} min ${String(s).padStart(2, "0")} s`;
  const h = Math.floor(m / 60);
  return `${h} h ${String(m % 60).padStart(2, "0")} min`;
}

const two = (x) => String(x).padStart(2, "0");

// A wall time (epoch seconds) as the browser's local clock time: 01:20:17.
export function formatClock(wall) {
  const d = new Date(wall * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map(two).join(":");
}

// A tick's clock time, rounded to `decimals` digits after the seconds' point; `date`: the
// month and day before it (12-06 01:20:17).
function clockText(wall, decimals, date) {
  const [whole, fraction] = splitSeconds(wall, decimals);
  const d = new Date(whole * 1000);
  const day = date ? `${two(d.getMonth() + 1)}-${two(d.getDate())} ` : "";
  return day + formatClock(whole) + fraction;
}

// A step or a count as the kernel writes it (Python's format ","): 1,064.
export function formatCount(n) {
  return n.toLocaleString("en-US");
}

// A fraction as a percentage with one decimal (no "%"): 0.5 is "50.0".
export function formatPercent(fraction) {
  return (fraction * 100).toFixed(1);
}

// A number in at most 6 significant digits, as short as it reads: the domains a chart records
// on its element.
export function shortNumber(v) {
  return String(Number(v.toPrecision(6)));
}

// The x axes: a point's x, its tick label, and finer labels, tried in order where ticks close
// together would read alike with the first: more digits of a step, the seconds and their
// fractions of a duration or a clock time, the date of clock times days apart.
const upTo = (n) => Array.from({length: n}, (_, i) => i);
export const X_AXES = {
  step: {label: "step", of: (s, i) => s.steps[i], tick: formatStep,
         finer: upTo(8).map((d) => (x) => stepText(x, d + 2))},
  relative: {label: "relative time", of: (s, i) => s.walls[i] - s.walls[0], tick: formatDuration,
             finer: upTo(4).map((d) => (x) => formatSeconds(x, d))},
  wall: {label: "wall time", of: (s, i) => s.walls[i], tick: formatClock,
         finer: [1, 2, 3, -1].map((d) => (x) => clockText(x, Math.max(0, d), d < 0))},
};

// The labels of the x axis' ticks, none like another at any zoom: the axis' format, or the
// first finer one that tells them apart; where none does, every other tick is left out until
// one does. Returns {ticks, labels}.
export function xTickLabels(axis, ticks) {
  const formats = [X_AXES[axis].tick, ...X_AXES[axis].finer];
  for (let shown = ticks; ; shown = shown.filter((_, i) => i % 2 === 0)) {
    for (const format of formats) {
      const labels = shown.map((t) => format(t));
      if (new Set(labels).size === labels.length) return {ticks: shown, labels};
    }
  }
}

// -- scales ----------------------------------------------------------------------------------

// TensorBoard's smoothing: an exponential moving average, debiased so that early points are
// not pulled toward zero; a constant series stays as it is, a non-finite value is kept and
// skipped.
export function smooth(values, weight) {
  if (weight <= 0 || values.every((v) => v === values[0])) return values.slice();
  let last = 0, count = 0;
  return values.map((v) => {
    if (!Number.isFinite(v)) return v;
    last = last * weight + (1 - weight) * v;
    count += 1;
    return last / (1 - Math.pow(weight, count));
  });
}

// m * 10^e as the double nearest to it (10^-e is exact up to e = -22, and one division
// rounds once): 3 * 10^-1 is 0.3, not 0.30000000000000004.
function decimal(m, e) {
  return e >= 0 ? m * Math.pow(10, e) : m / Math.pow(10, -e);
}

// About `count` ticks in [lo, hi] at the multiples of 1, 2 or 5 times a power of ten: the step
// nearest (by ratio) to the span / count, as d3 (TensorBoard's axes) picks it.
export function linearTicks(lo, hi, count, integer = false) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  let e = Math.floor(Math.log10(raw));
  const ratio = raw / decimal(1, e);
  let m = ratio >= Math.sqrt(50) ? 10 : ratio >= Math.sqrt(10) ? 5 : ratio >= Math.sqrt(2) ? 2 : 1;
  if (m === 10) { m = 1; e += 1; }
  if (integer && e < 0) { m = 1; e = 0; }
  const step = decimal(m, e);
  const out = [];
  for (let k = Math.ceil(lo / step - 1e-9); k <= Math.floor(hi / step + 1e-9); k++) {
    out.push(decimal(k * m, e) + 0);  // + 0: no "-0"
  }
  return out;
}

// Ticks of a log axis over [lo, hi] (both > 0): 1, 2 and 5 times the powers of ten where they
// are few enough, else the powers of ten (every n-th decade where even those are too many);
// within less than a decade the linear ticks, whose steps are 1, 2 or 5 too.
export function logTicks(lo, hi, count) {
  const first = Math.floor(Math.log10(lo)), last = Math.ceil(Math.log10(hi));
  const within = (mantissas, every = 1) => {
    const out = [];
    for (let e = first; e <= last; e++) {
      if (e % every !== 0) continue;
      for (const m of mantissas) {
        const t = decimal(m, e);
        if (t >= lo * (1 - 1e-12) && t <= hi * (1 + 1e-12)) out.push(t);
      }
    }
    return out;
  };
  const fine = within([1, 2, 5]);
  if (fine.length < 2) return linearTicks(lo, hi, count);
  if (fine.length <= count + 2) return fine;
  for (let every = 1; ; every++) {
    const decades = within([1], every);
    if (decades.length <= count + 2) return decades;
  }
}

// The R-7 quantile (d3's, TensorBoard's) of sorted values.
function quantile(sorted, p) {
  const h = (sorted.length - 1) * p, i = Math.floor(h);
  return i + 1 < sorted.length ? sorted[i] + (h - i) * (sorted[i + 1] - sorted[i]) : sorted[i];
}

// [lowest, highest] of the finite values, or null. With `ignoreOutliers`, of the values that
// lie within half the 5th-95th percentile range of that range: the first epochs of a loss
// curve and a diverging spike stay off the scale, as in TensorBoard, while the ends of a short
// clean series (the first of five epochs) and the tips of its noise stay on it (TensorBoard's
// range, the percentile range itself, cuts those off).
export function extent(values, ignoreOutliers) {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (!sorted.length) return null;
  if (!ignoreOutliers || sorted.length <= 2) return [sorted[0], sorted[sorted.length - 1]];
  const [low, high] = OUTLIER_QUANTILES.map((p) => quantile(sorted, p));
  const margin = (high - low) / 2;
  return [sorted.find((v) => v >= low - margin), sorted.findLast((v) => v <= high + margin)];
}

// The y range of a chart: of its raw values and its smoothed ones (in the scale's units).
// Ignoring outliers, of the raw values only, outliers left out (extent): the smoothed line's
// warm-up after a first value far above the rest (a loss from 13) is the outliers' trace, and
// goes off the chart with them; elsewhere a smoothed value lies within the raw ones around it.
export function yExtent(raw, smoothed, ignoreOutliers) {
  return ignoreOutliers ? extent(raw, true) : extent(raw.concat(smoothed), false);
}

export function bounds(values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) { if (Number.isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; } }
  return [lo, hi];
}

export function padded([lo, hi], integer = false) {
  if (!Number.isFinite(lo)) return [0, 1];
  if (hi <= lo) {
    const pad = integer || lo === 0 ? 1 : Math.abs(lo) * 0.05;
    return [lo - pad, hi + pad];
  }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

// Whether a log axis can show the curves, and what it leaves out: a chart with no value above
// 0 stays linear, one with some values at or below 0 says how many it does not draw.
export function logScale(lines, wanted) {
  if (!wanted) return {log: false, notice: ""};
  let positive = 0, other = 0;
  for (const l of lines) {
    for (const v of l.series.values) {
      if (v > 0 && v < Infinity) positive += 1; else if (v <= 0 && v > -Infinity) other += 1;
    }
  }
  if (!positive) return {log: false, notice: "log scale: no value above 0, drawn linear"};
  const values = other === 1 ? "value" : "values";
  return {log: true, notice: other ? `log scale: ${other} ${values} ≤ 0 not drawn` : ""};
}

// "5 NaN, 3 inf, 1 -inf": the non-finite raw values of the curves drawn.
export function nonFiniteText(lines) {
  let nan = 0, inf = 0, negInf = 0;
  for (const l of lines) {
    for (const v of l.series.values) {
      if (Number.isNaN(v)) nan += 1; else if (v === Infinity) inf += 1;
      else if (v === -Infinity) negInf += 1;
    }
  }
  return [[nan, "NaN"], [inf, "inf"], [negInf, "-inf"]].filter(([n]) => n)
    .map(([n, what]) => `${n} ${what}`).join(", ");
}

// -- data out --------------------------------------------------------------------------------

// A download's file name, <run>-<tag>.<ext>: the letters and digits of every script kept (a
// Hebrew or Arabic tag names its file), any other character (a separator, a direction mark, a
// symbol) as "_", at most 60 characters of each. A tag with no letter or digit is named by its
// index among the view's `tags`, and one whose name another tag of the view would take too
// gets its index after it: two tags never download under one name.
export function fileName(run, tag, tags, ext) {
  const clean = (text) => Array.from(text.normalize("NFC")
    .replace(/[^\p{L}\p{M}\p{N}.-]+/gu, "_").replace(/^[_.]+|_+$/g, "")).slice(0, 60).join("");
  const named = (t) => (/[\p{L}\p{N}]/u.test(t) ? clean(t) : "");
  const index = tags.indexOf(tag);
  let tagPart = named(tag);
  if (!tagPart) tagPart = `tag-${index}`;
  else if (tags.some((t) => t !== tag && named(t) === tagPart)) tagPart += `-${index}`;
  return `${clean(run) || "run"}-${tagPart}.${ext}`;
}

const EXPORT_FIELDS = ["step", "wall_time", "value", "smoothed", "run"];

// Every point of the curves drawn (all of them, whatever the zoom), one row each.
export function exportRows(lines) {
  const rows = [];
  for (const l of lines) {
    const s = l.series;
    s.steps.forEach((step, i) => rows.push({step, wall_time: s.walls[i], value: s.values[i],
                                            smoothed: l.smoothed[i], run: l.run}));
  }
  return rows;
}

// Numbers as the shortest text that reads back the same double; non-finite ones as Python
// writes them ("nan", "inf", "-inf"), which float() and pandas read.
function numberText(v) {
  return Number.isFinite(v) ? String(v) : formatValue(v);
}

export function toCsv(rows) {
  const cell = (v) => (typeof v === "number" ? numberText(v)
    : /[",\n\r]/.test(v) ? `"${v.replace(/"/g, '""')}"` : v);
  const lines = rows.map((r) => EXPORT_FIELDS.map((f) => cell(r[f])).join(","));
  return [EXPORT_FIELDS.join(","), ...lines].join("\n") + "\n";
}

// JSON has no NaN or infinity: those values are the strings "nan", "inf", "-inf".
export function toJson(rows) {
  return JSON.stringify(rows.map((r) => Object.fromEntries(EXPORT_FIELDS.map((f) => {
    const v = r[f];
    return [f, typeof v === "number" && !Number.isFinite(v) ? numberText(v) : v];
  }))));
}
