"""The panel in a real browser: JupyterLab 4 and Notebook 7 in headless Chromium, driven by
Playwright, and the front end's module alone in a blank page.

JupyterLab: one session, one notebook, runs of small Keras models and a custom loop in one
kernel, each ending another way, read from the page as a user sees it:
- "demo" (a classifier's custom loop, 4,000 steps) reaches --max-steps under --wait: finished,
  exact step, 100 %, no ETA, its header's parts separated in its text; the README's picture;
- "cmd" is stopped by `%supervise stop`: stopped at the newest checkpoint's step and position;
- "live" (shown twice: its cell and `%supervise show live`) trains while the page is read in
  the light, dark and high-contrast themes (every text at 4.5:1, measured), its curves are
  explored (readout, log scale, zoom, text alternative), a tag chip is clicked 30 times and
  every control is used by keyboard in command mode;
- each end (live's Stop button, "fin"'s body returning, "boom"'s failure, both at the test's
  word) keeps what the user set in every view of the run, replaces no element of them, and a
  save right then stores the run's record (text, HTML, image), which nbconvert's HTML shows;
- a reloaded page shows the panels again with what was set, every point and the timeline;
  Resume brings "live" back with its settings; a kernel restart turns the old panels dead
  within seconds (buttons disabled, a notification when asked for); reloaded without that
  kernel, each run's record shows instead of "model not found";
- screenshots of each state in the light and the dark theme go to test-artifacts/.
Notebook 7, with the kernel's messages from background threads dropped (as Colab is reported
to drop them) and comms without subshells: the panel keeps updating from the answers to its
requests, says "kernel busy" while a cell holds the kernel, and its keys and Stop work.
The module alone (a stand-in for anywidget's model): number format, drawing only what changed,
a missed push asked for, settings in the model, in-place states, a chart by keyboard, kernel
gone and busy, the tag filter and groups, notifications.

The servers are our own (``browser_helpers.Lab``): the session's JupyterLab, in which each test
has a folder of its own and whose kernels and settings are reset after it, and a Notebook 7
server for its test alone; the session's Chromium, with a context of its own for each test
(tests/conftest.py). Every wait is on a condition in the page, with a timeout (panel-failure.png
on failure); with JSV_UPDATE_DOCS=1 the finished run's screenshot also becomes docs/panel.png,
the README's picture.
"""
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
import tensorflow as tf
from nbformat.v4 import new_code_cell, new_notebook
from playwright.sync_api import expect

from browser_helpers import (ARTIFACTS, KERNEL_NAME, KERNEL_READY_JS, SENTINEL, WAIT_MS, api,
                             keep_evidence, new_page, open_notebook, panel_of)
from helpers import child_env

pytestmark = pytest.mark.browser

DOCS_PANEL = Path(__file__).resolve().parent.parent / "docs" / "panel.png"
README_SHOT = "panel-finished-light.png"


# The cells. Seeded models of tests/eager_models.py (8 batches an epoch); a callback's short sleep
# keeps the rates modest on 2 cores. "fin" and "boom" train until the test asks them to finish
# or to fail (a file in FLAGS), so that what the user set can be set before their end; "demo"
# is the README's picture: a small classifier's custom loop, thousands of steps.
SETUP_CELL = """\
import os, time
import keras
import numpy as np
import tensorflow as tf
import eager_models
import jupyter_supervisor
FLAGS = {flags!r}
x, y = eager_models.data(n=64)
live_model, fin_model, boom_model, cmd_model = (eager_models.make_model() for _ in range(4))
slow = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.01))

class Ender(keras.callbacks.Callback):
    # Ends the fit when the test says: NAME.finish (fit returns), NAME.fail (it raises).
    def __init__(self, name):
        super().__init__()
        self.name = name
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.02)
        if os.path.exists(os.path.join(FLAGS, self.name + ".fail")):
            raise ValueError("boom at the batch the test chose")
        if os.path.exists(os.path.join(FLAGS, self.name + ".finish")):
            self.model.stop_training = True

# Two noisy interleaved spirals and a small classifier, trained step by step.
rng = np.random.default_rng(0)
turn = rng.uniform(0.25, 3.0, 512) * np.pi
label = rng.integers(0, 2, 512)
points = np.stack([turn * np.cos(turn + np.pi * label), turn * np.sin(turn + np.pi * label)], 1)
spiral_x = tf.constant((points / np.pi + rng.normal(0, 0.25, (512, 2))).astype("float32"))
spiral_y = tf.constant(label.astype("float32")[:, None])
keras.utils.set_random_seed(0)
demo_model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, activation="tanh"),
                               keras.layers.Dense(16, activation="tanh"),
                               keras.layers.Dense(1, activation="sigmoid")])
demo_opt = keras.optimizers.Adam(0.002)
bce = keras.losses.BinaryCrossentropy()

@tf.function
def demo_step():
    pick = tf.random.uniform([32], 0, 512, dtype=tf.int32)
    xb, yb = tf.gather(spiral_x, pick), tf.gather(spiral_y, pick)
    with tf.GradientTape() as tape:
        p = demo_model(xb, training=True)
        loss = bce(yb, p)
    grads = tape.gradient(loss, demo_model.trainable_variables)
    demo_opt.apply_gradients(zip(grads, demo_model.trainable_variables))
    return loss, tf.reduce_mean(tf.cast(tf.equal(p > 0.5, yb > 0.5), tf.float32))
"""
LIVE_CELL = """\
%%supervise --logdir {root}/live --save-summaries-secs 0.3 --save-model-secs 5
live_model.fit(x, y, batch_size=8, epochs=100000, callbacks=[sv.callback, slow], verbose=1)
"""
SECOND_VIEW_CELL = "%supervise show live"
DEMO_CELL = """\
%%supervise --logdir {root}/demo --max-steps {demo_steps} --save-summaries-secs 0.02 --wait
sv.track(model=demo_model, optimizer=demo_opt)
while not sv.should_stop():
    loss, accuracy = demo_step()
    sv.step(loss=loss, accuracy=accuracy)
"""
FIN_CELL = """\
%%supervise --logdir {root}/fin --save-summaries-secs 0.2
fin_model.fit(x, y, batch_size=8, epochs=100000, callbacks=[sv.callback, Ender("fin")], verbose=0)
"""
BOOM_CELL = """\
%%supervise --logdir {root}/boom --save-summaries-secs 0.2
boom_model.fit(x, y, batch_size=8, epochs=100000, callbacks=[sv.callback, Ender("boom")],
               verbose=0)
"""
CMD_CELL = """\
%%supervise --logdir {root}/cmd --save-summaries-secs 0.2 --save-model-secs 30
cmd_model.fit(x, y, batch_size=8, epochs=100000, callbacks=[sv.callback, slow], verbose=0)
"""
# Waits on a condition (the run's step), then stops it with the line magic.
CMD_STOP_CELL = """\
while (jupyter_supervisor.get_run("cmd").global_step or 0) < 30:
    time.sleep(0.05)
%supervise stop cmd
"""
COMPARE_CELL = "%supervise compare fin cmd"
SENTINEL_CELL = f"import sys\nprint({SENTINEL!r}, sys.executable)"
DEMO_STEPS = 4000
BATCHES = 8
TF2_STEP_KEY = "jupyter_supervisor/step/.ATTRIBUTES/VARIABLE_VALUE"
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark",
          "high-contrast": "JupyterLab Dark High Contrast"}
# What the user sets in a view before its run ends (and checks after).
SETTINGS = {"log": True, "xAxis": "relative", "hidden": ["epoch_loss"], "timeline": False}


def _write_notebook(path: Path, cells, **names) -> None:
    notebook = new_notebook(metadata={
        "kernelspec": {"name": KERNEL_NAME, "display_name": "jupyter_supervisor test",
                       "language": "python"},
        "language_info": {"name": "python"},
    })
    notebook.cells = [new_code_cell(cell.format(**names) if "{" in cell and cell is not
                                    SENTINEL_CELL else cell) for cell in cells]
    nbformat.write(notebook, str(path))


def _checkpoint_step(logdir: Path) -> int:
    newest = tf.train.latest_checkpoint(str(logdir))
    assert newest is not None, f"no checkpoint in {logdir}"
    step = int(tf.train.load_checkpoint(newest).get_tensor(TF2_STEP_KEY))
    assert int(newest.rsplit("-", 1)[1]) == step
    return step


def _position(step: int, epochs: int) -> str:
    """Fit's epoch and batch after ``step`` batches, as Keras counts them (1-based epoch)."""
    epoch = (step - 1) // BATCHES
    return f"epoch {epoch + 1}/{epochs}, batch {step - epoch * BATCHES}/{BATCHES}"


@pytest.mark.kernel
def test_panel_states_settings_records_themes_and_keys_in_jupyterlab(lab, chromium, tmp_path):
    (ARTIFACTS / "panel-failure.png").unlink(missing_ok=True)  # an older run's
    root, flags = tmp_path / "runs", tmp_path / "flags"
    flags.mkdir()
    _write_notebook(lab.root / "panel.ipynb",
                    ["%load_ext jupyter_supervisor", SETUP_CELL, LIVE_CELL, SECOND_VIEW_CELL,
                     DEMO_CELL, FIN_CELL, BOOM_CELL, CMD_CELL, CMD_STOP_CELL, COMPARE_CELL,
                     SENTINEL_CELL], root=root, flags=str(flags), demo_steps=DEMO_STEPS)
    saved = Saved(lab, tmp_path / "saves", root)
    page = new_page(chromium)
    problems = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda message: problems.append(f"console: {message.text}")
            if message.type == "error" else None)
    try:
        _drive(page, lab, root, flags, saved)
    except BaseException:
        keep_evidence(page, problems, lab)
        raise
    finally:
        page.context.close()
        saved.close()
    assert not [p for p in problems if "jsv" in p or "panel.js" in p], problems


def _shot(page, locator, name) -> None:
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(ARTIFACTS / name))
    if name == README_SHOT and os.environ.get("JSV_UPDATE_DOCS"):
        # The README's picture is this screenshot: JSV_UPDATE_DOCS=1 pytest tests/test_browser.py
        shutil.copyfile(ARTIFACTS / name, DOCS_PANEL)


def _command(page, command, args=None):
    """Runs one of the frontend's commands (the app is exposed to the page)."""
    page.evaluate("([c, a]) => window.jupyterapp.commands.execute(c, a)", [command, args or {}])


