"""The front end's numbers, times and scales (scales.js, the part of the charts with no page),
run by node without a browser: values written as Python writes them, steps, durations, clock
times, counts and percentages, 1-2-5 ticks on linear and log axes, smoothing, the
outlier-ignoring y range, what a log axis cannot show, the non-finite count, and the CSV/JSON a
chart downloads (read back by Python's csv and json); and the front end's files as modules,
joined into the one module anywidget loads.

Each test of scales.js runs the file itself (as the widget ships it) in node, as an ES module
with an expression appended; the expression's value comes back as JSON (non-finite numbers
travel as "nan", "inf", "-inf"). The browser-side behaviour (markers, notices, downloads,
pinning) is in test_browser_chart.py.
"""
import base64
import csv
import io
import json
import math
import os
import random
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from helpers import is_125_log, is_125_step
from jupyter_supervisor.view import text, widget

SCALES_JS = Path(text.__file__).with_name("scales.js")

# Values in and out of node: JSON has no NaN or infinity.
DECODE = """
import {readFileSync} from "node:fs";
const decode = (v) => (v === "nan" ? NaN : v === "inf" ? Infinity : v === "-inf" ? -Infinity
  : Array.isArray(v) ? v.map(decode)
  : v && typeof v === "object"
    ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, decode(x)]))
  : v);
const encode = (v) => (typeof v === "number" && !Number.isFinite(v) ? formatValue(v)
  : Array.isArray(v) ? v.map(encode) : v);
const input = decode(JSON.parse(readFileSync(0, "utf8")));
"""


def _js(expression: str, data=None, time_zone=None):
    """The value of ``expression`` (JavaScript, with scales.js's functions and ``input``, the
    decoded ``data``, in scope), computed by node (in ``time_zone``, else this machine's)."""
    source = (SCALES_JS.read_text(encoding="utf-8") + DECODE
              + f"\nprocess.stdout.write(JSON.stringify(encode({expression})));\n")
    return json.loads(_node(source, json.dumps(_encode(data)), time_zone))


