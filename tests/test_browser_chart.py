"""The charts in a real browser: JupyterLab 4 in headless Chromium, driven by Playwright (the
session's server and browser: tests/conftest.py, browser_helpers.py).

One Lab session, one notebook, two custom-loop runs whose every step is a summary
(``--save-summaries-secs 1e-9``), compared against what the kernel's history holds (the points
drawn) and what TensorBoard's reader reads of their event files (the points downloaded):
- "curve" logs a loss falling from 13 to the 0.005-0.008 band within its first 3 % of 2,500
  steps (past the 2,000 points a tag the kernel keeps: the charts draw merged points with
  their band, the downloads hold every point), a "weird" series with NaN, +inf and -inf among
  values on both sides of 0, and an all-negative "negative" series;
- "other" logs another loss for 300 steps; `%supervise compare curve other` overlays both.
Read from the page as a user sees it: the loss band fills the chart by default (and not with
outliers kept); the non-finite count in the title line and the markers on the canvas without
hovering; log scale's notices and 1-2-5 ticks on every axis; a run hidden and shown again from
the compare legend; the CSV and JSON downloads equal to the series; a readout pinned by a
click, selected and copied, then released. Screenshots go to test-artifacts/ (chart-*.png),
in the light theme and then in the dark one.
"""
import csv
import json
import math
import re

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from playwright.sync_api import expect

from browser_helpers import (ARTIFACTS, KERNEL_NAME, SENTINEL, keep_evidence, new_page,
                             open_notebook)
from helpers import is_125_log, is_125_step

pytestmark = [pytest.mark.browser, pytest.mark.kernel]

STEPS, OTHER_STEPS = 2500, 300
SMOOTHING = 0.6  # the panel's default (widget.py)
# chart.js's layout: the plot area inside the canvas.
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM, CHART_HEIGHT = 58, 10, 8, 24, 190
PALETTE_FIRST = (0x1f, 0x77, 0xb4)

SETUP_CELL = """\
import json, math, random
import jupyter_supervisor

def curve_scalars(i):
    weird = (math.nan if i % 97 == 5 else math.inf if i % 211 == 7
             else -math.inf if i % 307 == 11 else math.sin(i / 50))
    loss = 0.005 + 13 * math.exp(-i / 5) + 0.003 * random.Random(i).random()
    return {"loss": loss, "weird": weird, "negative": -1 - i / 1000}

def other_scalars(i):
    return {"loss": 0.004 + 9 * math.exp(-i / 4) + 0.004 * random.Random(-1 - i).random()}
"""
CURVE_CELL = ("%%supervise --logdir {root}/curve --max-steps {steps} --on-nan ignore "
              "--save-summaries-secs 1e-9 --wait\n") + """\
i = 0
while not sv.should_stop():
    sv.step(**curve_scalars(i))
    i += 1
"""
OTHER_CELL = """\
%%supervise --logdir {root}/other --max-steps {other_steps} --save-summaries-secs 1e-9 --wait
i = 0
while not sv.should_stop():
    sv.step(**other_scalars(i))
    i += 1
"""
# What the kernel's history holds, for the test to compare the charts with.
DUMP_CELL = """\
with open({series!r}, "w") as file:
    json.dump({{run.name: {{tag: [s.steps.tolist(), s.values.tolist(), s.walls.tolist()]
                          for tag, s in run.history.snapshot().scalars.items()}}
               for run in jupyter_supervisor.runs()}}, file)
"""
COMPARE_CELL = "%supervise compare curve other"
SENTINEL_CELL = f"print({SENTINEL!r})"


def _write_notebook(path, root, series_path):
    notebook = new_notebook(metadata={
        "kernelspec": {"name": KERNEL_NAME, "display_name": "jupyter_supervisor test",
                       "language": "python"},
        "language_info": {"name": "python"}})
    cells = ["%load_ext jupyter_supervisor", SETUP_CELL,
             CURVE_CELL.format(root=root, steps=STEPS),
             OTHER_CELL.format(root=root, other_steps=OTHER_STEPS),
             DUMP_CELL.format(series=str(series_path)), COMPARE_CELL, SENTINEL_CELL]
    notebook.cells = [new_code_cell(cell) for cell in cells]
    nbformat.write(notebook, str(path))