def _theme(page, name) -> None:
    """Switches JupyterLab's theme and waits until every view has read it again."""
    _command(page, "apputils:change-theme", {"theme": THEMES[name]})
    page.wait_for_function(f"document.body.dataset.jpThemeName === {THEMES[name]!r}")
    page.wait_for_function(THEME_READ_JS)


# Every view has read the page's theme: the background it draws on is what is behind it.
THEME_READ_JS = """() => Array.from(document.querySelectorAll('.jsv-view')).every((view) => {
    let e = view, bg = null;
    for (; e; e = e.parentElement) {
        const c = getComputedStyle(e).backgroundColor;
        if (c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') { bg = c; break; }
    }
    const drawnOn = view.dataset.jsvBackground.replace('rgba', 'rgb').replace(', 1)', ')');
    return bg === null || drawnOn === bg;
})"""

# The text of a view and its contrast on what is behind it (WCAG, alpha composited), for each
# text element shown; the canvas's tick labels (the view's ink) too.
CONTRAST_JS = """(views) => {
    const probe = document.createElement('canvas').getContext('2d');
    const rgba = (css) => {
        probe.fillStyle = '#010203'; probe.fillStyle = css;
        const t = probe.fillStyle;
        if (t.startsWith('#')) {
            return [1, 3, 5].map((i) => parseInt(t.slice(i, i + 2), 16)).concat([1]);
        }
        const p = t.slice(t.indexOf('(') + 1, -1).split(',').map(Number);
        return p.length === 4 ? p : p.concat([1]);
    };
    const over = (top, under) => [0, 1, 2].map(
        (i) => top[i] * top[3] + under[i] * (1 - top[3])).concat([1]);
    const linear = (x) => {
        x /= 255;
        return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4;
    };
    const lum = (c) => c.slice(0, 3).map(linear)
        .reduce((s, x, i) => s + x * [0.2126, 0.7152, 0.0722][i], 0);
    const behind = (e) => {
        const layers = [];
        for (; e && e.nodeType === 1; e = e.parentElement) {
            const c = rgba(getComputedStyle(e).backgroundColor);
            if (c[3] > 0) layers.push(c);
            if (c[3] >= 1) break;
        }
        return layers.reverse().reduce((acc, layer) => over(layer, acc), [255, 255, 255, 1]);
    };
    const ratio = (fg, bg) => { const [a, b] = [lum(over(fg, bg)), lum(bg)];
                                return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); };
    const out = [];
    const parts = '.jsv-header-line > span, .jsv-progress-text, .jsv-eta, .jsv-notice, ' +
        '.jsv-checkpoint > div, .jsv-timeline li, .jsv-best li, .jsv-tag, .jsv-readout, ' +
        '.jsv-chart-title, .jsv-error-box b, .jsv-error-box pre, .jsv-muted, .jsv-tools label, ' +
        '.jsv-message';
    for (const view of views) {
        for (const e of view.querySelectorAll(parts)) {
            if (!e.getClientRects().length || !e.textContent.trim()) continue;
            const what = (e.className || e.tagName) + ': ' + e.textContent.trim().slice(0, 30);
            out.push([what, ratio(rgba(getComputedStyle(e).color), behind(e))]);
        }
        const ink = rgba(view.dataset.jsvInk), paper = rgba(view.dataset.jsvBackground);
        out.push(['canvas ticks', ratio(ink, paper)]);
    }
    return out;
}"""


def _readable(page, locator, theme) -> None:
    """Every text of the views in ``locator`` reads at 4.5:1 or better."""
    measured = page.evaluate(CONTRAST_JS, locator.element_handles())
    assert len(measured) > 10, measured
    low = [(what, round(ratio, 2)) for what, ratio in measured if ratio < 4.5]
    assert not low, f"{theme}: text under 4.5:1: {low}"
    what, lowest = min(measured, key=lambda item: item[1])
    print(f"{theme}: {len(measured)} texts, lowest contrast {lowest:.2f}:1 ({what})")


# Records what a view's subtree loses (element nodes) and remembers its elements, to show that
# the end of a run changes the view in place.
WATCH_JS = """(roots) => {
    window.jsvRemoved = [];
    window.jsvWatched = roots.map((root) => [root, root.closest('.jp-OutputArea-child')]);
    for (const root of roots) {
        new MutationObserver((records) => records.forEach((r) => r.removedNodes.forEach((n) => {
            if (n.nodeType === 1 && !(r.target.closest && r.target.closest('.jsv-output'))) {
                window.jsvRemoved.push(n.className || n.tagName);
            }
        }))).observe(root, {childList: true, subtree: true});
    }
}"""
UNCHANGED_JS = """() => ({removed: window.jsvRemoved,
    kept: window.jsvWatched.every(([root, child]) => root.isConnected && child.isConnected)})"""


def _set_settings(page, view) -> None:
    """What a user sets in ``view`` (SETTINGS, a zoom of 'loss'), by clicks."""
    view.locator(".jsv-log input").check()
    view.locator(".jsv-xaxis select").select_option(SETTINGS["xAxis"])
    view.locator(".jsv-tag", has_text="epoch_loss").click()
    expect(view.locator(".jsv-tag", has_text="epoch_loss")).to_have_attribute(
        "aria-pressed", "false")
    if view.locator(".jsv-history").evaluate("d => d.open"):
        view.locator(".jsv-history summary").click()
    _drag_zoom(page, view.locator(".jsv-chart[data-tag='loss'] .jsv-canvas-box"))
    expect(view.locator(".jsv-chart[data-tag='loss']")).to_have_attribute("data-zoomed", "true")


def _drag_zoom(page, box, to=0.6) -> None:
    """A drag across ``box`` from near its left edge to ``to`` of its width (flat: x only)."""
    box.scroll_into_view_if_needed()
    area = box.bounding_box()
    page.mouse.move(area["x"] + 70, area["y"] + 40)
    page.mouse.down()
    page.mouse.move(area["x"] + area["width"] * to, area["y"] + 40, steps=5)
    page.mouse.up()


def _plain(view) -> None:
    """Undoes SETTINGS and the zoom in ``view`` (what its screenshot shows)."""
    view.locator(".jsv-tag", has_text="epoch_loss").click()
    view.locator(".jsv-log input").uncheck()
    view.locator(".jsv-xaxis select").select_option("step")
    view.locator(".jsv-chart[data-tag='loss'] .jsv-canvas-box").dblclick()
    if not view.locator(".jsv-history").evaluate("d => d.open"):
        view.locator(".jsv-history summary").click()


def _has_settings(view) -> None:
    """``view`` shows SETTINGS and the zoom of 'loss'."""
    expect(view.locator(".jsv-log input")).to_be_checked()
    expect(view.locator(".jsv-xaxis select")).to_have_value(SETTINGS["xAxis"])
    expect(view.locator(".jsv-tag", has_text="epoch_loss")).to_have_attribute(
        "aria-pressed", "false")
    expect(view.locator(".jsv-chart[data-tag='epoch_loss']")).to_have_count(0)
    loss = view.locator(".jsv-chart[data-tag='loss']")
    expect(loss).to_have_attribute("data-zoomed", "true")
    loss.scroll_into_view_if_needed()               # drawn on screen (its scale: as drawn)
    expect(loss).to_have_attribute("data-yscale", "log")
    expect(loss).to_have_attribute("data-xaxis", SETTINGS["xAxis"])
    assert view.locator(".jsv-history").evaluate("d => d.open") is False


def _ends_in_place(page, views, end, status) -> None:
    """Sets what a user sets in the first of ``views``, ends the run (``end()``), waits for
    ``status``; then every view shows the settings and lost no element, and the run's cell
    output is the same element."""
    _set_settings(page, views.first)
    page.evaluate(WATCH_JS, views.locator(".jsv-view").element_handles())
    end()
    for view in views.all():
        expect(view.locator(".jsv-status")).to_have_text(status)
    changes = page.evaluate(UNCHANGED_JS)
    assert changes == {"removed": [], "kept": True}, changes
    for view in views.all():
        _has_settings(view)


# True once this call saved the notebook and it is clean; while it is dirty (or not saved yet)
# and no save runs, starts one.
SAVED_CLEAN_JS = """() => {
    if (!document.querySelector('.jp-mod-dirty') && window.jsvSaves > 0 && !window.jsvSaving) {
        return true;
    }
    if (!window.jsvSaving) {
        window.jsvSaving = true;
        window.jsvSaves = (window.jsvSaves || 0) + 1;
        window.jupyterapp.commands.execute("docmanager:save")
            .finally(() => { window.jsvSaving = false; });
    }
    return false;
}"""


def _save(page):
    """Saves the notebook (as Ctrl+S does). A record's update can arrive while it is being
    saved (each also goes out with the answer to the view's next request): the notebook is then
    dirty again, and is saved again, as a person would, until a save leaves it clean."""
    page.evaluate("window.jsvSaves = 0")
    page.wait_for_function(SAVED_CLEAN_JS, polling=250)


class Saved:
    """Saves the notebook in the page (as Ctrl+S does), keeps each save, and has nbconvert
    export each to HTML meanwhile."""

    def __init__(self, lab, folder: Path, root: Path):
        self.lab, self.folder, self.root = lab, folder, root
        folder.mkdir()
        self.exports = []

    def save(self, page, label):
        _save(page)
        copy = self.folder / f"{label}.ipynb"
        shutil.copyfile(self.lab.root / "panel.ipynb", copy)
        log = open(self.folder / f"{label}.log", "w", encoding="utf-8")  # closed in close()
        self.exports.append((label, subprocess.Popen(
            [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(copy)],
            stdout=log, stderr=subprocess.STDOUT, env=child_env()), log))
        return nbformat.read(str(copy), as_version=4)

    def records(self, notebook, name):
        """The records (display data) below the views of run ``name`` in a saved notebook."""
        found = []
        for cell in notebook.cells:
            if re.search(rf"--logdir {re.escape(str(self.root))}/{name}\s", cell.source) or \
                    cell.source == f"%supervise show {name}":
                found += [o.data for o in cell.outputs if o.output_type == "display_data"
                          and 'class="jsv-record"' in o.data.get("text/html", "")]
        return found

    def exported(self, label) -> str:
        """The HTML nbconvert made of the save ``label`` (waits for it)."""
        for name, process, log in self.exports:
            if name == label:
                process.wait(timeout=120)
                log.flush()
                assert process.returncode == 0, (self.folder / f"{label}.log").read_text()
                return (self.folder / f"{label}.html").read_text(encoding="utf-8")
        raise KeyError(label)

    def close(self):
        for _, process, log in self.exports:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()


