"""The panel in a real browser: JupyterLab 4 in headless Chromium, driven by Playwright.

One test, two stories (TF1 graph code, and a TensorFlow 2 Keras fit): a notebook loads the
extension, builds a small model and starts ``%%supervise`` on it. In the rendered page the step advances and the plots (an SVG
the browser draws) appear and are redrawn; Stop makes the run 'stopped' with its newest checkpoint (read here with
TensorFlow) at the step the panel shows; Resume makes it 'running' again from that step, with a
rate and a plot redrawn from the new session's summaries.

The server is our own: a free loopback port, a random token, config/runtime/data/settings/
workspace folders under the test's tmp_path, and a kernelspec of its own that runs this very
Python (``sys.executable``, where jupyter_supervisor is installed). Kernels and server are stopped
by PID at the end, also when the test is killed with SIGTERM. JupyterLab's settings keep their
defaults, comms over kernel subshells included: a button's callback then runs on a subshell's
thread, not the kernel's main thread, as it does for users. Every wait is on a condition in the
page, with a timeout. The screenshot is test-artifacts/panel.png (panel-failure.png on failure).
"""
import json
import os
import re
import secrets
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

from helpers import checkpoint_step, child_env, free_ports

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
KERNEL_NAME = "jsv-browser-test"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
SENTINEL = "ALL-CELLS-DONE"
# Generous for a loaded 2-core machine (the kernel imports TensorFlow); never reached in a pass.
SERVER_STARTUP = 60.0
WAIT_MS = 45_000

# The suite's model (tests/helpers.py, on the kernel's PYTHONPATH), bound as gs, w, loss, train_op.
MODEL_CELL = """\
import time
import tensorflow as tf
from helpers import build_model

tf.compat.v1.disable_eager_execution()
build_model(globals(), learning_rate=0.01)
"""

# One training step; the sleep is part of the training code, keeping the rate modest (2 cores).
SUPERVISE_CELL = """\
%%supervise --logdir {logdir} --save-summaries-secs 0.5 --save-model-secs 5 --repeat
sess.run(train_op)
time.sleep(0.01)
"""

# TensorFlow 2: a small Keras model in eager mode, and its fit under the run's callback (a
# callback's short sleep keeps the rate modest on 2 cores).
KERAS_MODEL_CELL = """\
import time
import keras
import eager_models
x, y = eager_models.data(n=64)
model = eager_models.make_model()
slow = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.01))
"""
KERAS_CELL = """\
%%supervise --logdir {logdir} --save-summaries-secs 0.5 --save-model-secs 5
model.fit(x, y, batch_size=8, epochs=100000, callbacks=[sv.callback, slow], verbose=0)
"""
# Each story: the model cell, the %%supervise cell, and how to read a checkpoint's step.
STORIES = {
    "graph": (MODEL_CELL, SUPERVISE_CELL, checkpoint_step),
    "keras": (KERAS_MODEL_CELL, KERAS_CELL, lambda path: int(tf.train.load_checkpoint(path)
                                                            .get_tensor(TF2_STEP_KEY))),
}
TF2_STEP_KEY = "jupyter_supervisor/step/.ATTRIBUTES/VARIABLE_VALUE"

SENTINEL_CELL = f"import sys\nprint({SENTINEL!r}, sys.executable)"