def test_charts_scale_mark_export_pin_and_compare(lab, chromium, tmp_path):
    (ARTIFACTS / "chart-failure.png").unlink(missing_ok=True)
    series_path = tmp_path / "series.json"
    _write_notebook(lab.root / "panel.ipynb", tmp_path / "runs", series_path)
    page = new_page(chromium, height=1600, accept_downloads=True,
                    permissions=["clipboard-read", "clipboard-write"])
    errors = []
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    try:
        _drive(page, lab, series_path, tmp_path)
    except BaseException:
        keep_evidence(page, errors, lab, shot="chart-failure.png")
        raise
    finally:
        page.context.close()
    assert not errors, errors


def _drive(page, lab, series_path, tmp_path):
    open_notebook(page, lab)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    expect(page.locator(".jp-OutputArea-output", has_text=SENTINEL)).to_be_visible(
        timeout=180_000)
    history = json.loads(series_path.read_text())
    panel = page.locator(".jsv-panel:has(.jsv-name:text-is('curve'))")
    compare = page.locator(".jsv-compare")
    charts = {tag: panel.locator(f".jsv-chart[data-tag='{tag}']")
              for tag in ("loss", "weird", "negative")}
    for tag, chart in charts.items():  # every point the kernel holds has arrived
        expect(chart).to_have_attribute("data-points", str(len(history["curve"][tag][0])))
    expect(compare.locator(".jsv-chart[data-tag='loss']")).to_have_attribute(
        "data-points", str(len(history["curve"]["loss"][0]) + len(history["other"]["loss"][0])))

    _outliers_left_out(panel, charts["loss"], history["curve"]["loss"])
    _non_finite_marked(page, charts["weird"], history["curve"]["weird"])
    _ticks_are_1_2_5(panel)
    _shot(panel, "chart-panel.png")
    _log_scale_notices(panel, charts, history["curve"])
    on_disk = {run: _tensorboard(tmp_path / "runs" / run, "loss") for run in ("curve", "other")}
    assert len(on_disk["curve"][0]) >= STEPS > len(history["curve"]["loss"][0])
    expect(charts["loss"]).to_have_attribute("data-band", "true")
    _downloads_equal_the_series(page, charts["loss"], {"curve": on_disk["curve"]},
                                tmp_path / "curve")
    _pinned_readout(page, charts["loss"])
    _compare_hides_a_run(page, compare, on_disk, tmp_path / "compare")

    # The dark theme (JupyterLab's own switch), the same charts.
    page.get_by_role("menuitem", name="Settings", exact=True).click()
    page.locator(".lm-Menu-item:has(.lm-Menu-itemLabel:text-is('Theme'))").hover()
    page.locator(".lm-Menu-item:has(.lm-Menu-itemLabel:text-is('JupyterLab Dark'))").click()
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    charts["loss"].locator(".jsv-canvas-box").hover()  # a repaint
    _shot(panel, "chart-panel-dark.png")
    _shot(compare, "chart-compare-dark.png")


def _shot(locator, name):
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(ARTIFACTS / name))