def _ended_record(saved, notebook, name, heading, label) -> None:
    """The save ``label`` stored run ``name``'s end (its records: text, HTML and the image)."""
    records = saved.records(notebook, name)
    assert records, f"no record of {name} in the save {label}"
    for data in records:
        assert heading in data["text/html"], (label, data["text/plain"][:300])
        assert data["text/plain"].startswith(heading.replace(" | ", ": ", 1).split(" | ")[0])
        assert data["image/png"] and "data:image/png;base64," in data["text/html"]


SAVED_WHILE_RUNNING = (r"<strong>fin \| saved while running, at step [\d,]+ "
                       r"\(\d{4}-\d\d-\d\d \d\d:\d\d\) \| ")


def _drive(page, lab, root: Path, flags: Path, saved: Saved) -> None:
    open_notebook(page, lab)
    assert lab.kernel_names() == [KERNEL_NAME]
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    done = page.locator(".jp-OutputArea-output", has_text=SENTINEL)
    expect(done).to_be_visible(timeout=180_000)
    assert sys.executable in done.inner_text(), "the kernel does not run the test's Python"
    expect(page.locator(".jsv-panel")).to_have_count(6)      # live is shown twice

    # --max-steps reached (under --wait): finished, exact step, 100 %, no ETA; the README's
    # picture.
    demo = panel_of(page, "demo")
    expect(demo.locator(".jsv-status")).to_have_text("finished")
    expect(demo.locator(".jsv-step")).to_have_text(f"step {DEMO_STEPS:,}")
    expect(demo.locator(".jsv-progress-text")).to_have_text(f"100.0% of {DEMO_STEPS:,}")
    expect(demo.locator(".jsv-eta")).to_be_hidden()
    expect(demo.locator(".jsv-timeline")).to_contain_text(
        f"finished at step {DEMO_STEPS:,} (--max-steps reached)")
    expect(demo.locator(".jsv-best")).to_contain_text("loss: ")
    # Its last points drawn (the session's end writes a summary at its last step).
    expect(demo.locator(".jsv-chart[data-tag='loss'] .jsv-chart-value")).to_have_text(
        re.compile(rf"\(step {DEMO_STEPS:,}\)$"))
    # The header's parts are separated in its text (what a copy or a screen reader gets).
    assert re.fullmatch(rf"demo \| finished \| step {DEMO_STEPS:,} \| \d+ s",
                        demo.locator(".jsv-header-line").inner_text()), \
        demo.locator(".jsv-header-line").inner_text()
    # Its record is hidden under its live view, and says the same.
    record = page.locator(".jsv-record").filter(has_text="demo | finished")
    expect(record).to_have_count(1)
    expect(record).to_be_hidden()

    # %supervise stop: stopped at the newest checkpoint's step, with that step's epoch/batch.
    cmd = panel_of(page, "cmd")
    expect(cmd.locator(".jsv-status")).to_have_text("stopped")
    stopped_at = _checkpoint_step(root / "cmd")
    expect(cmd.locator(".jsv-step")).to_have_text(f"step {stopped_at:,}")
    expect(cmd.locator(".jsv-fit")).to_have_text(_position(stopped_at, 100000))
    expect(cmd.locator(".jsv-timeline")).to_contain_text(f"stopped at step {stopped_at:,}")
    expect(cmd.locator(".jsv-eta")).to_be_hidden()

    # The live run, in the light, the dark and the high-contrast theme.
    lives = panel_of(page, "live")
    live = lives.first
    expect(live.locator(".jsv-status")).to_have_text("running")
    expect(live.locator(".jsv-rate")).to_have_text(re.compile(r"^[\d,.]+ steps/s$"))
    chart = live.locator(".jsv-chart[data-tag='loss']")
    page.wait_for_function("e => Number(e.dataset.points) >= 3", arg=chart.element_handle())
    tags = live.locator(".jsv-tag")
    expect(tags).to_have_text(["epoch_loss", "global_step/sec", "loss"])
    for theme in ("light", "dark", "high-contrast"):
        if theme != "light":
            chart.scroll_into_view_if_needed()      # charts are drawn on screen only
            draws = int(chart.get_attribute("data-draws"))
            _theme(page, theme)
            page.wait_for_function(f"e => Number(e.dataset.draws) > {draws}",
                                   arg=chart.element_handle())   # the canvas redrawn
        chart.locator(".jsv-canvas-box").hover()                   # a readout to read
        _readable(page, page.locator(".jsv-view"), theme)
        if theme != "high-contrast":
            _shot(page, live, f"panel-running-{theme}.png")
            _shot(page, cmd, f"panel-stopped-{theme}.png")
            _shot(page, demo, f"panel-finished-{theme}.png")
    _theme(page, "light")

    # Its curves explored as in TensorBoard.
    box = chart.locator(".jsv-canvas-box")
    box.scroll_into_view_if_needed()
    area = box.bounding_box()
    box.hover(position={"x": area["width"] * 0.6, "y": area["height"] / 2})
    expect(chart.locator(".jsv-readout")).to_have_text(re.compile(
        r"^[-\d.e+]+ \(raw [-\d.e+]+\)  step [\d,]+  \d\d:\d\d:\d\d  \+\d+ s$"))
    linear_ticks = chart.get_attribute("data-y-ticks")
    live.locator(".jsv-log input").check()
    expect(chart).to_have_attribute("data-yscale", "log")
    assert chart.get_attribute("data-y-ticks") != linear_ticks
    live.locator(".jsv-log input").uncheck()
    whole = chart.get_attribute("data-x-domain")
    _drag_zoom(page, box, to=0.5)
    expect(chart).to_have_attribute("data-zoomed", "true")
    zoomed = [float(v) for v in chart.get_attribute("data-x-domain").split(",")]
    full = [float(v) for v in whole.split(",")]
    assert full[0] <= zoomed[0] < zoomed[1] < full[1], (full, zoomed)
    # The second view of the same run follows (one model: one set of settings).
    expect(lives.nth(1).locator(".jsv-chart[data-tag='loss']")).to_have_attribute(
        "data-zoomed", "true")
    _shot(page, live, "panel-live-zoomed.png")
    box.dblclick()
    expect(chart).to_have_attribute("data-zoomed", "false")
    # A text alternative for each chart: its tag, its last value and its range.
    assert re.fullmatch(r"loss: last [-\d.e+]+ at step [\d,]+, from [-\d.e+]+ to [-\d.e+]+ "
                        r"over steps [\d,]+ to [\d,]+", box.get_attribute("aria-label"))
    # verbose=1: Keras' progress bar, rendered by Jupyter (no escape characters, one line).
    output = live.locator(".jsv-output")
    expect(output).to_contain_text("step")
    text = output.inner_text()
    assert "\x1b" not in text and "[1m" not in text and "[0m" not in text, text[-500:]

    # A tag chip works at every click while points keep coming.
    chip = live.locator(".jsv-tag", has_text="global_step/sec")
    chip.scroll_into_view_if_needed()
    for click in range(30):
        chip.click()
        expect(chip).to_have_attribute("aria-pressed", "false" if click % 2 == 0 else "true")
    expect(live.locator(".jsv-chart[data-tag='global_step/sec']")).to_have_count(1)

    _by_keyboard(page, live)

    # Saved while "fin" runs: its record says when that was true, never "running" alone; the
    # file of that save and nbconvert's page of it still say so after fin ended (below).
    notebook = saved.save(page, "running")
    [fin_record] = saved.records(notebook, "fin")
    assert re.search(SAVED_WHILE_RUNNING, fin_record["text/html"]), fin_record["text/plain"]
    assert re.match(SAVED_WHILE_RUNNING.replace("<strong>", ""), fin_record["text/plain"])

    # Two runs in one chart: a legend, and one readout line per run.
    comparison = page.locator(".jsv-compare")
    expect(comparison.locator(".jsv-legend-item")).to_have_text(["fin", "cmd"])
    both = comparison.locator(".jsv-chart[data-tag='loss']")
    both_box = both.locator(".jsv-canvas-box")
    both_box.scroll_into_view_if_needed()
    both_area = both_box.bounding_box()
    both_box.hover(position={"x": 80, "y": both_area["height"] / 2})
    expect(both.locator(".jsv-readout")).to_have_text(re.compile(r"^fin: .*\ncmd: .*$"))
    _shot(page, comparison, "compare.png")

    # Each end keeps what the user set, changes the views in place, and a save right then
    # stores the end. Stop (the button) ...
    _ends_in_place(page, lives, lambda: live.locator("button.jsv-stop").click(), "stopped")
    notebook = saved.save(page, "stopped")
    stopped_at = _checkpoint_step(root / "live")
    expect(live.locator(".jsv-step")).to_have_text(f"step {stopped_at:,}")
    expect(live.locator(".jsv-fit")).to_have_text(_position(stopped_at, 100000))
    expect(live.locator("button.jsv-resume")).to_be_enabled()
    expect(live.locator("button.jsv-stop")).to_be_disabled()
    _ended_record(saved, notebook, "live", f"live | stopped | step {stopped_at:,}", "stopped")
    # ... the body returning ...
    fin = panel_of(page, "fin")
    _ends_in_place(page, fin, lambda: (flags / "fin.finish").touch(), "finished")
    notebook = saved.save(page, "finished")
    fin_step = _checkpoint_step(root / "fin")
    _ended_record(saved, notebook, "fin", f"fin | finished | step {fin_step:,}", "finished")
    _shot(page, fin, "panel-finished-by-its-body.png")
    # ... and a failure.
    boom = panel_of(page, "boom")
    _ends_in_place(page, boom, lambda: (flags / "boom.fail").touch(), "failed")
    notebook = saved.save(page, "failed")
    expect(boom.locator(".jsv-error")).to_contain_text("ValueError: boom at the batch the test")
    expect(boom.locator(".jsv-timeline")).to_contain_text("ValueError: boom at the batch")
    expect(boom.locator("button.jsv-resume")).to_be_enabled()
    boom_step = int(boom.locator(".jsv-step").get_attribute("data-step"))
    _ended_record(saved, notebook, "boom", f"boom | failed | step {boom_step:,}", "failed")
    assert "ValueError: boom at the batch the test chose" in saved.records(notebook, "boom")[0][
        "text/html"]
    _plain(boom)
    _shot(page, boom, "panel-failed-light.png")

    # nbconvert's HTML of each save says how each run ended, as text.
    for label, name, heading in (("stopped", "live", f"live | stopped | step {stopped_at:,}"),
                                 ("finished", "fin", f"fin | finished | step {fin_step:,}"),
                                 ("failed", "boom", f"boom | failed | step {boom_step:,}")):
        exported = saved.exported(label)
        assert f"<strong>{heading}" in exported, (label, name)
    assert "ValueError: boom at the batch the test chose" in saved.exported("failed")
    assert re.search(SAVED_WHILE_RUNNING, saved.exported("running"))
    assert "fin | running" not in saved.exported("running")

    # Reopened (a view made anew): what the user set, the timeline and every point are back.
    page.reload()
    page.wait_for_function(KERNEL_READY_JS)
    lives = panel_of(page, "live")
    live = lives.first
    expect(live.locator(".jsv-status")).to_have_text("stopped")
    expect(live.locator(".jsv-timeline")).to_contain_text("started at step 0")
    _has_settings(live)
    page.wait_for_function("e => Number(e.dataset.points) >= 3",
                           arg=live.locator(".jsv-chart[data-tag='loss']").element_handle())

    # Resume (the button): running again from the stopped step's checkpoint, said so, with
    # what the user set.
    page.evaluate(WATCH_JS, lives.locator(".jsv-view").element_handles())
    live.locator("button.jsv-resume").click()
    expect(live.locator(".jsv-status")).to_have_text("running")
    expect(live.locator(".jsv-timeline")).to_contain_text(
        f"resumed from model.ckpt-{stopped_at} (step {stopped_at:,})")
    expect(live.locator("button.jsv-stop")).to_be_enabled()
    expect(live.locator("button.jsv-resume")).to_be_disabled()
    page.wait_for_function(
        f"e => Number(e.textContent.replace(/[^0-9]/g, '')) > {stopped_at}",
        arg=live.locator(".jsv-step").element_handle())
    assert page.evaluate(UNCHANGED_JS) == {"removed": [], "kept": True}
    for view in lives.all():
        _has_settings(view)
    _plain(live)
    _shot(page, live, "panel-resumed-light.png")
    _theme(page, "dark")
    _shot(page, live, "panel-resumed-dark.png")
    _shot(page, boom, "panel-failed-dark.png")
    _readable(page, boom.locator(".jsv-view"), "dark (a failure)")

    # Notifications asked for by a click (the browser allows them here).
    live.locator("button.jsv-notify").click()
    expect(live.locator("button.jsv-notify")).to_have_attribute("aria-pressed", "true")

    # A kernel restart: every old panel says the kernel is gone, its buttons disabled.
    page.get_by_role("menuitem", name="Kernel", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Restart Kernel…")).first.click()
    page.locator(".jp-Dialog .jp-mod-accept").click()
    expect(live.locator(".jsv-dead")).to_be_visible(timeout=30_000)
    expect(live.locator(".jsv-dead")).to_have_text("kernel gone — re-run the cell")
    expect(live.locator(".jsv-status")).to_have_text("unknown")  # not "running" any more
    expect(live.locator(".jsv-rate")).to_be_hidden()               # nor its rate, its ETA
    expect(live.locator(".jsv-eta")).to_be_hidden()
    expect(live.locator("button.jsv-resume")).to_be_disabled()
    expect(boom.locator(".jsv-dead")).to_be_visible(timeout=30_000)  # an ended run's too
    expect(boom.locator("button.jsv-resume")).to_be_disabled()
    page.wait_for_function("window.jsvShown.includes('live: kernel gone')")  # notified
    _readable(page, live.locator(".jsv-view"), "dark (kernel gone)")
    _shot(page, live, "panel-kernel-gone-dark.png")
    _theme(page, "light")
    _shot(page, live, "panel-kernel-gone-light.png")
    # Once, though the page shows two views of live (each view checks 4 times a second).
    assert page.evaluate("window.jsvShown.filter((t) => t === 'live: kernel gone')") == [
        "live: kernel gone"]

    # Reopened without the kernel that ran it: no "model not found"; each record shows what
    # the run came to.
    page.reload()
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    for name, heading in (("demo", f"demo | finished | step {DEMO_STEPS:,}"),
                          ("fin", f"fin | finished | step {fin_step:,}"),
                          ("boom", f"boom | failed | step {boom_step:,}"),
                          ("cmd", "cmd | stopped")):
        record = page.locator(".jsv-record").filter(has_text=heading)
        expect(record.first).to_be_visible()
        expect(record.first.locator("img")).to_be_visible()
    shown = page.locator(".jp-OutputArea-output", has_text="Error displaying widget")
    expect(shown.filter(visible=True)).to_have_count(0)
    _shot(page, page.locator(".jp-OutputArea-child:has(.jsv-record)").filter(
        has_text="boom | failed").first, "reopened-without-kernel.png")


def _by_keyboard(page, live) -> None:
    """Every control of the view by keyboard only, in command mode, without the notebook's
    shortcuts taking the keys (its active cell and cells stay), focus kept while points come."""
    live.locator(".jsv-header-line").click()          # the cell is active, in command mode
    cells = page.locator(".jp-Notebook .jp-Cell")
    count = cells.count()
    active = page.evaluate("Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell'))"
                           ".findIndex(c => c.classList.contains('jp-mod-active'))")
    chart = live.locator(".jsv-chart[data-tag='loss']")
    log = live.locator(".jsv-log input")
    log.focus()
    page.keyboard.press("Space")
    expect(chart).to_have_attribute("data-yscale", "log")
    page.keyboard.press("Space")
    expect(chart).to_have_attribute("data-yscale", "linear")
    page.keyboard.press("Tab")
    outliers = live.locator(".jsv-outliers input")
    expect(outliers).to_be_focused()
    page.keyboard.press("Space")
    expect(outliers).not_to_be_checked()
    page.keyboard.press("Space")
    expect(outliers).to_be_checked()
    page.keyboard.press("Tab")
    expect(live.locator(".jsv-smoothing input")).to_be_focused()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    expect(live.locator(".jsv-smoothing-value")).to_have_text("0.63")
    page.keyboard.press("Tab")
    expect(live.locator(".jsv-xaxis select")).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(chart).to_have_attribute("data-xaxis", "relative")
    page.keyboard.press("ArrowUp")
    expect(chart).to_have_attribute("data-xaxis", "step")
    page.keyboard.press("Tab")
    expect(live.locator(".jsv-filter input")).to_be_focused()
    page.keyboard.type("^loss$")                      # letters: command mode's keys too
    expect(live.locator(".jsv-chart")).to_have_count(1)
    _escape_keeps_the_filter(page, live, "^loss$")
    live.locator(".jsv-filter input").focus()
    page.keyboard.press("End")
    for _ in range(6):
        page.keyboard.press("Backspace")
    expect(live.locator(".jsv-chart")).to_have_count(3)
    page.keyboard.press("Tab")
    first_chip = live.locator(".jsv-tag").first
    expect(first_chip).to_be_focused()
    page.keyboard.press("Space")
    expect(first_chip).to_have_attribute("aria-pressed", "false")
    page.keyboard.press("Enter")
    expect(first_chip).to_have_attribute("aria-pressed", "true")
    points = int(chart.get_attribute("data-points"))
    page.wait_for_function(f"e => Number(e.dataset.points) > {points}",
                           arg=chart.element_handle())   # points came: the focus stays
    expect(first_chip).to_be_focused()
    box = chart.locator(".jsv-canvas-box")
    for _ in range(12):                               # Tab to the loss chart
        if box.evaluate("b => document.activeElement === b"):
            break
        page.keyboard.press("Tab")
    expect(box).to_be_focused()
    page.keyboard.press("ArrowLeft")
    expect(chart.locator(".jsv-readout")).to_contain_text("step ")
    page.keyboard.press("+")
    expect(chart).to_have_attribute("data-zoomed", "true")
    page.keyboard.press("0")
    expect(chart).to_have_attribute("data-zoomed", "false")
    summary = live.locator(".jsv-history summary")
    summary.focus()
    page.keyboard.press("Enter")
    expect(live.locator(".jsv-history")).not_to_have_attribute("open", "")
    page.keyboard.press("Enter")
    expect(live.locator(".jsv-history")).to_have_attribute("open", "")
    save = live.locator("button.jsv-save")
    save.focus()
    written = live.locator(".jsv-checkpoint").inner_text()
    page.keyboard.press("Enter")                      # Save: a checkpoint now
    expect(live.locator(".jsv-checkpoint")).not_to_have_text(written)
    assert cells.count() == count
    assert page.evaluate("Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell'))"
                         ".findIndex(c => c.classList.contains('jp-mod-active'))") == active


def _escape_keeps_the_filter(page, live, typed):
    """Escape in the tag filter keeps what was typed (a search field would empty itself) and
    gives the focus back to the notebook, in command mode; the filter is the view's setting."""
    box = live.locator(".jsv-filter input")
    expect(box).to_be_focused()
    page.keyboard.press("Escape")
    expect(box).to_have_value(typed)
    expect(box).not_to_be_focused()
    # The cell of the panel, in command mode: the notebook's keys act from there.
    assert live.evaluate("(p) => document.activeElement === p.closest('.jp-Cell') && "
                         "p.closest('.jp-Cell').classList.contains('jp-mod-active')")
    expect(page.locator(".jp-Notebook.jp-mod-commandMode")).to_have_count(1)
    expect(live.locator(".jsv-filter-count")).to_contain_text(" of ")


# Notebook 7: the same front end, in Notebook's page, where the kernel's messages from background
# threads are dropped (as Colab drops them: googlecolab/colabtools#3373) and comm messages wait
# for the running cell (no kernel subshells).
NOTEBOOK7_READY_JS = """() => {
    const e = document.querySelector('.jp-Notebook-ExecutionIndicator');
    return !!e && e.dataset.status === 'idle';
}"""
# Drops every comm message and display update the package's threads send (the refresher's
# pushes: state, points, beats; the records' updates); what the comm thread sends (the answers
# to the views' requests) goes through.
DROP_CELL = """\
import threading
from ipykernel.comm.comm import BaseComm as comm_class   # what comm.create_comm makes
dropped = []
def unless_from_a_thread(send):
    def maybe(self, *args, **kwargs):
        if threading.current_thread().name.startswith("jupyter_supervisor-"):
            dropped.append(args[:1])
            return None
        return send(self, *args, **kwargs)
    return maybe
comm_class.publish_msg = unless_from_a_thread(comm_class.publish_msg)
publisher = type(get_ipython().display_pub)
publisher.publish = unless_from_a_thread(publisher.publish)
"""
# A foreground cell that, run again once the test asked (FLAGS/hold), holds the kernel until
# the test lets it go.
BLOCK_CELL = """\
if os.path.exists(os.path.join(FLAGS, "hold")):
    while not os.path.exists(os.path.join(FLAGS, "go-on")):
        time.sleep(0.05)
print("pushes dropped:", len(dropped) > 0, "| held:", os.path.exists(os.path.join(FLAGS, "hold")))
"""


@pytest.mark.kernel
@pytest.mark.parametrize("lab", ["notebook"], indirect=True)
def test_without_pushes_and_subshells_in_notebook_7(lab, chromium, tmp_path):
    root, flags = tmp_path / "runs", tmp_path / "flags"
    flags.mkdir()
    _write_notebook(lab.root / "panel.ipynb",
                    ["%load_ext jupyter_supervisor", DROP_CELL, SETUP_CELL, LIVE_CELL,
                     SENTINEL_CELL, BLOCK_CELL], root=root, flags=str(flags))
    page = new_page(chromium, height=1400)
    try:
        page.goto(lab.notebook_url("panel.ipynb"))
        page.wait_for_selector(".jp-Notebook .jp-Cell")
        # The server's kernel, then the page's connection to it.
        deadline = time.monotonic() + WAIT_MS / 1000
        while not [s for s in api(lab.base, lab.token, "/api/sessions")
                   if s["kernel"]["execution_state"] == "idle"]:
            assert time.monotonic() < deadline, "the kernel did not start"
            time.sleep(0.1)  # polling the server for the kernel's state
        page.wait_for_function(NOTEBOOK7_READY_JS)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        expect(page.locator(".jp-OutputArea-output", has_text="| held: False")).to_be_visible(
            timeout=120_000)
        cells = page.locator(".jp-Notebook .jp-Cell")
        live = panel_of(page, "live")
        # Only the answers to its requests feed it: it keeps updating.
        chart = live.locator(".jsv-chart[data-tag='loss']")
        expect(live.locator(".jsv-status")).to_have_text("running")
        for _ in range(3):
            step = int(live.locator(".jsv-step").get_attribute("data-step") or 0)
            points = int(chart.get_attribute("data-points") or 0)
            page.wait_for_function(
                f"([s, c]) => Number(s.dataset.step) > {step} && "
                f"Number(c.dataset.points) > {points}",
                arg=[live.locator(".jsv-step").element_handle(), chart.element_handle()])
        expect(live.locator(".jsv-view")).to_have_attribute("data-jsv-health", "alive")

        # Keys in Notebook 7: the slider and the x axis, the notebook's shortcuts kept away.
        slider = live.locator(".jsv-smoothing input")
        slider.focus()
        page.keyboard.press("ArrowRight")
        expect(live.locator(".jsv-smoothing-value")).to_have_text("0.61")
        page.keyboard.press("Tab")
        page.keyboard.press("ArrowDown")
        expect(chart).to_have_attribute("data-xaxis", "relative")
        live.locator(".jsv-filter input").focus()
        page.keyboard.type("loss")
        _escape_keeps_the_filter(page, live, "loss")

        # The live run's cell run again (as after reopening the notebook without its
        # outputs): its panel again, saying the run goes on, not an error.
        live_cell = cells.nth(3)
        live_cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        expect(live_cell.locator(".jp-OutputArea-output",
                                 has_text="and goes on: this cell did not start it again"
                                 )).to_be_visible()
        expect(live_cell.locator(".jp-OutputArea-output",
                                 has_text="%supervise stop live")).to_be_visible()
        expect(live_cell.locator(".jsv-status")).to_have_text("running")
        assert live_cell.locator(".jp-OutputArea-output.jp-RenderedText[data-mime-type="
                                 "'application/vnd.jupyter.stderr']").count() == 0
        step = int(live.locator(".jsv-step").get_attribute("data-step"))
        page.wait_for_function(f"s => Number(s.dataset.step) > {step}",
                               arg=live.locator(".jsv-step").element_handle())
        _shot(page, live_cell, "notebook7-cell-run-again.png")

        # A foreground cell: the requests wait for it, the view says the kernel is busy
        # (not gone), and updates again once the cell ended.
        (flags / "hold").touch()
        cells.last.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        busy = live.locator(".jsv-busy")
        expect(busy).to_be_visible()
        assert live.locator(".jsv-dead").is_hidden()
        _shot(page, live, "notebook7-kernel-busy.png")
        (flags / "go-on").touch()
        expect(page.locator(".jp-OutputArea-output",
                            has_text="pushes dropped: True | held: True")).to_be_visible()
        expect(busy).to_be_hidden()
        expect(live.locator(".jsv-view")).to_have_attribute("data-jsv-health", "alive")
        step = int(live.locator(".jsv-step").get_attribute("data-step"))
        page.wait_for_function(f"s => Number(s.dataset.step) > {step}",
                               arg=live.locator(".jsv-step").element_handle())
        # Stop: clicked, answered on the comm thread, shown from the answers; the record
        # of the end reaches the notebook from the comm thread too.
        live.locator("button.jsv-stop").click()
        expect(live.locator(".jsv-status")).to_have_text("stopped")
        expect(live.locator(".jsv-timeline")).to_contain_text("stopped at step")
        _shot(page, live, "notebook7-stopped.png")
        step = int(live.locator(".jsv-step").get_attribute("data-step"))
        _save(page)
        saved = nbformat.read(str(lab.root / "panel.ipynb"), as_version=4)
        [record] = [o.data for cell in saved.cells for o in cell.get("outputs", [])
                    if 'class="jsv-record"' in o.get("data", {}).get("text/html", "")]
        assert f"live | stopped | step {step:,}" in record["text/html"], record["text/plain"]
    except BaseException:
        keep_evidence(page, [], lab)
        raise
    finally:
        page.context.close()


# -- the front end's module on its own: Chromium, the real ES module, a stand-in model --------
#
# anywidget puts the widget's CSS in the page and hands render() a model with
# get/set/on/off/send/save_changes; the stand-in below does the first and has those and nothing
# else, records what the view sends, and delivers custom messages as anywidget does (content,
# [DataView]). These tests run in seconds; what needs a kernel and a real JupyterLab is tested
# above.

MODULE_HARNESS = """async ([source, css]) => {
    const style = document.createElement("style");
    style.textContent = css;
    document.head.append(style);
    const url = URL.createObjectURL(new Blob([source], {type: "text/javascript"}));
    const render = (await import(url)).default.render;
    window.makeModel = (traits) => {
        const handlers = {};   // event -> [[listener, the view's context]]
        const fire = (event, ...args) => (handlers[event] || []).slice().forEach(
            ([f]) => f(...args));
        return {traits, sent: [], saved: 0,
            get: (k) => traits[k],
            set(k, v) { traits[k] = v; fire("change:" + k); },
            on: (event, f, context) => (handlers[event] = handlers[event] || []).push(
                [f, context]),
            off: (event, f, context) => {
                for (const e of event ? [event] : Object.keys(handlers)) {
                    handlers[e] = (handlers[e] || []).filter(([g, c]) =>
                        (f && g !== f) || (context !== undefined && c !== context));
                }
            },
            send(msg) { this.sent.push(msg); },
            save_changes() { this.saved += 1; },
            emit(msg, arrays, band) {   // a custom message from the kernel
                const wide = new Float64Array(arrays ? arrays.flat() : []);
                const narrow = new Float32Array(band ? band.flat() : []);
                const bytes = new Uint8Array(wide.byteLength + narrow.byteLength);
                bytes.set(new Uint8Array(wide.buffer));
                bytes.set(new Uint8Array(narrow.buffer), wide.byteLength);
                fire("msg:custom", msg, [new DataView(bytes.buffer)]);
            },
            change(k, v) { traits[k] = v; fire("change:" + k); }};
    };
    // As anywidget renders a view: with a model of its own (a proxy of the widget's model,
    // whose listeners go with the view).
    window.mount = (model) => {
        const el = document.createElement("div");
        el.style.width = "900px";
        document.body.append(el);
        const context = {};
        const proxy = {get: (k) => model.get(k), set: (k, v) => model.set(k, v),
                       save_changes: () => model.save_changes(), send: (m) => model.send(m),
                       on: (e, f) => model.on(e, f, context),
                       off: (e, f) => model.off(e, f, context)};
        const destroy = render({model: proxy, el});
        return {el, destroy: () => { destroy(); model.off(null, null, context); el.remove(); }};
    };
}"""


@pytest.fixture(scope="module")
def module_page(chromium):
    """A blank page with the panel's module loaded (window.makeModel, window.mount)."""
    from jupyter_supervisor.view.widget import _css, _esm  # pylint: disable=C0415
    page = chromium.new_page(viewport={"width": 1000, "height": 900})
    page.set_default_timeout(10_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_content("<html><body></body></html>")
    page.evaluate(MODULE_HARNESS, [_esm(), _css()])
    yield page
    page.context.close()
    assert not errors, errors


# A run's state as the kernel sends it, with a quick timing (the view's clock is real).
MODULE_STATE = {"name": "fit", "status": "running", "label": "running", "tone": "success",
                "active": True, "step": 1064, "step_text": "1,064", "rate": "39.6 steps/s",
                "position": "", "elapsed": "1 min 05 s", "role": "", "progress": None,
                "eta": "", "warning": "", "checkpoint": ["No new checkpoint yet | initialized"],
                "timeline": [["10:00:00", "started at step 0 (initialized)"]], "best": [],
                "error": "", "message": "", "seq": 1, "key": "k1",
                "buttons": {"stop": True, "resume": False, "save": True},
                "timing": {"pull_ms": 100, "beat_ms": 100, "dead_after_ms": 600},
                "format": {"digits": 5}, "palette": ["#1f77b4", "#ff7f0e"]}


def _series(page, model, parts):
    """Delivers a series message of ``parts`` [(tag, gen, from, steps, values, walls)]."""
    page.evaluate("""([m, parts]) => window[m].emit(
        {type: "series", parts: parts.map(([tag, gen, from, steps]) =>
            ({run: "fit", tag, gen, from, n: steps.length}))},
        parts.flatMap(([, , , steps, values, walls]) => [steps, values, walls]))""",
                  [model, parts])


def _mount(page, name, state=None, settings=None):
    # A key of its own, as each panel has (the views of one model share what the key names).
    state = dict(state or MODULE_STATE, key=name)
    page.evaluate("""([name, state, settings]) => {
        window[name] = makeModel({state, settings, compare: false, runs: ["fit"]});
        window[name + "View"] = mount(window[name]);
    }""", [name, state, settings or {}])
    return page.locator(".jsv-view").last


def test_values_read_in_the_charts_as_python_writes_them(module_page):
    page = module_page
    values = [123456.0, 0.012345678, 1e-05, 0.0001, 12345.6, 99999.4, 0.5, -2.5e-07, 1e21,
              -0.0, 0.0, 3.14159265, float("nan"), float("inf"), float("-inf"), 7.0]
    values += [float(v) for v in np.random.default_rng(0).lognormal(0, 6, 40)]
    view = _mount(page, "numbers")
    _series(page, "numbers", [(f"v{i:02d}", 1, 0, [1.0], [v], [1e9])
                              for i, v in enumerate(values)])
    titles = view.locator(".jsv-chart-value").all_inner_texts()
    assert titles == [f"v{i:02d} = {format(v, '.5g')} (step 1)" for i, v in enumerate(values)]
    page.evaluate("numbersView.destroy()")


def test_only_the_charts_on_screen_whose_points_changed_are_drawn_again(module_page):
    """Of 41 charts, those on screen are drawn; then only the one whose points changed; one
    below is drawn when it comes into view (its points counted and its title written
    meanwhile)."""
    page = module_page
    view = _mount(page, "many")
    tags = [f"m{i:02d}" for i in range(41)]
    _series(page, "many", [(tag, 1, 0, [1.0, 2.0], [1.0, 0.5], [1e9, 1e9 + 1]) for tag in tags])

    def draws():
        counts = view.locator(".jsv-chart").evaluate_all("cs => cs.map(c => c.dataset.draws)")
        return dict(zip(tags, (int(d or 0) for d in counts)))

    before = draws()
    assert before["m01"] == 1 and before["m40"] == 0, before
    for k in range(5):   # five pushes of one tag's newest point
        _series(page, "many", [("m01", 1, 2 + k, [3.0 + k], [0.25], [1e9 + 2 + k])])
    after = draws()
    assert {tag for tag in tags if after[tag] != before[tag]} == {"m01"}
    assert view.locator(".jsv-chart[data-tag='m01']").get_attribute("data-points") == "7"
    below = view.locator(".jsv-chart[data-tag='m40']")
    assert below.get_attribute("data-points") == "2" and below.get_attribute("data-draws") is None
    expect(below.locator(".jsv-chart-value")).to_have_text("m40 = 0.5 (step 2)")
    below.scroll_into_view_if_needed()
    expect(below).to_have_attribute("data-draws", "1")
    page.evaluate("manyView.destroy()")


def test_a_push_that_does_not_fit_is_skipped_and_asked_for_at_once(module_page):
    page = module_page
    view = _mount(page, "gaps")
    _series(page, "gaps", [("loss", 4, 0, [1.0, 2.0], [1.0, 0.5], [1e9, 1e9 + 1])])
    asked = page.evaluate("gaps.sent.filter(m => m.type === 'pull').length")
    _series(page, "gaps", [("loss", 4, 5, [9.0], [0.1], [1e9 + 9])])     # a gap: one missed
    _series(page, "gaps", [("loss", 5, 1, [3.0], [0.1], [1e9 + 3])])     # another generation
    assert view.locator(".jsv-chart").get_attribute("data-points") == "2"
    page.wait_for_function(f"gaps.sent.filter(m => m.type === 'pull').length > {asked}")
    pull = page.evaluate("gaps.sent.filter(m => m.type === 'pull').at(-1)")
    assert pull["have"] == {"fit": {"loss": [4, 2, 2.0, 1e9 + 1]}} and pull["seq"] == 1
    page.evaluate("gaps.emit({type: 'answer', id: %d, parts: [{run: 'fit', tag: 'loss', gen: 5,"
                  " from: 0, n: 3}]}, [[1, 2, 3], [1, 0.5, 0.1], [1e9, 1e9 + 1, 1e9 + 3]])"
                  % pull["id"])
    assert view.locator(".jsv-chart").get_attribute("data-points") == "3"
    page.evaluate("gapsView.destroy()")


def test_what_the_user_set_is_in_the_model_for_every_view_and_a_new_one(module_page):
    page = module_page
    first = _mount(page, "kept")
    _series(page, "kept", [(tag, 1, 0, [1.0, 2.0, 3.0], [1.0, 0.5, 0.2], [1e9, 1e9 + 1, 1e9 + 2])
                           for tag in ("acc", "loss")])
    page.evaluate("keptSecond = mount(kept)")       # a second view of the same model
    second = page.locator(".jsv-view").last
    first.locator(".jsv-log input").check()
    first.locator(".jsv-tag", has_text="acc").click()
    first.locator(".jsv-xaxis select").select_option("relative")
    first.locator(".jsv-history summary").click()   # the timeline closed
    page.wait_for_function("kept.traits.settings.timeline === false")   # ("toggle" comes later)
    settings = page.evaluate("kept.traits.settings")
    assert (settings["log"], settings["hidden"], settings["xAxis"], settings["timeline"]) == (
        True, ["acc"], "relative", False)
    page.wait_for_function("kept.saved > 0")          # sent to the kernel
    for view in (second, first):
        expect(view.locator(".jsv-log input")).to_be_checked()
        expect(view.locator(".jsv-tag", has_text="acc")).to_have_attribute("aria-pressed", "false")
        expect(view.locator(".jsv-chart")).to_have_count(1)
        expect(view.locator(".jsv-chart")).to_have_attribute("data-xaxis", "relative")
        assert view.locator(".jsv-history").evaluate("d => d.open") is False
    page.evaluate("keptView.destroy(); keptSecond.destroy(); keptView = mount(kept)")  # re-created
    again = page.locator(".jsv-view").last
    request = page.evaluate("kept.sent.at(-1)")
    assert request["type"] == "pull" and request["have"] == {}    # it asks for every point
    page.evaluate("id => kept.emit({type: 'answer', id, parts: [{run: 'fit', tag: 'loss', gen: 1,"
                  " from: 0, n: 3}, {run: 'fit', tag: 'acc', gen: 1, from: 0, n: 3}]}, "
                  "[[1, 2, 3], [1, .5, .2], [1e9, 1e9, 1e9], "
                  "[1, 2, 3], [1, .5, .2], [1e9, 1e9, 1e9]])",
                  request["id"])
    expect(again.locator(".jsv-chart")).to_have_attribute("data-yscale", "log")
    expect(again.locator(".jsv-tag", has_text="acc")).to_have_attribute("aria-pressed", "false")
    page.evaluate("keptView.destroy()")


def test_a_state_changes_the_view_in_place_and_the_header_reads_with_separators(module_page):
    page = module_page
    view = _mount(page, "place")
    _series(page, "place", [("loss", 1, 0, [1.0, 2.0], [1.0, 0.5], [1e9, 1e9 + 1])])
    assert view.locator(".jsv-header-line").inner_text() == (
        "fit | running | step 1,064 | 39.6 steps/s | 1 min 05 s")
    page.evaluate("""() => {
        window.removed = [];
        new MutationObserver((records) => records.forEach((r) => r.removedNodes.forEach((n) => {
            if (n.nodeType === 1) window.removed.push(n.className);
        }))).observe(document.querySelector('.jsv-view:last-of-type'),
                     {childList: true, subtree: true});
        document.querySelector('.jsv-view:last-of-type .jsv-log input').focus();
    }""")
    stopped = dict(MODULE_STATE, status="stopped", label="stopped", tone="brand", seq=2,
                   rate="", step=1070, step_text="1,070", active=False,
                   buttons={"stop": False, "resume": True, "save": False},
                   timeline=MODULE_STATE["timeline"] + [["10:01:00", "stopped at step 1,070"]],
                   error="Traceback\nValueError: x")
    page.evaluate("s => place.change('state', s)", stopped)
    assert view.locator(".jsv-header-line").inner_text() == (
        "fit | stopped | step 1,070 | 1 min 05 s")
    assert view.locator(".jsv-timeline li").count() == 2
    expect(view.locator(".jsv-error")).to_contain_text("ValueError: x")
    assert page.evaluate("removed") == []                     # nothing replaced
    assert page.evaluate("document.activeElement.closest('label').className") == "jsv-log"
    page.evaluate("s => place.change('state', s)", dict(stopped, seq=1, label="running"))
    expect(view.locator(".jsv-status")).to_have_text("stopped")   # an older state is ignored
    page.evaluate("placeView.destroy()")


def test_a_chart_by_keyboard_and_its_text_alternative(module_page):
    page = module_page
    view = _mount(page, "keys")
    steps = [float(s) for s in range(0, 1000, 10)]
    _series(page, "keys", [("loss", 1, 0, steps, [1.0 / (1 + s) for s in steps],
                            [1e9 + s for s in steps])])
    box = view.locator(".jsv-canvas-box")
    assert box.get_attribute("aria-label") == (
        "loss: last 0.0010091 at step 990, from 0.0010091 to 1 over steps 0 to 990")
    box.focus()
    page.keyboard.press("ArrowLeft")
    expect(view.locator(".jsv-readout")).to_contain_text("step 980")
    page.keyboard.press("Shift+ArrowLeft")
    expect(view.locator(".jsv-readout")).to_contain_text("step 880")
    page.keyboard.press("+")
    expect(view.locator(".jsv-chart")).to_have_attribute("data-zoomed", "true")
    assert page.evaluate("keys.traits.settings.zoom.loss.x").__len__() == 2   # kept
    page.keyboard.press("0")
    expect(view.locator(".jsv-chart")).to_have_attribute("data-zoomed", "false")
    assert page.evaluate("keys.traits.settings.zoom") == {}
    page.evaluate("keysView.destroy()")


def test_kernel_gone_only_when_its_requests_go_unanswered_busy_while_a_cell_runs(module_page):
    """Gone: the status is unknown, and what the last state said of the present (the step
    rate, the ETA, how long ago the checkpoint was written) is not said; all back once the
    kernel answers."""
    page = module_page
    checkpoint = "Checkpoint: step 1,000 at 04:29:56{}, written in 0.02 s, model.ckpt-1000"
    view = _mount(page, "health", dict(
        MODULE_STATE, progress={"fraction": 0.5, "text": "50.0% of 2,128"},
        eta="ETA 27 s", checkpoint=[checkpoint.format(" (10 s ago)")]))
    dead, busy = view.locator(".jsv-dead"), view.locator(".jsv-busy")
    present = [view.locator(".jsv-rate"), view.locator(".jsv-eta")]
    answer = ("() => health.emit({type: 'answer', id: health.sent.at(-1).id, parts: []}, [])")
    page.evaluate(answer)
    expect(view).to_have_attribute("data-jsv-health", "alive")
    expect(dead).to_be_visible()       # nothing answers the next requests: gone
    expect(view.locator(".jsv-status")).to_have_text("unknown")
    expect(view.locator("button.jsv-stop")).to_be_disabled()
    for part in present:
        expect(part).to_be_hidden()
    expect(view.locator(".jsv-checkpoint")).to_have_text(checkpoint.format(""))
    page.evaluate(answer)
    expect(dead).to_be_hidden()
    expect(view.locator(".jsv-status")).to_have_text("running")
    for part in present:
        expect(part).to_be_visible()
    expect(view.locator(".jsv-checkpoint")).to_have_text(checkpoint.format(" (10 s ago)"))
    page.evaluate("health.emit({type: 'busy'})")     # a cell runs: its requests wait
    expect(busy).to_be_visible()
    page.wait_for_function("health.sent.length > 4")
    assert dead.is_hidden()
    page.evaluate("health.emit({type: 'idle'})")
    expect(dead).to_be_visible()       # the cell ended, and still nothing answers
    page.evaluate(answer)
    expect(view).to_have_attribute("data-jsv-health", "alive")
    assert view.get_attribute("data-jsv-offline") is None
    page.evaluate("healthView.destroy()")


def test_many_tags_a_regex_filter_groups_by_prefix_and_compact_best_values(module_page):
    page = module_page
    tags = ([f"train/m{i:02d}" for i in range(20)] + [f"val/m{i:02d}" for i in range(19)]
            + ["loss"])
    state = dict(MODULE_STATE, best=[[tag, "0.5 (min) at step 2"] for tag in tags])
    view = _mount(page, "tags", state=state)
    _series(page, "tags", [(tag, 1, 0, [1.0, 2.0], [1.0, 0.5], [1e9, 1e9 + 1]) for tag in tags])
    # Grouped by prefix: the tags without one first, then each prefix, collapsible.
    assert view.locator(".jsv-group").evaluate_all("gs => gs.map(g => g.dataset.group)") == [
        "", "train", "val"]
    assert view.locator(".jsv-group > summary").all_inner_texts() == ["train (20)", "val (19)"]
    expect(view.locator(".jsv-chart")).to_have_count(40)
    # The best values take a few lines, not forty.
    rows = view.locator(".jsv-best li").evaluate_all(
        "items => new Set(items.map(i => i.offsetTop)).size")
    assert view.locator(".jsv-best li").count() == 40 and rows <= 12, rows
    # A regular expression (case-insensitive, as TensorBoard's) keeps one tag of forty.
    view.locator(".jsv-filter input").fill("VAL/m07$")
    expect(view.locator(".jsv-chart")).to_have_count(1)
    expect(view.locator(".jsv-chart")).to_have_attribute("data-tag", "val/m07")
    expect(view.locator(".jsv-tag")).to_have_count(1)
    expect(view.locator(".jsv-filter-count")).to_have_text("1 of 40")
    expect(view.locator(".jsv-best li")).to_have_text(["val/m07: 0.5 (min) at step 2"])
    assert page.evaluate("tags.traits.settings.filter") == "VAL/m07$"
    view.locator(".jsv-filter input").fill("m0(")                   # not a regex: no filter
    expect(view.locator(".jsv-filter input")).to_have_attribute("aria-invalid", "true")
    expect(view.locator(".jsv-chart")).to_have_count(40)
    view.locator(".jsv-filter input").fill("")
    # A closed group draws nothing until it opens again; the view keeps it closed.
    view.locator(".jsv-group[data-group='train'] > summary").click()
    page.wait_for_function("(tags.traits.settings.closedGroups || []).join() === 'train'")
    chart = view.locator(".jsv-chart[data-tag='train/m03']")
    draws = chart.get_attribute("data-draws")
    _series(page, "tags", [("train/m03", 1, 2, [3.0], [0.25], [1e9 + 2])])
    assert chart.get_attribute("data-draws") == draws
    view.locator(".jsv-group[data-group='train'] > summary").click()
    page.wait_for_function("tags.traits.settings.closedGroups.length === 0")
    expect(chart).to_have_attribute("data-points", "3")
    page.evaluate("tagsView.destroy()")


# The browser's Notification, as a page at an http origin has it, recording what it shows
# (about:blank, this page's origin, has none).
NOTIFICATIONS_JS = """() => {
    window.shown = [];
    window.Notification = class {
        constructor(title, options) { window.shown.push([title, options.body, options.tag]); }
        static requestPermission() { Notification.permission = 'granted';
                                     return Promise.resolve('granted'); }
    };
    Notification.permission = 'default';
}"""


def test_notifications_are_asked_for_by_a_click_and_tell_each_alert_once(module_page):
    page = module_page
    page.evaluate(NOTIFICATIONS_JS)
    ended = {"id": "finished@1.000", "kind": "finished", "title": "fit: finished",
             "text": "finished at step 1,200"}
    stall = {"id": "stalled@0.500", "kind": "stalled", "title": "fit: stalled",
             "text": "stalled since 03:12"}
    view = _mount(page, "bell", state=dict(MODULE_STATE, alerts=[stall]))
    page.evaluate("() => { bellSecond = mount(bell); }")   # a second view of the same run
    page.evaluate("() => bell.emit({type: 'answer', id: bell.sent.at(-1).id, parts: []}, [])")
    button = view.locator("button.jsv-notify")
    button.click()                                          # the permission, on a click
    page.wait_for_function("bell.traits.settings.notify === true")
    expect(button).to_have_attribute("aria-pressed", "true")
    page.evaluate("s => bell.change('state', s)",
                  dict(MODULE_STATE, seq=2, status="finished", alerts=[stall, ended]))
    # The alert there before notifications were on is not told; the new one once, not twice.
    assert page.evaluate("shown") == [["fit: finished", "finished at step 1,200",
                                       "jsv-k1-finished@1.000"]]
    expect(view.locator(".jsv-dead")).to_be_visible()       # nothing answers any more
    page.wait_for_function("shown.length === 2")
    assert page.evaluate("shown[1][0]") == "fit: kernel gone"
    page.evaluate("s => bell.change('state', s)", dict(MODULE_STATE, seq=3, alerts=[stall, ended]))
    assert page.evaluate("shown.length") == 2
    button.click()                                          # off
    page.wait_for_function("bell.traits.settings.notify === false")
    page.evaluate("() => { bellView.destroy(); bellSecond.destroy(); delete window.Notification; }")


def test_merged_points_have_a_band_and_the_download_holds_every_point(module_page, tmp_path):
    """A merged point is drawn with its min/max band and read as a mean; a download asks the
    kernel for every point of the tag and writes those (smoothed as drawn); without an answer,
    the points drawn, and the chart says so."""
    page = module_page
    view = _mount(page, "full")
    page.evaluate("""() => full.emit(
        {type: "series", parts: [{run: "fit", tag: "loss", gen: 3, from: 0, n: 3, merged: true}]},
        [[2, 4, 5], [0.75, 0.25, 0.125], [1e9 + 2, 1e9 + 4, 1e9 + 5]],
        [[0.5, 0.125, 0.125], [1, 0.375, 0.125], [2, 2, 1]])""")
    chart = view.locator(".jsv-chart")
    expect(chart).to_have_attribute("data-band", "true")
    chart.locator(".jsv-canvas-box").focus()
    page.keyboard.press("Home")
    expect(chart.locator(".jsv-readout")).to_contain_text("(mean of 2: 0.75, 0.5 to 1)")
    page.keyboard.press("End")
    expect(chart.locator(".jsv-readout")).to_contain_text("(raw 0.125)")
    full = [[1, 2, 3, 4, 5], [0.5, 1.0, 0.375, 0.125, 0.125], [1e9 + 1, 1e9 + 2, 1e9 + 3,
                                                                 1e9 + 4, 1e9 + 5]]
    with page.expect_download() as info:
        chart.locator(".jsv-download-csv").click()
        page.wait_for_function("full.sent.some((m) => m.type === 'export')")
        request = page.evaluate("full.sent.filter((m) => m.type === 'export').at(-1)")
        assert request["tag"] == "loss"
        page.evaluate("([id, points]) => full.emit({type: 'export', id, tag: 'loss', "
                      "parts: [{run: 'fit', n: 5, merged: 0}]}, points)", [request["id"], full])
    rows = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text())))
    assert [(int(r["step"]), float(r["value"]), float(r["wall_time"])) for r in rows] == list(
        zip(*full))
    smoothed, last = [], 0.0
    for i, value in enumerate(full[1]):
        last = last * 0.6 + 0.4 * value
        smoothed.append(last / (1 - 0.6 ** (i + 1)))
    assert [float(r["smoothed"]) for r in rows] == pytest.approx(smoothed, rel=1e-12)
    expect(chart).to_have_attribute("data-exported", "full")
    with page.expect_download() as info:   # nothing answers: the points drawn
        chart.locator(".jsv-download-json").click()
    assert [r["value"] for r in json.loads(Path(info.value.path()).read_text())] == [
        0.75, 0.25, 0.125]
    expect(chart).to_have_attribute("data-exported", "drawn")
    expect(chart.locator(".jsv-chart-notice")).to_contain_text("the points drawn")
    page.evaluate("fullView.destroy()")


