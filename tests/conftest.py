"""Fixtures shared by the whole test suite (plain helpers are in helpers.py, the browser
tests' in browser_helpers.py)."""
import os
import signal

# TensorFlow reads this when it is first imported; conftest.py is imported before any test module.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Runs watch a cloud's preemption notice by default (--preemption-notice auto): the tests, and
# the kernels and scripts they start, ask only the loopback interface, where port 1 answers
# nothing (a test that emulates a provider starts a server of its own and sets this itself).
os.environ["JUPYTER_SUPERVISOR_METADATA_URL"] = "http://127.0.0.1:1"

import pytest  # noqa: E402

import helpers  # noqa: E402


@pytest.fixture
def wait_for():
    """``wait_for(predicate, timeout=10.0, interval=0.02, what=None)``: poll a condition."""
    return helpers.wait_for


@pytest.fixture(scope="module")
def ip():
    """IPython's InteractiveShell with the extension loaded; unloaded after the module."""
    from IPython.core.interactiveshell import InteractiveShell  # pylint: disable=C0415
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_supervisor")
    yield shell
    shell.run_line_magic("unload_ext", "jupyter_supervisor")


@pytest.fixture
def backends():
    """``backends(logdir, **RunConfig options)``: EagerSupervisors (summaries off unless
    given), all closed at the end of the test."""
    from jupyter_supervisor.config import RunConfig  # pylint: disable=C0415
    from jupyter_supervisor.eager import EagerSupervisor  # pylint: disable=C0415
    made = []

    def build(logdir, **options):
        options.setdefault("save_summaries_secs", 0)
        sv = EagerSupervisor(RunConfig(logdir=os.fspath(logdir), **options))
        made.append(sv)
        return sv

    yield build
    for sv in made:
        sv.close()


# ------------------------------------------------------------------------------------- kernels

@pytest.fixture(scope="module")
def module_kernel(tmp_path_factory):
    """A kernel (helpers.Kernel) that the tests of a module share, started in a folder of its
    own, where each test trains in logdirs of its own. A test that kills or restarts it leaves a
    new one started; one that needs eager mode calls ``kernel.eager()`` (an earlier test may
    have switched it to graph mode, which restarts it)."""
    shared = helpers.Kernel(tmp_path_factory.mktemp("kernel"))
    yield shared
    shared.shutdown()


@pytest.fixture
def kernel(module_kernel):
    """The module's kernel for one test: every run it left live is stopped after it (each
    writes its final checkpoint), so that the next test starts with none."""
    yield module_kernel
    module_kernel.stop_runs()


# ------------------------------------------------------------------------------------ browsers

@pytest.fixture(scope="session")
def chromium():
    """The session's headless Chromium (Playwright's Browser), started by the first test that
    asks for it; each test opens its pages in a context of its own."""
    from playwright.sync_api import sync_playwright  # pylint: disable=C0415
    from browser_helpers import CHROMIUM, CHROMIUM_ARGS  # pylint: disable=C0415
    assert os.path.exists(CHROMIUM), (
        f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); "
        "never `playwright install`.")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def jupyterlab(tmp_path_factory):
    """The session's JupyterLab server (browser_helpers.Lab), started by the first test that
    asks for it; stopped, kernels too, at the end of the session."""
    from browser_helpers import Lab  # pylint: disable=C0415
    home = tmp_path_factory.mktemp("jupyterlab")
    (home / "root").mkdir()
    server = Lab(home / "root", home / "jhome")
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["jupyterlab"])
def lab(request, tmp_path):
    """A folder of the session's JupyterLab server for this test (its ``root``), the kernels
    shut down and the user settings put back after it; parametrized "notebook", a Notebook 7
    server of its own rooted at tmp_path/lab, stopped at the end. Also when the test process
    gets SIGTERM (e.g. from `timeout`): the test unwinds through this teardown."""
    from browser_helpers import ARTIFACTS, Lab  # pylint: disable=C0415
    ARTIFACTS.mkdir(exist_ok=True)

    def on_sigterm(_signum, _frame):
        raise SystemExit(143)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        if request.param == "jupyterlab":
            shared = request.getfixturevalue("jupyterlab")
            try:
                yield shared.folder(tmp_path.name)
            finally:
                shared.end_sessions()
        else:
            (tmp_path / "lab").mkdir()
            server = Lab(tmp_path / "lab", tmp_path / "jhome", app=request.param)
            try:
                server.start()
                yield server
            finally:
                server.stop()
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def comm_log(monkeypatch):
    """Every message the widgets send to the frontend (``panel_helpers.record_comms``)."""
    from panel_helpers import record_comms  # pylint: disable=import-outside-toplevel
    return record_comms(monkeypatch)