def _tensorboard(logdir, tag):
    """[steps, values, wall times] of every point TensorBoard's reader shows of ``tag``."""
    from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=C0415
    accumulator = event_accumulator.EventAccumulator(
        str(logdir), size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    events = accumulator.Scalars(tag)
    return [[e.step for e in events], [e.value for e in events], [e.wall_time for e in events]]


def _domain(chart, name):
    return [float(v) for v in chart.get_attribute(f"data-{name}-domain").split(",")]


def _outliers_left_out(panel, chart, series):
    """The loss's 0.005-0.008 band fills at least half the chart by default; with outliers
    kept, the first steps' 13 (drawn merged: about 12) flatten it."""
    values = series[1]
    assert max(values) > 10 and sum(v > 0.01 for v in values) < 0.05 * len(values)
    toggle = panel.locator(".jsv-outliers input")
    expect(toggle).to_be_checked()
    ignoring = chart.get_attribute("data-y-domain")
    low, high = _domain(chart, "y")
    assert low <= min(values) and (0.008 - 0.005) / (high - low) >= 0.5, (low, high)
    toggle.uncheck()
    expect(chart).not_to_have_attribute("data-y-domain", ignoring)
    low, high = _domain(chart, "y")
    assert high >= max(values) and (0.008 - 0.005) / (high - low) < 0.01, (low, high)
    toggle.check()


def _canvas_pixels(page, chart, x, y):
    """The canvas's colours (RGBA) within a pixel of (x, y), in CSS pixels of the canvas."""
    return page.evaluate("""([canvas, x, y]) => {
        const r = canvas.width / canvas.getBoundingClientRect().width;
        const d = Math.max(1, Math.round(r));
        const data = canvas.getContext("2d").getImageData(
            Math.round(x * r) - d, Math.round(y * r) - d, 2 * d + 1, 2 * d + 1).data;
        const out = [];
        for (let i = 0; i < data.length; i += 4) out.push(Array.from(data.slice(i, i + 4)));
        return out; }""", [chart.locator("canvas").element_handle(), x, y])


def _near(rgba, rgb, tolerance=40):
    return rgba[3] > 200 and all(abs(a - b) <= tolerance for a, b in zip(rgba, rgb))


def _non_finite_marked(page, chart, series):
    """The title line counts NaN, inf and -inf (no hovering), and the canvas marks each one
    where chart.js says: +inf at the top edge, -inf at the bottom, NaN at the height of the
    value before it."""
    steps, values = series[0], series[1]
    nan = sum(math.isnan(v) for v in values)
    inf = sum(v == math.inf for v in values)
    neg = sum(v == -math.inf for v in values)
    assert nan and inf and neg
    page.mouse.move(0, 0)  # nowhere near the chart
    count = chart.locator(".jsv-chart-nonfinite")
    expect(count).to_have_text(f" · {nan} NaN, {inf} inf, {neg} -inf")
    expect(count).to_be_visible()
    expect(chart.locator(".jsv-readout")).to_have_text("")
    chart.scroll_into_view_if_needed()
    x0, x1 = _domain(chart, "x")
    y0, y1 = _domain(chart, "y")
    width = chart.locator(".jsv-canvas-box").bounding_box()["width"]
    plot_w, plot_h = width - PAD_LEFT - PAD_RIGHT, CHART_HEIGHT - PAD_TOP - PAD_BOTTOM
    px = lambda step: PAD_LEFT + (step - x0) / (x1 - x0) * plot_w  # noqa: E731
    py = lambda v: PAD_TOP + plot_h - (v - y0) / (y1 - y0) * plot_h  # noqa: E731
    before = None
    for step, value in zip(steps, values):
        if math.isfinite(value):
            before = value
            continue
        x = px(step)
        if math.isnan(value):
            y = min(PAD_TOP + plot_h - 5, max(PAD_TOP + 5, py(before)))
            # The ends of the cross's arms: no curve covers four corners of a square.
            spots = [(x - 3, y - 3), (x + 3, y + 3), (x - 3, y + 3), (x + 3, y - 3)]
        else:
            y = PAD_TOP + 5 if value > 0 else PAD_TOP + plot_h - 5
            spots = [(x, y)]
        for spot in spots:
            pixels = _canvas_pixels(page, chart, *spot)
            assert any(_near(p, PALETTE_FIRST) for p in pixels), (step, value, spot, pixels)


def _ticks(chart):
    return [float(t) for t in chart.get_attribute("data-y-ticks").split(",")]


def _ticks_are_1_2_5(panel):
    for chart in panel.locator(".jsv-chart").all():
        ticks = _ticks(chart)
        log = chart.get_attribute("data-yscale") == "log"
        assert len(ticks) >= 2 and (is_125_step(ticks) or (log and is_125_log(ticks))), (
            chart.get_attribute("data-tag"), ticks)


def _log_scale_notices(panel, charts, curve):
    """Log scale: a chart with values at or below 0 says how many it leaves out; an
    all-negative one stays linear and says so (no empty chart with ticks 1 and 10)."""
    hidden = sum(math.isfinite(v) and v <= 0 for v in curve["weird"][1])
    panel.locator(".jsv-log input").check()
    expect(charts["loss"]).to_have_attribute("data-yscale", "log")
    expect(charts["loss"].locator(".jsv-chart-notice")).to_have_text("")
    expect(charts["weird"]).to_have_attribute("data-yscale", "log")
    expect(charts["weird"].locator(".jsv-chart-notice")).to_have_text(
        f"log scale: {hidden} values ≤ 0 not drawn")
    expect(charts["negative"]).to_have_attribute("data-yscale", "linear")
    expect(charts["negative"].locator(".jsv-chart-notice")).to_have_text(
        "log scale: no value above 0, drawn linear")
    low, high = _domain(charts["negative"], "y")
    assert low < min(curve["negative"][1]) and max(curve["negative"][1]) < high < 0
    _ticks_are_1_2_5(panel)
    _shot(panel, "chart-panel-log.png")
    panel.locator(".jsv-log input").uncheck()
    expect(charts["weird"].locator(".jsv-chart-notice")).to_have_text("")


def _smoothed(values, weight=SMOOTHING):
    """TensorBoard's debiased EMA, as scales.js computes it."""
    if all(v == values[0] for v in values):
        return list(values)
    last, count, out = 0.0, 0, []
    for v in values:
        if not math.isfinite(v):
            out.append(v)
            continue
        last = last * weight + (1 - weight) * v
        count += 1
        out.append(last / (1 - weight ** count))
    return out


def _same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12)