def test_x_tick_labels_read_apart_at_every_zoom_of_every_axis(module_page):
    page = module_page
    steps = [float(s) for s in range(2000, 2600)]
    walls = [1_700_000_000.0 + 0.05 * i for i in range(len(steps))]   # 20 steps a second
    view = _mount(page, "ticks")
    _series(page, "ticks", [("loss", 1, 0, steps, [1.0 / s for s in steps], walls)])
    chart = view.locator(".jsv-chart")
    zooms = {"step": [[2000, 2600], [2330, 2470], [2390, 2412], [2400, 2405]],
             "relative": [[0, 30], [4, 9], [5.1, 6.3], [5.5, 5.62]],
             "wall": [[walls[0], walls[-1]], [walls[100], walls[110]], [walls[50], walls[52]]]}
    for axis, ranges in zooms.items():
        for x in ranges:
            page.evaluate("([axis, x]) => ticks.change('settings', {xAxis: axis, "
                          "zoom: {loss: {x, y: null}}})", [axis, x])
            expect(chart).to_have_attribute("data-xaxis", axis)
            labels = chart.get_attribute("data-x-ticks").split("|")
            assert len(labels) >= 2 and len(set(labels)) == len(labels), (axis, x, labels)
    page.evaluate("ticksView.destroy()")