# JavaScript run in the page. The panel's header is an HTML widget re-rendered on each change;
# .jsv-step carries the step as data-step ('' before there is one).
STEP_JS = """() => {
    const e = document.querySelector('.jsv-panel .jsv-step');
    return e && e.dataset.step !== '' ? Number(e.dataset.step) : null;
}"""
# The plot: an <svg> the browser drew (SvgRenderer), laid out with a size and at least one curve
# or dot; its data-render (which drawing it is) when so, else null.
PLOT_SRC_JS = """() => {
    const plot = document.querySelector('.jsv-panel .jsv-plot');
    const svg = plot && plot.querySelector('svg.jsv-plot-svg');
    if (!svg || getComputedStyle(plot).display === 'none') return null;
    const box = svg.getBoundingClientRect();
    const drawn = svg.querySelector('path.jsv-plot-line, circle');
    if (box.width === 0 || box.height === 0 || !drawn) return null;
    return svg.dataset.render;
}"""
# From now on, records every (status, step) the header shows into window.__jsvShown, and the
# step the header shows at each redraw of the plot into window.__jsvRedrawnAt.
RECORD_JS = """() => {
    const header = document.querySelector('.jsv-panel .jsv-header');
    const plot = document.querySelector('.jsv-panel .jsv-plot');
    const shownStep = () => {
        const step = header.querySelector('.jsv-step');
        return step && step.dataset.step !== '' ? Number(step.dataset.step) : null;
    };
    window.__jsvShown = [];
    window.__jsvRedrawnAt = [];
    new MutationObserver(() => {
        const status = header.querySelector('.jsv-status');
        window.__jsvShown.push([status ? status.textContent : null, shownStep()]);
    }).observe(header, {subtree: true, childList: true, characterData: true, attributes: true});
    new MutationObserver(() => window.__jsvRedrawnAt.push(shownStep()))
        .observe(plot, {subtree: true, childList: true});
}"""
# What .jsv-rate reads while running: a rate, and not a zero one.
RUNNING_RATE = re.compile(r"^(?!0 )[\d,.]+ steps/s$")
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
    """A JupyterLab server of our own; ``stop()`` ends its kernels and itself by PID."""

    def __init__(self, root: Path, home: Path):
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
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
               "--ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
               f"--ServerApp.root_dir={self.root}",
               f"--IdentityProvider.token={self.token}",
               f"--LabApp.workspaces_dir={self.home / 'workspaces'}",
               f"--LabApp.user_settings_dir={self.home / 'settings'}",
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


@pytest.fixture
def lab(tmp_path):
    """A running JupyterLab rooted at tmp_path/lab; stopped (kernels too) at the end, also when
    the test process gets SIGTERM (e.g. from `timeout`)."""
    root = tmp_path / "lab"
    root.mkdir()
    server = Lab(root, tmp_path / "jhome")

    def on_sigterm(_signum, _frame):
        raise SystemExit(143)  # unwinds through the teardown below

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)


def _write_notebook(path: Path, logdir: Path, story: str) -> None:
    notebook = new_notebook(metadata={
        "kernelspec": {"name": KERNEL_NAME, "display_name": "jupyter_supervisor test",
                       "language": "python"},
        "language_info": {"name": "python"},
    })
    model_cell, supervise_cell, _ = STORIES[story]
    notebook.cells = [new_code_cell("%load_ext jupyter_supervisor"),
                      new_code_cell(model_cell),
                      new_code_cell(supervise_cell.format(logdir=logdir)),
                      new_code_cell(SENTINEL_CELL)]
    nbformat.write(notebook, str(path))


def _step_in_file_name(checkpoint_path: str) -> int:
    return int(checkpoint_path.rsplit("-", 1)[1])


@pytest.mark.parametrize("story", sorted(STORIES))
def test_panel_live_stop_and_resume_in_jupyterlab(lab, tmp_path, story):
    assert os.path.exists(CHROMIUM), (
        f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); "
        "never `playwright install`.")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "panel-failure.png").unlink(missing_ok=True)  # an older run's
    logdir = tmp_path / "runs" / "b"
    _write_notebook(lab.root / "panel.ipynb", logdir, story)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        problems = []
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("console", lambda message: problems.append(f"console: {message.text}")
                if message.type == "error" else None)
        try:
            _drive(page, lab, logdir, story)
        except BaseException:
            _keep_evidence(page, problems, lab)
            raise
        finally:
            browser.close()


