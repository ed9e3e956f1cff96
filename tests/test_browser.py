"""The panel in a real browser: JupyterLab 4 in headless Chromium, driven by Playwright.

One Lab session, one notebook, several runs of a small Keras model in one kernel, each ending
another way, read from the page as a user sees it:
- "short" reaches --max-steps 25 under --wait: 'finished', step 25, fit's real epoch/batch,
  100 %, no ETA; the notebook saved afterwards stores its final text and an image;
- "boom" raises in its body: 'failed', its error, the failure in the timeline;
- "cmd" is stopped by `%supervise stop`: 'stopped' at the newest checkpoint's step, with the
  epoch/batch of that step;
- "live" (verbose=1) trains while the curves are explored: the value under the mouse as text,
  the log scale, drag-zoom and double-click reset; its output shows no escape characters; then
  the Stop button: 'stopped' at the newest checkpoint's step; Resume: 'running' again, the
  timeline saying from which checkpoint;
- `%supervise compare short cmd` overlays two runs with a legend and a two-line readout;
- a reloaded page shows the panels again with their timelines and every point;
- a kernel restart turns the old panels visibly dead within seconds, buttons disabled.

The server is our own: a free loopback port, a random token, config/runtime/data/settings/
workspace folders under the test's tmp_path, and a kernelspec of its own that runs this very
Python (``sys.executable``, where jupyter_supervisor is installed). Kernels and server are stopped
by PID at the end, also when the test is killed with SIGTERM. Every wait is on a condition in the
page, with a timeout. Screenshots of each state go to test-artifacts/ (panel-failure.png on
failure); with JSV_UPDATE_DOCS=1 the finished run's one also becomes docs/panel.png, the
README's picture.
"""
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
import tensorflow as tf
from nbformat.v4 import new_code_cell, new_notebook
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect, sync_playwright

from helpers import child_env, free_ports

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
KERNEL_NAME = "jsv-browser-test"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
DOCS_PANEL = Path(__file__).resolve().parent.parent / "docs" / "panel.png"
README_SHOT = "panel-finished.png"
SENTINEL = "ALL-CELLS-DONE"
# Generous for a loaded 2-core machine (the kernel imports TensorFlow); never reached in a pass.
SERVER_STARTUP = 60.0
WAIT_MS = 45_000

# JupyterLab's status bar reads "<kernel> | Idle" once the kernel is connected (cells run before
# that are dropped); a "Select Kernel" dialog means our kernelspec was not found.
KERNEL_READY_JS = """() => !!document.querySelector('.jp-Dialog') ||
    Array.from(document.querySelectorAll('.jp-StatusBar-TextItem'))
        .some(e => /^(?!No Kernel).+ \\| Idle$/.test(e.textContent.trim()))"""


def _api(base, token, path, method="GET"):
    request = urllib.request.Request(f"{base}{path}", method=method,
                                     headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


def _write_lab_settings(settings_dir: Path) -> None:
    # No news/update toast over the page, no autosave rewriting the notebook.
    files = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    }
    for rel, content in files.items():
        path = settings_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))


def _write_kernelspec(jupyter_path: Path) -> None:
    # This Python, whatever else is installed: the kernel must import this checkout's package.
    spec_dir = jupyter_path / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "jupyter_supervisor test", "language": "python",
            "env": {"TF_CPP_MIN_LOG_LEVEL": "2"}}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


def _children(pid: int):
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as file:
                found += [int(child) for child in file.read().split()]
        except OSError:
            pass
    return found