def test_a_long_timeline_shows_its_first_event_and_unfolds_what_it_folds(module_page):
    page = module_page
    lines = [["10:00:00", "started at step 0 (initialized)"]] + [
        [f"10:{i:02d}:00", f"stopped at step {10 * i}"] for i in range(1, 20)]
    view = _mount(page, "fold", dict(MODULE_STATE, timeline=lines, timeline_shown=12,
                                     timeline_dropped=0))
    items = view.locator(".jsv-timeline > li")
    button = view.locator(".jsv-fold-button")
    expect(items).to_have_count(13)
    assert items.first.text_content() == "10:00:00  started at step 0 (initialized)"
    expect(button).to_have_text("… 8 earlier events")
    expect(button).to_have_attribute("aria-expanded", "false")
    assert items.last.text_content() == "10:19:00  stopped at step 190"
    button.click()
    expect(items).to_have_count(21)
    expect(button).to_have_text("fold the 8 earlier events")
    assert items.nth(2).text_content() == "10:01:00  stopped at step 10"
    button.press("Enter")                                        # by keyboard too
    expect(items).to_have_count(13)
    # What the kernel no longer keeps is counted; nothing to unfold then.
    page.evaluate("s => fold.change('state', s)", dict(
        MODULE_STATE, seq=2, timeline=lines[:5], timeline_shown=12, timeline_dropped=7))
    expect(button).to_have_text("… 7 earlier events")
    expect(button).to_be_disabled()
    expect(items).to_have_count(6)
    page.evaluate("s => fold.change('state', s)", dict(MODULE_STATE, seq=3, timeline=lines[:3]))
    expect(items).to_have_count(3)
    expect(button).to_have_count(0)
    page.evaluate("foldView.destroy()")


