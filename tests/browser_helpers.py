"""What the browser tests share: a JupyterLab or Notebook 7 server of our own (``Lab``), the
kernelspec its notebooks run, and how a test opens a page and reads a notebook in it.

The servers are our own: a free loopback port, a random token, config/runtime/data/settings/
workspace folders of their own, and a kernelspec that runs this very Python
(``sys.executable``, where jupyter_supervisor is installed). Kernels and server are stopped by
PID. tests/conftest.py holds the fixtures: one Chromium and one JupyterLab server for the
session, a folder of that server for each test.
"""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from helpers import child_env, free_ports

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
KERNEL_NAME = "jsv-browser-test"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
SENTINEL = "ALL-CELLS-DONE"
# Generous for a loaded 2-core machine (the kernel imports TensorFlow); never reached in a pass.
SERVER_STARTUP = 60.0
KERNEL_SHUTDOWN = 60.0  # its live runs write their final checkpoints first
WAIT_MS = 45_000

# JupyterLab's status bar reads "<kernel> | Idle" once the kernel is connected (cells run before
# that are dropped); a "Select Kernel" dialog means our kernelspec was not found.
KERNEL_READY_JS = """() => !!document.querySelector('.jp-Dialog') ||
    Array.from(document.querySelectorAll('.jp-StatusBar-TextItem'))
        .some(e => /^(?!No Kernel).+ \\| Idle$/.test(e.textContent.trim()))"""

# The browser's own Notification, each one shown also noted in window.jsvShown.
NOTED_NOTIFICATIONS_JS = """
window.jsvShown = [];
if (window.Notification) {
    const Shown = window.Notification;
    window.Notification = class extends Shown {
        constructor(title, options) { super(title, options); window.jsvShown.push(title); }
    };
}
"""


def api(base, token, path, method="GET", timeout=10):
    """The JSON answer of the server at ``base`` to a request of its REST API."""
    request = urllib.request.Request(f"{base}{path}", method=method,
                                     headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
    return json.loads(body) if body else None


def _write_lab_settings(settings_dir: Path, subshells: bool = True) -> None:
    # No news/update toast over the page, no autosave rewriting the notebook; without
    # ``subshells``, comm messages wait for the running cell, as in frontends older than
    # JupyterLab 4.4 (and Colab's).
    files = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
        "@jupyterlab/apputils-extension/kernels-settings.jupyterlab-settings":
            {"commsOverSubshells": "perCommTarget" if subshells else "disabled"},
    }
    if settings_dir.exists():
        shutil.rmtree(settings_dir)  # and what a test set (its theme)
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
    own, serving ``root``; ``stop()`` ends its kernels and itself by PID. ``folder(name)``
    hands a test a folder of its own in a server that several tests share."""

    def __init__(self, root: Path, home: Path, app: str = "jupyterlab"):
        self.app = app
        # Notebook 7's server here is a frontend without kernel subshells.
        self.subshells = app == "jupyterlab"
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
        _write_lab_settings(self.home / "settings", self.subshells)
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
               # window.jupyterapp: the tests run its commands (save, change the theme).
               f"--{app_class}.expose_app_in_browser=True",
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
                api(self.base, self.token, "/api/status")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter lab did not answer within {SERVER_STARTUP} s:\n"
                                       f"{self.log_tail()}") from None
                time.sleep(0.1)  # polling for the port to answer

    def notebook_url(self, path: str) -> str:
        """The address of the notebook at ``path`` (relative to the server's root) in the
        page: in JupyterLab, with the workspace reset (no tab of an earlier test)."""
        if self.app == "jupyterlab":
            return f"{self.base}/lab/tree/{path}?reset&token={self.token}"
        return f"{self.base}/notebooks/{path}?token={self.token}"

    def folder(self, name: str) -> "LabFolder":
        """A new folder ``name`` of the server's root, for one test."""
        return LabFolder(self, name)

    def end_sessions(self) -> None:
        """Shuts every kernel down (its live runs write their final checkpoints) and puts the
        user settings back as they were at the start: what a test leaves ends with it."""
        for session in api(self.base, self.token, "/api/sessions"):
            api(self.base, self.token, f"/api/sessions/{session['id']}", method="DELETE",
                timeout=KERNEL_SHUTDOWN)
        for kernel in api(self.base, self.token, "/api/kernels"):
            api(self.base, self.token, f"/api/kernels/{kernel['id']}", method="DELETE",
                timeout=KERNEL_SHUTDOWN)
        _write_lab_settings(self.home / "settings", self.subshells)

    def kernel_names(self):
        """The kernelspec name of every session the server runs."""
        return [session["kernel"]["name"]
                for session in api(self.base, self.token, "/api/sessions")]

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
            for kernel in api(self.base, self.token, "/api/kernels"):
                api(self.base, self.token, f"/api/kernels/{kernel['id']}", method="DELETE")
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


class LabFolder:
    """A folder of a ``Lab``'s root that one test has to itself: ``root`` is that folder,
    ``notebook_url`` takes a path in it; the rest is the server's."""

    def __init__(self, server: Lab, name: str):
        self.server = server
        self.name = name
        self.root = server.root / name
        self.root.mkdir()

    def notebook_url(self, path: str) -> str:
        """The address of the notebook at ``path`` in this folder."""
        return self.server.notebook_url(f"{self.name}/{path}")

    def __getattr__(self, name):
        return getattr(self.server, name)


def new_page(browser, height=1800, **options):
    """A page of ``browser`` in a context of its own (closed with ``page.context.close()``),
    1280 px wide and ``height`` tall, notifications allowed (a user's answer to the panel's
    request) and noted in window.jsvShown; every wait of the test's up to WAIT_MS.
    ``options``: more of ``new_context``'s (downloads, clipboard)."""
    options.setdefault("permissions", ["notifications"])
    context = browser.new_context(viewport={"width": 1280, "height": height}, **options)
    context.add_init_script(NOTED_NOTIFICATIONS_JS)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    expect.set_options(timeout=WAIT_MS)
    return page


def open_notebook(page, lab, path="panel.ipynb") -> None:
    """Opens ``lab``'s notebook ``path`` in JupyterLab and waits until its kernel is idle."""
    page.goto(lab.notebook_url(path))
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.wait_for_function(KERNEL_READY_JS)
    assert page.locator(".jp-Dialog").count() == 0, (
        f"JupyterLab asks for a kernel: {page.locator('.jp-Dialog').inner_text()!r}; "
        f"the kernelspec {KERNEL_NAME!r} was not found")


def panel_of(page, name):
    """The views of run ``name`` (the first: the one its cell shows)."""
    return page.locator(f".jsv-panel:has(.jsv-name:text-is('{name}'))")


def keep_evidence(page, problems, lab, shot="panel-failure.png") -> None:
    """A failure's screenshot (ARTIFACTS/``shot``) and the panels' text, printed with the
    browser's errors and the server log (best effort: the browser may be what failed)."""
    print("browser errors:", *problems[-20:], sep="\n  ")
    print("server log tail:\n", lab.log_tail())
    try:
        page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
        for view in page.locator(".jsv-panel").all():
            print("panel text:", view.inner_text(timeout=5000))
    except PlaywrightError as error:
        print(f"no failure screenshot: {error}")