def _node(source: str, stdin: str = "", time_zone=None) -> str:
    """What node prints running ``source`` as an ES module."""
    node = shutil.which("node")
    assert node, "node is missing: these tests run the front end in node (apt-get install nodejs)"
    env = dict(os.environ, TZ=time_zone) if time_zone else None
    done = subprocess.run([node, "--input-type=module", "-e", source], input=stdin, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _encode(value):
    if isinstance(value, float) and not math.isfinite(value):
        return text.format_value(value)
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def test_values_are_written_as_python_writes_them():
    # Issue 39's example, exact ties (JavaScript rounds them up, Python to even), both
    # notations' edges, float32 values (what TensorFlow logs) and random magnitudes.
    rng = random.Random(41)
    values = [123456.0, 1.03125, 12.5625, 0.125, 2.5, 99999.5, 999995.0, 0.0001, 0.00009999995,
              1e16, 1e-5, -0.0, 0.0, 5e-324, 1.7976931348623157e308, 0.30000000000000004,
              13.0, 0.005, -123.456, math.nan, math.inf, -math.inf]
    values += [rng.uniform(-1, 1) * 10 ** rng.randint(-12, 12) for _ in range(400)]
    values += [struct.unpack("f", struct.pack("f", rng.random()))[0] for _ in range(200)]
    values += [rng.randint(0, 2 ** 20) / 2 ** rng.randint(0, 12) for _ in range(400)]
    got = _js("input.map((v) => [1, 2, 3, 5, 6].map((d) => formatValue(v, d)))", values)
    for value, texts in zip(values, got):
        assert texts == [format(value, f".{d}g") for d in (1, 2, 3, 5, 6)], value
    # The kernel's text (the best values) and a chart's title read the same.
    assert _js("input.map((v) => formatValue(v))", values) == [text.format_value(v)
                                                               for v in values]
    assert _js("formatValue(123456)") == "1.2346e+05"


def test_steps_durations_clock_times_counts_and_percentages():
    # As the kernel writes them (text.py), where the two agree: a step that lies halfway
    # between two labels (1,250) rounds up here and to even in the kernel (1.3k, 1.2k), a
    # duration of a day or more is in hours here, and a fraction of a second is rounded.
    rng = random.Random(7)
    steps = [0, 7, 950, 999, 1000, 1049, 1500, 12000, 12345, 999_949, 1_500_000, 2.5e9, -1500]
    steps += [rng.randint(0, 10 ** rng.randint(1, 10)) for _ in range(300)]
    steps = [s for s in steps if not any(abs(s) % (limit / 10) == limit / 20 and abs(s) >= limit
                                         for limit in (1e3, 1e6, 1e9))]
    assert _js("input.map(formatStep)", steps) == [text.format_step(s) for s in steps]
    seconds = [0, 1, 59, 60, 61, 185, 3599, 3600, 7380, 86399]
    seconds += [rng.randrange(86400) for _ in range(200)]
    assert _js("input.map(formatDuration)", seconds) == [text.format_duration(s)
                                                         for s in seconds]
    assert _js("[formatDuration(-5), formatDuration(59.6), formatDuration(90000)]") == [
        "0 s", "1 min 00 s", "25 h 00 min"]
    # A clock time is the browser's local time, as the kernel's is the kernel's.
    walls = [0, 1700000000.25, 1700003599.999, rng.uniform(1.6e9, 1.8e9)]
    for zone, offset in (("UTC", 0), ("Etc/GMT-3", 3 * 3600)):
        assert _js("input.map(formatClock)", walls, time_zone=zone) == [
            time.strftime("%H:%M:%S", time.gmtime(int(w) + offset)) for w in walls]
    counts = [0, 7, 1064, 1234567, 10 ** 12]
    assert _js("input.map(formatCount)", counts) == [f"{n:,}" for n in counts]
    assert _js("[0, 0.5, 0.12345, 1].map(formatPercent)") == ["0.0", "50.0", "12.3", "100.0"]
    assert _js("[0.30000000000000004, 123456789, 1e-7, -2.5].map(shortNumber)") == [
        "0.3", "123457000", "1e-7", "-2.5"]


def test_the_x_axes_and_smoothing():
    series = {"steps": [10, 20, 30], "values": [1.0, 2.0, 3.0],
              "walls": [1700000000.0, 1700000065.0, 1700003700.0]}
    axes = _js("Object.entries(X_AXES).map(([key, axis]) => [key, axis.label, "
               "input.steps.map((_, i) => axis.tick(axis.of(input, i)))])", series)
    clock = [time.strftime("%H:%M:%S", time.localtime(w)) for w in series["walls"]]
    assert axes == [["step", "step", ["10", "20", "30"]],
                    ["relative", "relative time", ["0 s", "1 min 05 s", "1 h 01 min"]],
                    ["wall", "wall time", clock]]
    # TensorBoard's debiased moving average; a constant series, a weight of 0 and the
    # non-finite values stay as they are (those are skipped).
    values = [1.0, 2.0, math.nan, 3.0, math.inf, 0.5]
    expected, last, count = [], 0.0, 0
    for v in values:
        if math.isfinite(v):
            last, count = last * 0.6 + 0.4 * v, count + 1
            v = last / (1 - 0.6 ** count)
        expected.append(v)
    got = _js("smooth(input, 0.6)", values)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g == _encode(e) if not math.isfinite(e) else math.isclose(g, e, rel_tol=1e-12), (
            got, expected)
    assert _js("[smooth(input, 0), smooth([2, 2, 2], 0.9)]", values[:2]) == [values[:2],
                                                                           [2, 2, 2]]


ZOOM_WIDTHS = [3e6, 2e5, 9000, 5000, 700, 130, 61, 12, 5, 2, 1.1, 0.5, 0.07, 0.004]


@pytest.mark.parametrize("axis, centres", [
    ("step", [2400, 2_412_345, 1_999_999_999, 37]),
    ("relative", [29.7, 3725.0, 90_061.5, 7.0]),
    ("wall", [1_700_003_617.3, 1_700_000_000.0, 1_700_086_399.9]),
])
def test_x_tick_labels_read_apart_at_every_zoom(axis, centres):
    """At every zoom, from months to milliseconds, the x axis' labels are distinct: more digits
    where ticks are closer than the format's resolution, fewer ticks only where none helps."""
    ranges = [[max(0.0, c - w / 2), c + w / 2] for c in centres for w in ZOOM_WIDTHS]
    got = _js(f"input.map(([lo, hi]) => xTickLabels({axis!r}, "
              f"linearTicks(lo, hi, 5, {str(axis == 'step').lower()})))", ranges,
              time_zone="UTC")
    for (lo, hi), result in zip(ranges, got):
        ticks, labels = result["ticks"], result["labels"]
        assert len(set(labels)) == len(labels) == len(ticks), (axis, lo, hi, labels)
        assert len(ticks) >= 2 or (axis == "step" and hi - lo < 5), (axis, lo, hi, labels)


def test_x_tick_labels_keep_their_format_where_it_reads_apart():
    """The issue's repeated labels, now apart; the usual zoom as before."""
    def labels(axis, ticks):
        return _js(f"xTickLabels({axis!r}, input).labels", ticks, time_zone="UTC")
    assert labels("step", [2300, 2350, 2400, 2450, 2500]) == [
        "2.3k", "2.35k", "2.4k", "2.45k", "2.5k"]
    assert labels("step", [0, 500, 1000, 1500, 2000]) == ["0", "500", "1k", "1.5k", "2k"]
    assert labels("relative", [29, 29.5, 30, 30.5, 31]) == [
        "29.0 s", "29.5 s", "30.0 s", "30.5 s", "31.0 s"]
    assert labels("relative", [3600, 3630, 3660]) == [
        "1 h 00 min 00 s", "1 h 00 min 30 s", "1 h 01 min 00 s"]
    assert labels("relative", [0, 60, 120]) == ["0 s", "1 min 00 s", "2 min 00 s"]
    wall = 1_700_000_417.0   # 22:20:17 UTC
    assert labels("wall", [wall, wall + 0.2, wall + 0.4]) == [
        "22:20:17.0", "22:20:17.2", "22:20:17.4"]
    assert labels("wall", [wall, wall + 86400, wall + 2 * 86400]) == [
        "11-14 22:20:17", "11-15 22:20:17", "11-16 22:20:17"]
    assert labels("wall", [wall, wall + 10, wall + 20]) == ["22:20:17", "22:20:27", "22:20:37"]


@pytest.mark.parametrize("lo, hi", [(0, 13.6), (0.00478, 0.00962), (-0.1, 0.3), (0, 1e6),
                                    (-3e-7, 5e-7), (1000.001, 1000.004), (0.99, 1.01)])
def test_linear_ticks_are_1_2_5(lo, hi):
    ticks, labels = _js("[linearTicks(input[0], input[1], 4), "
                        "tickLabels(linearTicks(input[0], input[1], 4), 5)]", [lo, hi])
    assert 2 <= len(ticks) <= 7 and lo <= ticks[0] and ticks[-1] <= hi, ticks
    assert is_125_step(ticks), ticks
    assert len(set(labels)) == len(labels), labels  # 1000.001 and 1000.002 read apart
    assert "-0" not in labels and not any("000000" in label for label in labels), labels


@pytest.mark.parametrize("lo, hi, expected", [
    (0.3, 30, [0.5, 1, 2, 5, 10, 20]),
    (0.0063, 63, [0.01, 0.1, 1, 10]),          # the log axis: not 0.0063096, 63.096
    (1e-3, 10, [0.001, 0.01, 0.1, 1, 10]),
    (1e-8, 1e4, [1e-6, 1e-3, 1, 1e3]),         # every third decade of twelve
    (0.005, 0.008, [0.005, 0.006, 0.007, 0.008]),  # within a decade: linear 1-2-5 steps
    (1, 10, [1, 2, 5, 10]),
])
def test_log_ticks_are_1_2_5(lo, hi, expected):
    ticks, labels = _js("[logTicks(input[0], input[1], 4), "
                        "tickLabels(logTicks(input[0], input[1], 4), 5)]", [lo, hi])
    assert ticks == expected
    assert is_125_log(ticks) or is_125_step(ticks), ticks
    assert not any(label in ("3.1623", "63.096", "0.0063096") for label in labels), labels


def _loss(steps=1500, seed=0):
    """A loss from 13 falling within the first 3 % of the steps to 0.005-0.008 (noise)."""
    rng = random.Random(seed)
    return [0.005 + 13 * math.exp(-s / 5) + 0.003 * rng.random() for s in range(steps)]


def test_the_y_range_leaves_outliers_out():
    loss = _loss()
    ignoring, everything = _js("[extent(input, true), extent(input, false)]", loss)
    assert everything == [min(loss), max(loss)]
    # The stretch 0.005-0.008 covers at least half the range, as TensorBoard shows it.
    assert ignoring[0] == min(loss) and ignoring[1] < 0.011, ignoring
    assert 0.003 / (ignoring[1] - ignoring[0]) >= 0.5
    # A diverging value does not flatten the rest; a short clean series keeps its ends (the
    # first of five epochs), which TensorBoard's percentile range would cut off.
    spike = [0.5 + 0.01 * (i % 7) for i in range(200)]
    spike[150] = 1e7
    epochs = [1.0, 0.5, 0.3, 0.25, 0.22]
    assert _js("extent(input, true)", spike) == [0.5, 0.56]
    assert _js("extent(input, true)", epochs) == [0.22, 1.0]
    # Non-finite values take no part; none finite: no range.
    assert _js("extent(input, true)", [math.nan, 1.0, math.inf, 2.0]) == [1.0, 2.0]
    assert _js("extent(input, true)", [math.nan, -math.inf]) is None


def test_the_y_range_leaves_the_smoothed_lines_warm_up_out():
    """A curve of 0.002-0.008 after a first loss of 13 (200 points), smoothed at 0.6: the
    raw values leave 13 within a few steps, the smoothed line takes a dozen more. With those
    values the band filled a fifth of the chart; left out as the raw outliers are, most of it.
    With outliers kept, every value, smoothed ones too."""
    rng = random.Random(0)
    loss = [0.002 + 13 * math.exp(-i) + 0.006 * rng.random() for i in range(200)]
    both, ignoring, keeping = _js(
        "[extent(input.concat(smooth(input, 0.6)), true), "
        "yExtent(input, smooth(input, 0.6), true), yExtent(input, smooth(input, 0.6), false)]",
        loss)
    assert 0.006 / (both[1] - both[0]) < 0.25          # what the chart did
    assert 0.006 / (ignoring[1] - ignoring[0]) >= 0.8, ignoring
    assert keeping == [min(loss), max(loss)]


def _lines(*runs):
    """Curves as chart.js holds them: [{run, series: {steps, values, walls}, smoothed}]."""
    return [{"run": run, "series": {"steps": list(range(1, len(values) + 1)), "values": values,
                                    "walls": [1700000000.25 + i for i in range(len(values))]},
             "smoothed": values} for run, values in runs]


def test_a_log_axis_says_what_it_cannot_show():
    result = _js("input.map((lines) => logScale(lines, true))", [
        _lines(("a", [-1.0, -2.0, -0.5])),           # all negative: stays linear, says so
        _lines(("a", [0.0, 1.0, -1.0, 2.0])),        # two values at or below 0
        _lines(("a", [1.0, 2.0]), ("b", [0.5])),     # nothing hidden
        _lines(("a", [math.nan, math.inf, 1.0])),    # non-finite values are markers, not hidden
    ])
    assert result == [{"log": False, "notice": "log scale: no value above 0, drawn linear"},
                      {"log": True, "notice": "log scale: 2 values ≤ 0 not drawn"},
                      {"log": True, "notice": ""},
                      {"log": True, "notice": ""}]
    assert _js("logScale(input, false)", _lines(("a", [-1.0]))) == {"log": False, "notice": ""}


def test_the_title_counts_non_finite_values():
    lines = _lines(("a", [1.0, math.nan, math.inf, math.nan, 2.0]),
                   ("b", [math.nan, -math.inf, 3.0, math.inf, math.nan]))
    assert _js("nonFiniteText(input)", lines) == "4 NaN, 2 inf, 1 -inf"
    assert _js("nonFiniteText(input)", _lines(("a", [1.0, 2.0]))) == ""


def test_downloads_hold_every_point_exactly():
    values = [13.0, 0.1, math.nan, 1e-7, math.inf, -math.inf, 0.30000000000000004, 123456.0]
    lines = _lines(("run, \"quoted\"", values), ("b", [2.5]))
    lines[0]["smoothed"] = [v / 3 if math.isfinite(v) else v for v in values]
    csv_text, json_text = _js("[toCsv(exportRows(input)), toJson(exportRows(input))]", lines)
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    records = json.loads(json_text)
    expected = [(s, w, v, sm, line["run"]) for line in lines
                for s, w, v, sm in zip(line["series"]["steps"], line["series"]["walls"],
                                       line["series"]["values"], line["smoothed"])]
    assert list(rows[0]) == ["step", "wall_time", "value", "smoothed", "run"]
    assert list(records[0]) == ["step", "wall_time", "value", "smoothed", "run"]
    for got in (rows, records):
        assert len(got) == len(expected)
        for row, (step, wall, value, smoothed, run) in zip(got, expected):
            assert int(row["step"]) == step and float(row["wall_time"]) == wall
            assert row["run"] == run
            for field, want in (("value", value), ("smoothed", smoothed)):
                read = float(row[field])
                assert read == want or (math.isnan(read) and math.isnan(want)), (field, row)
    assert records[2]["value"] == "nan" and records[4]["value"] == "inf"


def test_download_names_keep_every_script_and_never_share_one():
    tags = ["loss", "train/loss", "train_loss", "خسارة", "הפסד/אימון", "\u202eacc", "→ ★",
            "!!!", "t" * 400, "t" * 400 + "b", "é"]
    names = _js("input.tags.map((tag) => fileName('fit', tag, input.tags, 'csv'))",
                {"tags": tags})
    assert names == [
        "fit-loss.csv", "fit-train_loss-1.csv", "fit-train_loss-2.csv", "fit-خسارة.csv",
        "fit-הפסד_אימון.csv", "fit-acc.csv", "fit-tag-6.csv", "fit-tag-7.csv",
        f"fit-{'t' * 60}-8.csv", f"fit-{'t' * 60}-9.csv", "fit-é.csv"]
    assert len(set(names)) == len(names)
    assert _js("[fileName('ריצה', 'x', ['x'], 'json'), fileName('a/b:c', 'x', ['x'], 'csv'), "
               "fileName('//', 'x', ['x'], 'csv')]") == ["ריצה-x.json", "a_b_c-x.csv", "run-x.csv"]


# Enough of a page for the front end's modules to load in node (what runs at their top).
STUB_DOCUMENT = """
globalThis.document = {createElement: () => ({getContext: () => ({})})};
"""


def test_the_front_end_files_are_modules_and_joined_are_one(tmp_path):
    """Each file of the front end loads in node as the module it is written as (an import of a
    name another does not export fails to link), and the joined module anywidget loads, too."""
    files = widget._ESM_FILES  # pylint: disable=protected-access
    assert sorted(files) == sorted(p.name for p in SCALES_JS.parent.glob("*.js"))
    for name in files:
        (tmp_path / name).write_text(SCALES_JS.with_name(name).read_text(encoding="utf-8"),
                                     encoding="utf-8")
    (tmp_path / "package.json").write_text('{"type": "module"}', encoding="utf-8")
    (tmp_path / "joined.js").write_text(widget._esm(), encoding="utf-8")  # pylint: disable=W0212
    modules = [(tmp_path / name).as_uri() for name in (files[-1], "joined.js")]
    assert _node(STUB_DOCUMENT + f"""
        for (const url of {json.dumps(modules)}) {{
            console.log(typeof (await import(url)).default.render);
        }}""") == "function\nfunction\n"


def test_joined_files_see_of_each_other_only_what_they_import():
    """Joined, a file's own names stay its own; what modules would refuse, the joining refuses."""
    first = "export function shared() { return 1; }\nfunction own() { return 2; }\n"
    last = ('import {shared} from "./first.js";\n'
            "export default {shared: shared(), own: typeof own};\n")
    joined = widget._join([("first.js", first), ("last.js", last)])  # pylint: disable=W0212
    module = json.dumps("data:text/javascript;base64,"
                        + base64.b64encode(joined.encode()).decode())
    assert _node(f"const m = await import({module});\n"
                 "console.log(JSON.stringify(m.default));") == '{"shared":1,"own":"undefined"}\n'
    for sources, refused in [
            ([("last.js", last), ("first.js", first)], "not joined before it"),
            ([("first.js", first.replace("export ", "")), ("last.js", last)], "does not export"),
            ([("first.js", "function a() {}\nexport {a};\n"), ("last.js", last)], "not joined"),
            ([("first.js", first), ("last.js", last + "export const x = 1;\n")],
             "only its default"),
    ]:
        with pytest.raises(ValueError, match=refused):
            widget._join(sources)  # pylint: disable=protected-access