def test_escape_leaves_a_field_as_it_is_and_focuses_the_notebook(module_page):
    """Escape in the tag filter (a search field, which Escape would empty) and in the x axis'
    select keeps their value and gives the focus to the notebook's cell of the view; a setting is
    written to the model only once the user changed it."""
    page = module_page
    view = _mount(page, "esc")
    page.evaluate("""() => {
        const notebook = document.createElement("div"), cell = document.createElement("div");
        notebook.className = "jp-Notebook";
        cell.className = "jp-Cell";
        notebook.tabIndex = cell.tabIndex = -1;
        document.body.append(notebook);
        notebook.append(cell);
        cell.append(escView.el);
    }""")
    _series(page, "esc", [(tag, 1, 0, [1.0, 2.0], [1.0, 0.5], [1e9, 1e9 + 1])
                          for tag in ("acc", "loss")])
    assert page.evaluate("esc.traits.settings") == {}          # nothing set, nothing kept
    box = view.locator(".jsv-filter input")
    box.focus()
    page.keyboard.type("los")
    expect(view.locator(".jsv-chart")).to_have_count(1)
    page.keyboard.press("Escape")
    expect(box).to_have_value("los")
    expect(view.locator(".jsv-chart")).to_have_count(1)
    assert page.evaluate("document.activeElement.className") == "jp-Cell"
    assert page.evaluate("esc.traits.settings") == {"filter": "los"}
    select = view.locator(".jsv-xaxis select")
    select.focus()
    page.keyboard.press("Escape")
    expect(select).to_have_value("step")
    assert page.evaluate("document.activeElement.className") == "jp-Cell"
    view.locator(".jsv-log input").check()
    assert page.evaluate("esc.traits.settings") == {"filter": "los", "log": True}
    page.evaluate("escView.destroy(); document.querySelector('.jp-Notebook').remove()")