class Lab:
    """A JupyterLab (``app="jupyterlab"``) or Notebook 7 (``app="notebook"``) server of our
    own; ``stop()`` ends its kernels and itself by PID."""

    def __init__(self, root: Path, home: Path, app: str = "jupyterlab"):
        self.app = app
        self.root = root
        self.home = home
        (self.port,) = free_ports(1)
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = home / "server.log"
        self.proc = None

    def start(self) -> None:
        for name in ("config", "runtime", "data", "path", "settings", "workspaces", "ipython"):
            (self.home / name).mkdir(parents=True, exist_ok=True)
        _write_lab_settings(self.home / "settings")
        _write_kernelspec(self.home / "path")
        env = child_env(JUPYTER_CONFIG_DIR=str(self.home / "config"),
                        JUPYTER_RUNTIME_DIR=str(self.home / "runtime"),
                        JUPYTER_DATA_DIR=str(self.home / "data"),
                        JUPYTER_PATH=str(self.home / "path"),
                        IPYTHONDIR=str(self.home / "ipython"),
                        PATH=os.path.dirname(sys.executable) + os.pathsep
                        + os.environ.get("PATH", ""))
        app_class = "LabApp" if self.app == "jupyterlab" else "JupyterNotebookApp"
        cmd = [sys.executable, "-m", self.app, "--no-browser", "--allow-root",
               "--ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
               f"--ServerApp.root_dir={self.root}",
               f"--IdentityProvider.token={self.token}",
               f"--{app_class}.workspaces_dir={self.home / 'workspaces'}",
               f"--{app_class}.user_settings_dir={self.home / 'settings'}",
               # A safety net should this process die without its teardown.
               "--ServerApp.shutdown_no_activity_timeout=600",
               "--MappingKernelManager.cull_idle_timeout=600"]
        with open(self.log_path, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.root, start_new_session=True)
        deadline = time.monotonic() + SERVER_STARTUP
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                _api(self.base, self.token, "/api/status")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter lab did not answer within {SERVER_STARTUP} s:\n"
                                       f"{self.log_tail()}") from None
                time.sleep(0.1)  # polling for the port to answer

    def kernel_names(self):
        """The kernelspec name of every session the server runs."""
        return [session["kernel"]["name"]
                for session in _api(self.base, self.token, "/api/sessions")]

    def log_tail(self, chars=4000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return "(no server log)"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        kids = _children(self.proc.pid)
        try:
            # A kernel's shutdown stops its live runs (each writes its final checkpoint).
            for kernel in _api(self.base, self.token, "/api/kernels"):
                _api(self.base, self.token, f"/api/kernels/{kernel['id']}", method="DELETE")
        except (urllib.error.URLError, OSError) as error:
            print(f"kernel shutdown through the API failed: {error}")
        self.proc.send_signal(signal.SIGTERM)  # jupyter_server shuts down cleanly on SIGTERM
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for kid in kids:  # only the children of the server we started
            if os.path.exists(f"/proc/{kid}"):
                try:
                    os.kill(kid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture(params=["jupyterlab"])
def lab(tmp_path, request):
    """A running JupyterLab (or, parametrized, Notebook 7) rooted at tmp_path/lab; stopped
    (kernels too) at the end, also when the test process gets SIGTERM (e.g. from `timeout`)."""
    root = tmp_path / "lab"
    root.mkdir()
    server = Lab(root, tmp_path / "jhome", app=request.param)

    def on_sigterm(_signum, _frame):
        raise SystemExit(143)  # unwinds through the teardown below

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)


# The cells. Four seeded models of tests/eager_models.py (8 batches an epoch); a callback's short
# sleep keeps the rates modest on 2 cores.
SETUP_CELL = """\
import time
import keras
import eager_models
import jupyter_supervisor
x, y = eager_models.data(n=64)
live_model, short_model, boom_model, cmd_model = (eager_models.make_model() for _ in range(4))
slow = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.01))
batches = []
def count_and_explode(batch, logs):
    batches.append(batch)
    if len(batches) == 13:
        raise ValueError("boom at the 13th batch")
explode = keras.callbacks.LambdaCallback(on_train_batch_end=count_and_explode)
"""
LIVE_CELL = """\
%%supervise --logdir {root}/live --save-summaries-secs 0.3 --save-model-secs 5
live_model.fit(x, y, batch_size=8, epochs=100000, callbacks=[sv.callback, slow], verbose=1)
"""
SHORT_CELL = """\
%%supervise --logdir {root}/short --max-steps 25 --save-summaries-secs 0.1 --wait
short_model.fit(x, y, batch_size=8, epochs=5, callbacks=[sv.callback, slow], verbose=0)
"""
BOOM_CELL = """\
%%supervise --logdir {root}/boom --save-summaries-secs 0.1
boom_model.fit(x, y, batch_size=8, epochs=5, callbacks=[sv.callback, explode], verbose=0)
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
COMPARE_CELL = "%supervise compare short cmd"
SENTINEL_CELL = f"import sys\nprint({SENTINEL!r}, sys.executable)"
BATCHES = 8
TF2_STEP_KEY = "jupyter_supervisor/step/.ATTRIBUTES/VARIABLE_VALUE"


def _write_notebook(path: Path, root: Path) -> None:
    notebook = new_notebook(metadata={
        "kernelspec": {"name": KERNEL_NAME, "display_name": "jupyter_supervisor test",
                       "language": "python"},
        "language_info": {"name": "python"},
    })
    cells = ["%load_ext jupyter_supervisor", SETUP_CELL, LIVE_CELL, SHORT_CELL, BOOM_CELL,
             CMD_CELL, CMD_STOP_CELL, COMPARE_CELL, SENTINEL_CELL]
    notebook.cells = [new_code_cell(cell.format(root=root) if "{root}" in cell else cell)
                      for cell in cells]
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


def test_panel_states_curves_and_a_dead_kernel_in_jupyterlab(lab, tmp_path):
    assert os.path.exists(CHROMIUM), (
        f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); "
        "never `playwright install`.")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "panel-failure.png").unlink(missing_ok=True)  # an older run's
    root = tmp_path / "runs"
    _write_notebook(lab.root / "panel.ipynb", root)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # Tall enough that a whole panel fits in its screenshot.
        page = browser.new_page(viewport={"width": 1280, "height": 1800})
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        problems = []
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("console", lambda message: problems.append(f"console: {message.text}")
                if message.type == "error" else None)
        try:
            _drive(page, lab, root)
        except BaseException:
            _keep_evidence(page, problems, lab)
            raise
        finally:
            browser.close()
    assert not [p for p in problems if "jsv" in p or "panel.js" in p], problems


def _keep_evidence(page, problems, lab) -> None:
    """A failure's screenshot and the panels' text, printed with the browser's errors and the
    server log (best effort: the browser may be what failed)."""
    print("browser errors:", *problems[-20:], sep="\n  ")
    print("server log tail:\n", lab.log_tail())
    try:
        page.screenshot(path=str(ARTIFACTS / "panel-failure.png"), full_page=True)
        for panel in page.locator(".jsv-panel").all():
            print("panel text:", panel.inner_text(timeout=5000))
    except PlaywrightError as error:
        print(f"no failure screenshot: {error}")


def _open(page, lab) -> None:
    page.goto(f"{lab.base}/lab/tree/panel.ipynb?reset&token={lab.token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.wait_for_function(KERNEL_READY_JS)
    assert page.locator(".jp-Dialog").count() == 0, (
        f"JupyterLab asks for a kernel: {page.locator('.jp-Dialog').inner_text()!r}; "
        f"the kernelspec {KERNEL_NAME!r} was not found")


def _panel(page, name):
    return page.locator(f".jsv-panel:has(.jsv-name:text-is('{name}'))")


def _shot(page, locator, name) -> None:
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(ARTIFACTS / name))
    if name == README_SHOT and os.environ.get("JSV_UPDATE_DOCS"):
        # The README's picture is this screenshot: JSV_UPDATE_DOCS=1 pytest tests/test_browser.py
        shutil.copyfile(ARTIFACTS / name, DOCS_PANEL)


def _drive(page, lab, root: Path) -> None:
    _open(page, lab)
    assert lab.kernel_names() == [KERNEL_NAME]
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    done = page.locator(".jp-OutputArea-output", has_text=SENTINEL)
    expect(done).to_be_visible(timeout=120_000)
    assert sys.executable in done.inner_text(), "the kernel does not run the test's Python"
    expect(page.locator(".jsv-panel")).to_have_count(4)

    # --max-steps reached (under --wait): finished, exact step and position, 100 %, no ETA.
    short = _panel(page, "short")
    expect(short.locator(".jsv-status")).to_have_text("finished")
    expect(short.locator(".jsv-step")).to_have_text("step 25")
    expect(short.locator(".jsv-fit")).to_have_text(_position(25, 5))
    expect(short.locator(".jsv-progress-text")).to_have_text("100.0% of 25")
    expect(short.locator(".jsv-eta")).to_have_count(0)
    expect(short.locator(".jsv-timeline")).to_contain_text(
        "finished at step 25 (--max-steps reached)")
    expect(short.locator(".jsv-best")).to_contain_text("loss: ")
    _shot(page, short, "panel-finished.png")

    # A body that raises: failed, with its error and the failure in the timeline.
    boom = _panel(page, "boom")
    expect(boom.locator(".jsv-status")).to_have_text("failed")
    expect(boom.locator(".jsv-error")).to_contain_text("ValueError: boom at the 13th batch")
    expect(boom.locator(".jsv-timeline")).to_contain_text("ValueError: boom at the 13th batch")
    expect(boom.locator("button.jsv-resume")).to_be_enabled()
    _shot(page, boom, "panel-failed.png")

    # %supervise stop: stopped at the newest checkpoint's step, with that step's epoch/batch.
    cmd = _panel(page, "cmd")
    expect(cmd.locator(".jsv-status")).to_have_text("stopped")
    stopped_at = _checkpoint_step(root / "cmd")
    expect(cmd.locator(".jsv-step")).to_have_text(f"step {stopped_at:,}")
    expect(cmd.locator(".jsv-fit")).to_have_text(_position(stopped_at, 100000))
    expect(cmd.locator(".jsv-timeline")).to_contain_text(f"stopped at step {stopped_at}")
    expect(cmd.locator(".jsv-eta")).to_have_count(0)
    _shot(page, cmd, "panel-stopped-by-command.png")

    # The live run: its curves explored as in TensorBoard.
    live = _panel(page, "live")
    expect(live.locator(".jsv-status")).to_have_text("running")
    expect(live.locator(".jsv-rate")).to_have_text(re.compile(r"^[\d,.]+ steps/s$"))
    chart = live.locator(".jsv-chart[data-tag='loss']")
    page.wait_for_function("e => Number(e.dataset.points) >= 3", arg=chart.element_handle())
    # Every tag there (charts sit in tag order: one that comes later moves "loss" on the page,
    # and a drag would then start where the chart was).
    tags = live.locator(".jsv-tag")
    expect(tags).to_have_text(["epoch_loss", "global_step/sec", "loss"])
    assert all(t.is_visible() for t in tags.all())
    box = chart.locator(".jsv-canvas-box")
    box.scroll_into_view_if_needed()
    area = box.bounding_box()
    box.hover(position={"x": area["width"] * 0.6, "y": area["height"] / 2})
    expect(chart.locator(".jsv-readout")).to_have_text(re.compile(
        r"^[-\d.e]+ \(raw [-\d.e]+\)  step [\d,]+  \d\d:\d\d:\d\d  \+\d+ s$"))
    linear_ticks = chart.get_attribute("data-y-ticks")
    live.locator(".jsv-log input").check()
    expect(chart).to_have_attribute("data-yscale", "log")
    assert chart.get_attribute("data-y-ticks") != linear_ticks
    whole = chart.get_attribute("data-x-domain")
    box.scroll_into_view_if_needed()
    area = box.bounding_box()
    page.mouse.move(area["x"] + 70, area["y"] + 40)
    page.mouse.down()
    page.mouse.move(area["x"] + area["width"] * 0.5, area["y"] + 40, steps=5)
    page.mouse.up()
    expect(chart).to_have_attribute("data-zoomed", "true")
    zoomed = [float(v) for v in chart.get_attribute("data-x-domain").split(",")]
    full = [float(v) for v in whole.split(",")]
    assert full[0] <= zoomed[0] < zoomed[1] < full[1], (full, zoomed)
    _shot(page, live, "panel-live-zoomed-log.png")
    box.dblclick()
    expect(chart).to_have_attribute("data-zoomed", "false")
    # verbose=1: Keras' progress bar, rendered by Jupyter (no escape characters, one line).
    output = live.locator(".jsv-output")
    expect(output).to_contain_text("step")
    text = output.inner_text()
    assert "\x1b" not in text and "[1m" not in text and "[0m" not in text, text[-500:]

    # Two runs in one chart: a legend, and one readout line per run.
    comparison = page.locator(".jsv-compare")
    expect(comparison.locator(".jsv-legend-item")).to_have_text(["short", "cmd"])
    both = comparison.locator(".jsv-chart[data-tag='loss']")
    both_box = both.locator(".jsv-canvas-box")
    both_box.scroll_into_view_if_needed()
    both_area = both_box.bounding_box()
    both_box.hover(position={"x": 80, "y": both_area["height"] / 2})
    expect(both.locator(".jsv-readout")).to_have_text(re.compile(r"^short: .*\ncmd: .*$"))
    _shot(page, comparison, "compare.png")

    # The Stop button: stopped at the newest checkpoint's step, with that step's position.
    live.locator("button.jsv-stop").click()
    expect(live.locator(".jsv-status")).to_have_text("stopped")
    stopped_at = _checkpoint_step(root / "live")
    expect(live.locator(".jsv-step")).to_have_text(f"step {stopped_at:,}")
    expect(live.locator(".jsv-fit")).to_have_text(_position(stopped_at, 100000))
    expect(live.locator("button.jsv-resume")).to_be_enabled()
    expect(live.locator("button.jsv-stop")).to_be_disabled()
    _shot(page, live, "panel-stopped-by-button.png")

    # Saved after the runs ended, the notebook stores the final text and an image of "short".
    page.locator(".jp-Notebook").first.click()
    page.keyboard.press("Control+s")
    page.wait_for_function(
        "() => !document.querySelector('.jp-mod-dirty')", timeout=WAIT_MS)
    saved = nbformat.read(str(lab.root / "panel.ipynb"), as_version=4)
    outputs = [o for o in saved.cells[3].outputs if o.output_type == "display_data"]
    assert any(o.data.get("text/plain", "").startswith("short: finished at step 25 of 25")
               and o.data.get("image/png") for o in outputs), outputs

    # Reopened: the panels come back with their timelines and every point.
    page.reload()
    page.wait_for_function(KERNEL_READY_JS)
    live = _panel(page, "live")
    expect(live.locator(".jsv-status")).to_have_text("stopped")
    expect(live.locator(".jsv-timeline")).to_contain_text("started at step 0")
    page.wait_for_function("e => Number(e.dataset.points) >= 3",
                           arg=live.locator(".jsv-chart[data-tag='loss']").element_handle())

    # Resume (the button): running again from the stopped step's checkpoint, said so.
    live.locator("button.jsv-resume").click()
    expect(live.locator(".jsv-status")).to_have_text("running")
    expect(live.locator(".jsv-timeline")).to_contain_text(
        f"resumed from model.ckpt-{stopped_at} (step {stopped_at})")
    expect(live.locator("button.jsv-stop")).to_be_enabled()
    expect(live.locator("button.jsv-resume")).to_be_disabled()
    page.wait_for_function(
        f"e => Number(e.textContent.replace(/[^0-9]/g, '')) > {stopped_at}",
        arg=live.locator(".jsv-step").element_handle())
    _shot(page, live, "panel-resumed.png")

    # A kernel restart: every old panel says the kernel is gone, its buttons disabled.
    page.get_by_role("menuitem", name="Kernel", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Restart Kernel…")).first.click()
    page.locator(".jp-Dialog .jp-mod-accept").click()
    expect(live.locator(".jsv-dead")).to_be_visible(timeout=15_000)
    expect(live.locator(".jsv-dead")).to_have_text("kernel gone — re-run the cell")
    expect(live.locator(".jsv-status")).to_have_text("unknown")  # not "running" any more
    expect(live.locator("button.jsv-resume")).to_be_disabled()
    _shot(page, live, "panel-kernel-gone.png")


# Notebook 7: the same front end, in Notebook's page.
NOTEBOOK7_READY_JS = """() => {
    const e = document.querySelector('.jp-Notebook-ExecutionIndicator');
    return !!e && e.dataset.status === 'idle';
}"""


@pytest.mark.parametrize("lab", ["notebook"], indirect=True)
def test_a_finished_run_in_notebook_7(lab, tmp_path):
    root = tmp_path / "runs"
    notebook = new_notebook(metadata={
        "kernelspec": {"name": KERNEL_NAME, "display_name": "jupyter_supervisor test",
                       "language": "python"}, "language_info": {"name": "python"}})
    notebook.cells = [new_code_cell(cell.format(root=root) if "{root}" in cell else cell)
                      for cell in ("%load_ext jupyter_supervisor", SETUP_CELL, SHORT_CELL,
                                   SENTINEL_CELL)]
    nbformat.write(notebook, str(lab.root / "panel.ipynb"))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        try:
            page.goto(f"{lab.base}/notebooks/panel.ipynb?token={lab.token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell")
            # The server's kernel, then the page's connection to it.
            deadline = time.monotonic() + WAIT_MS / 1000
            while not [s for s in _api(lab.base, lab.token, "/api/sessions")
                       if s["kernel"]["execution_state"] == "idle"]:
                assert time.monotonic() < deadline, "the kernel did not start"
                time.sleep(0.1)  # polling the server for the kernel's state
            page.wait_for_function(NOTEBOOK7_READY_JS)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            expect(page.locator(".jp-OutputArea-output", has_text=SENTINEL)).to_be_visible(
                timeout=120_000)
            short = _panel(page, "short")
            expect(short.locator(".jsv-status")).to_have_text("finished")
            expect(short.locator(".jsv-step")).to_have_text("step 25")
            expect(short.locator(".jsv-fit")).to_have_text(_position(25, 5))
            expect(short.locator(".jsv-progress-text")).to_have_text("100.0% of 25")
            page.wait_for_function("e => Number(e.dataset.points) >= 2", arg=short.locator(
                ".jsv-chart[data-tag='loss']").element_handle())
            _shot(page, short, "notebook7-finished.png")
        except BaseException:
            _keep_evidence(page, [], lab)
            raise
        finally:
            browser.close()
