"""The declared floors, checked: the tests of everything that rests on TensorFlow's and Keras'
internals (marked ``internals``) and a tutorial, run again on the oldest TensorFlow and Keras the
package declares (``capabilities.FLOORS``, pyproject.toml, docs/versions.md).

The floor's virtual environment is built once and kept (``~/.cache/jupyter_supervisor/``, or
``$JSV_FLOOR_VENV``), keyed by what it installs, so a second run costs only its tests. Its
packages are pyproject's requirements and test extra (without the browser's), with TensorFlow
and Keras pinned to the floors; the package itself comes from this checkout (``PYTHONPATH``).
``JSV_FLOOR_PINS`` replaces the pins: ``"--pre tensorflow-cpu keras"`` runs the same tests on
the newest pre-releases (docs/versions.md, for maintainers).
"""
import hashlib
import os
import pathlib
import shlex
import subprocess
import sys
import tomllib

import pytest

from jupyter_supervisor.capabilities import FLOORS

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD_SECS = 1200   # downloads TensorFlow: minutes on a slow link
TEST_SECS = 1500    # the tests themselves on a loaded 2-core machine, never reached in a pass
NOT_NEEDED = ("jupyterlab", "notebook", "playwright")   # the browser tests do not run there
TUTORIAL = "notebooks/11_exact_resume.ipynb"   # 12_keep_best prints what export saves before Keras 3.9


def _pins() -> list:
    given = os.environ.get("JSV_FLOOR_PINS")
    if given:
        return shlex.split(given)
    return [f"tensorflow-cpu=={FLOORS['tensorflow']}.*", f"keras=={FLOORS['keras']}.*"]


def _requirements() -> list:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    test = [r for r in project["optional-dependencies"]["test"]
            if not r.startswith(NOT_NEEDED)]
    return [*project["dependencies"], *test]


def _venv() -> pathlib.Path:
    """The floor's environment, built here the first time (and whenever what it installs
    changes); complete only once its marker file is written."""
    wanted = "\n".join([*_pins(), *_requirements()])
    key = hashlib.sha256(wanted.encode()).hexdigest()[:12]
    venv = pathlib.Path(os.environ.get("JSV_FLOOR_VENV") or
                        pathlib.Path.home() / ".cache" / "jupyter_supervisor" / f"floor-{key}")
    marker = venv / "jsv-requirements.txt"
    if marker.exists() and marker.read_text() == wanted:
        return venv
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                   timeout=BUILD_SECS)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                           *_pins(), *_requirements()],
                          capture_output=True, text=True, timeout=BUILD_SECS)
    assert done.returncode == 0, f"the floor's environment did not install:\n{done.stderr[-4000:]}"
    marker.write_text(wanted)
    return venv


@pytest.fixture(scope="module")
def floor():
    """(python of the floor's environment, its environment variables)."""
    venv = _venv()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PYTHONPATH=str(ROOT), VIRTUAL_ENV=str(venv),
               PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return str(venv / "bin" / "python"), env


def _pytest(floor, *args) -> str:
    python, env = floor
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=TEST_SECS)
    assert done.returncode == 0, f"on the floor ({' '.join(_pins())}):\n{done.stdout[-6000:]}" \
                                 f"\n{done.stderr[-2000:]}"
    return done.stdout


def test_the_floor_is_what_runs_there(floor):
    python, env = floor
    done = subprocess.run(
        [python, "-c", "import jupyter_supervisor as j, keras, tensorflow as tf; "
                       "print(tf.__version__, keras.__version__, j.__file__)"],
        cwd="/", env=env, capture_output=True, text=True, timeout=TEST_SECS, check=True)
    tf_version, keras_version, package = done.stdout.split()
    if not os.environ.get("JSV_FLOOR_PINS"):
        assert tf_version.startswith(FLOORS["tensorflow"] + ".")
        assert keras_version.startswith(FLOORS["keras"] + ".")
    assert package == str(ROOT / "jupyter_supervisor" / "__init__.py")


def test_what_rests_on_internals_holds_on_the_floor(floor):
    # The browser tests' modules import Playwright, which the floor's environment leaves out.
    out = _pytest(floor, "-m", "internals", "--ignore-glob=*/test_browser*.py", "tests")
    assert " passed" in out.splitlines()[-1] and "failed" not in out.splitlines()[-1]


def test_a_tutorial_runs_on_the_floor(floor):
    _pytest(floor, "--nbval", "--nbval-current-env", "--nbval-sanitize-with",
            "notebooks/nbval_sanitize.cfg", "--nbval-cell-timeout", "600", TUTORIAL)