RLO = "\u202e"


def test_hostile_and_huge_user_text_stays_in_its_box(module_page):
    """A right-to-left override in a run's or a tag's name reorders nothing around it; a
    3,000-character name and a 400-character tag are clipped with an ellipsis (whole on hover),
    nothing goes past the view's edge; a 60,000-character error scrolls in a bounded box; an
    Arabic tag downloads under its own name."""
    page = module_page
    name = RLO + "run" + "n" * 3000
    long_tag, arabic = "t" * 400, "خسارة"
    error = "Traceback (most recent call last):\n" + "x" * 60_000 + "\nValueError: " + RLO + "bad"
    view = _mount(page, "hostile", dict(MODULE_STATE, name=name, error=error, best=[
        [RLO + "loss", "2.795 (min) at step 150"], [long_tag, "1 (min) at step 2"]]))
    _series(page, "hostile", [(tag, 1, 0, [1.0, 2.0], [1.0, 0.5], [1e9, 1e9 + 1])
                              for tag in (RLO + "loss", long_tag, arabic)])
    # The header's parts, in their order on the screen: the override stays in the name.
    lefts = page.evaluate("""(v) => ['.jsv-name', '.jsv-status', '.jsv-step', '.jsv-rate']
        .map((s) => v.querySelector(s).getBoundingClientRect().left)""", view.element_handle())
    assert lefts == sorted(lefts), lefts
    # A chart's title: its tag, then its newest value, to the right or (a long tag) below.
    value_after_tag = page.evaluate("""(v) => Array.from(v.querySelectorAll('.jsv-chart-title'))
        .map((t) => {
            const tag = t.querySelector('.jsv-chart-tag').getBoundingClientRect();
            const value = t.querySelector('.jsv-chart-newest').getBoundingClientRect();
            return value.left >= tag.right - 1 || value.top >= tag.bottom - 1;
        })""", view.element_handle())
    assert value_after_tag == [True, True, True]
    best = view.locator(".jsv-best li").first
    assert page.evaluate("""(li) => li.children[0].getBoundingClientRect().left <
        li.children[1].getBoundingClientRect().left""", best.element_handle())
    # Clipped, whole in the tooltip; nothing past the view's right edge.
    for locator, text in ((view.locator(".jsv-name"), name),
                          (view.locator(".jsv-tag", has_text="tttt"), long_tag),
                          (view.locator(".jsv-chart-tag", has_text="tttt"), long_tag)):
        assert locator.get_attribute("title") == text
        assert locator.get_attribute("dir") == "auto"
        assert locator.evaluate("e => getComputedStyle(e).textOverflow") == "ellipsis"
        assert locator.evaluate("e => e.scrollWidth > e.clientWidth")   # it is cut
    past = page.evaluate("""(v) => {
        const edge = v.getBoundingClientRect().right;
        return Array.from(v.querySelectorAll('*')).filter((e) => e.getClientRects().length &&
            e.getBoundingClientRect().right > edge + 1).map((e) => e.className);
    }""", view.element_handle())
    assert past == [] and view.evaluate("v => v.scrollWidth <= v.clientWidth")
    box = view.locator(".jsv-error-box pre")
    assert box.evaluate("e => e.getBoundingClientRect().height") < 420
    assert box.evaluate("e => e.scrollHeight > e.clientHeight")
    with page.expect_download() as info:
        view.locator(f".jsv-chart[data-tag='{arabic}'] .jsv-download-csv").click()
    assert info.value.suggested_filename == f"fit-{arabic}.csv"
    view.screenshot(path=str(ARTIFACTS / "module-hostile-text.png"))
    page.evaluate("hostileView.destroy()")