def _keep_evidence(page, problems, lab) -> None:
    """A failure's screenshot and the panel's text, printed with the browser's errors and the
    server log (best effort: the browser may be what failed)."""
    print("browser errors:", *problems[-20:], sep="\n  ")
    print("server log tail:\n", lab.log_tail())
    try:
        page.screenshot(path=str(ARTIFACTS / "panel-failure.png"))
        panel = page.locator(".jsv-panel")
        print("panel text:", panel.first.inner_text(timeout=5000) if panel.count() else "(none)")
    except PlaywrightError as error:
        print(f"no failure screenshot: {error}")


def _drive(page, lab, logdir: Path, story: str) -> None:
    # ?reset drops any saved layout; the token logs in.
    page.goto(f"{lab.base}/lab/tree/panel.ipynb?reset&token={lab.token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.wait_for_function(KERNEL_READY_JS)
    assert page.locator(".jp-Dialog").count() == 0, (
        f"JupyterLab asks for a kernel: {page.locator('.jp-Dialog').inner_text()!r}; "
        f"the kernelspec {KERNEL_NAME!r} was not found")
    assert lab.kernel_names() == [KERNEL_NAME]

    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    done = page.locator(".jp-OutputArea-output", has_text=SENTINEL)
    expect(done).to_be_visible()
    assert sys.executable in done.inner_text(), "the kernel does not run the test's Python"

    panel = page.locator(".jsv-panel")
    expect(panel).to_have_count(1)
    status = panel.locator(".jsv-status")
    step_span = panel.locator(".jsv-step")
    stop, resume = panel.locator("button.jsv-stop"), panel.locator("button.jsv-resume")
    assert page.locator(".jsv-error .widget-html-content").inner_text() == ""

    # Live: running, the step advances, a plot appears and is redrawn as summaries arrive.
    expect(status).to_have_text("running")
    first = page.wait_for_function(STEP_JS).json_value()
    page.wait_for_function(f"() => ({STEP_JS})() > {first}")
    plot = page.wait_for_function(PLOT_SRC_JS).json_value()
    page.wait_for_function(f"() => {{ const s = ({PLOT_SRC_JS})(); return s && s !== {plot!r}; }}")
    expect(panel.locator(".jsv-rate")).to_have_text(RUNNING_RATE)
    expect(stop).to_be_enabled()
    expect(resume).to_be_disabled()

    # Stop: 'stopped', and the newest checkpoint holds the step the panel shows.
    stop.click()
    expect(status).to_have_text("stopped")
    expect(resume).to_be_enabled()
    expect(stop).to_be_disabled()
    stopped_at = int(step_span.get_attribute("data-step"))
    newest = tf.train.latest_checkpoint(str(logdir))
    assert newest is not None, f"no checkpoint in {logdir}: {sorted(os.listdir(logdir))}"
    assert _step_in_file_name(newest) == stopped_at, (newest, stopped_at)
    assert STORIES[story][2](newest) == stopped_at
    expect(panel.locator(".jsv-checkpoint-step")).to_have_text(f"{stopped_at:,}")

    # Resume: running again, continuing from the stopped step (no smaller step is ever shown),
    # with a rate, and the plot redrawn with the new session's summaries.
    page.evaluate(RECORD_JS)
    resume.click()
    expect(status).to_have_text("running")
    page.wait_for_function(f"() => ({STEP_JS})() > {stopped_at}")
    expect(panel.locator(".jsv-rate")).to_have_text(RUNNING_RATE)
    # The first redraw once the new session stepped may still be of what the restore changed
    # (earlier points read back, later ones dropped); plots are redrawn only when the points
    # changed, so the one after it shows the new session's summaries.
    page.wait_for_function(
        f"() => window.__jsvRedrawnAt.filter(step => step > {stopped_at}).length >= 2")
    expect(stop).to_be_enabled()
    shown = page.evaluate("() => window.__jsvShown")
    steps_shown = [step for _status, step in shown if step is not None]
    assert steps_shown and min(steps_shown) >= stopped_at, (stopped_at, shown)
    assert any(status_text == "running" for status_text, _step in shown), shown
    assert page.locator(".jsv-error .widget-html-content").inner_text() == ""

    panel.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / ("panel.png" if story == "graph" else
                                          f"panel-{story}.png")))