def _downloads_equal_the_series(page, chart, runs, folder):
    """The CSV and the JSON of a chart hold every point of every run drawn: step, wall time,
    raw value exactly, the smoothed value, the run."""
    expected = [(run, step, wall, value, smoothed) for run, (steps, values, walls) in runs.items()
                for step, wall, value, smoothed in zip(steps, walls, values, _smoothed(values))]
    for fmt in ("csv", "json"):
        with page.expect_download() as info:
            chart.locator(f".jsv-download-{fmt}").click()
        path = folder.with_suffix(f".{fmt}")
        info.value.save_as(path)
        assert re.fullmatch(r"(curve|compare)-loss\." + fmt, info.value.suggested_filename)
        with open(path, newline="", encoding="utf-8") as file:
            rows = list(csv.DictReader(file)) if fmt == "csv" else json.load(file)
        assert len(rows) == len(expected), fmt
        for row, (run, step, wall, value, smoothed) in zip(rows, expected):
            assert row["run"] == run and int(row["step"]) == step, (fmt, row)
            assert float(row["wall_time"]) == wall and float(row["value"]) == value, (fmt, row)
            assert _same(float(row["smoothed"]), smoothed), (fmt, row, smoothed)


def _pinned_readout(page, chart):
    """A click pins the readout: it stays when the mouse leaves, can be selected and copied
    as text; another click releases it."""
    box = chart.locator(".jsv-canvas-box")
    readout = chart.locator(".jsv-readout")
    box.scroll_into_view_if_needed()
    area = box.bounding_box()
    box.click(position={"x": area["width"] * 0.6, "y": area["height"] / 2})
    expect(readout).to_have_attribute("data-pinned", "true")
    number = r"[-\d.e+]+"
    expect(readout).to_have_text(re.compile(   # a merged point is its mean, with its range
        rf"^{number} \((raw {number}|mean of \d+: {number}, {number} to {number})\)  "
        r"step [\d,]+  \d\d:\d\d:\d\d  \+\d+ s$"))
    pinned = readout.inner_text()
    page.mouse.move(0, 0)
    expect(readout).to_have_text(pinned)
    expect(chart.locator(".jsv-readout-hint")).to_contain_text("pinned")
    _shot(chart, "chart-pinned.png")
    readout.click(click_count=3)  # selects the readout's text, as a user does
    assert page.evaluate("() => getSelection().toString().trim()") == pinned
    page.keyboard.press("Control+c")
    assert page.evaluate("() => navigator.clipboard.readText()").strip() == pinned
    box.click(position={"x": area["width"] * 0.3, "y": area["height"] / 2})
    expect(readout).to_have_attribute("data-pinned", "false")
    page.mouse.move(0, 0)
    expect(readout).to_have_text("")


def _compare_hides_a_run(page, compare, on_disk, folder):
    """The compare legend hides a run in every chart and shows it again; a chart's download
    holds every point of the runs it draws."""
    legend = compare.locator(".jsv-legend-item")
    expect(legend).to_have_text(["curve", "other"])
    chart = compare.locator(".jsv-chart[data-tag='loss']")
    expect(chart).to_have_attribute("data-runs", "curve,other")
    _downloads_equal_the_series(page, chart, on_disk, folder)
    whole = _domain(chart, "x")
    legend.nth(1).click()
    expect(legend.nth(1)).to_have_attribute("aria-pressed", "false")
    expect(chart).to_have_attribute("data-runs", "curve")
    for other in compare.locator(".jsv-chart").all():
        assert "other" not in other.get_attribute("data-runs").split(",")
    expect(chart.locator(".jsv-chart-value")).not_to_contain_text("other")
    _shot(compare, "chart-compare-hidden.png")
    _downloads_equal_the_series(page, chart, {"curve": on_disk["curve"]}, folder)
    legend.nth(1).click()
    expect(legend.nth(1)).to_have_attribute("aria-pressed", "true")
    expect(chart).to_have_attribute("data-runs", "curve,other")
    assert _domain(chart, "x") == whole
    _shot(compare, "chart-compare.png")