def test_hundreds_of_tags_answer_a_click_at_once(module_page):
    """500 tags of 200 points: the charts on screen are drawn, not the others; a click on log
    scale takes under half a second, and so does clearing a filter that kept one tag."""
    page = module_page
    view = _mount(page, "five")
    steps = [float(s) for s in range(200)]
    walls = [1e9 + s for s in steps]
    tags = [f"t{i:03d}" for i in range(500)]
    _series(page, "five", [(tag, 1, 0, steps, [1.0 + (s * (i + 1)) % 7 for s in steps], walls)
                           for i, tag in enumerate(tags)])
    expect(view.locator(".jsv-chart")).to_have_count(500)
    drawn = view.locator(".jsv-chart[data-draws]").count()
    assert 2 <= drawn <= 20, drawn                       # those on screen
    clicked = page.evaluate("""(v) => {
        const started = performance.now();
        v.querySelector('.jsv-log input').click();
        return performance.now() - started;
    }""", view.element_handle())
    assert clicked < 500, clicked
    assert view.locator(".jsv-chart[data-yscale='log']").count() == drawn
    view.locator(".jsv-filter input").fill("^t250$")
    expect(view.locator(".jsv-chart")).to_have_count(1)
    cleared = page.evaluate("""(v) => {
        const box = v.querySelector('.jsv-filter input'), started = performance.now();
        box.value = '';
        box.dispatchEvent(new Event('input'));
        return performance.now() - started;
    }""", view.element_handle())
    assert cleared < 500, cleared
    expect(view.locator(".jsv-chart")).to_have_count(500)
    page.evaluate("fiveView.destroy()")


def test_busy_only_when_the_kernel_says_a_cell_runs(module_page):
    """A kernel heard from (its beats) whose answer is late is not "busy"; its own word that a
    cell runs is."""
    page = module_page
    view = _mount(page, "word")
    page.evaluate("() => word.emit({type: 'answer', id: word.sent.at(-1).id, parts: []}, [])")
    expect(view).to_have_attribute("data-jsv-health", "alive")
    page.evaluate("() => { window.beats = setInterval(() => word.emit({type: 'beat'}), 50); }")
    asked = page.evaluate("word.sent.length")
    # Unanswered past dead_after_ms (600 ms): the request goes out again.
    page.wait_for_function(f"word.sent.length > {asked}")
    assert view.get_attribute("data-jsv-health") == "alive"
    expect(view.locator(".jsv-busy")).to_be_hidden()
    page.evaluate("word.emit({type: 'busy'})")
    expect(view.locator(".jsv-busy")).to_be_visible()
    page.evaluate("word.emit({type: 'idle'})")
    expect(view.locator(".jsv-busy")).to_be_hidden()
    page.evaluate("() => { clearInterval(window.beats); wordView.destroy(); }")
