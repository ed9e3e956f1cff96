"""Fixtures shared by the whole test suite (plain helpers are in helpers.py)."""
import os

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
