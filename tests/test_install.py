"""`pip install .` as a user installs the package (not editable, into an environment of their
own, as on Colab or in VS Code): the wheel holds every module and every file of the panel's front
end, and the installed package runs a supervised `fit` and serves the panel's front end from its
own files.

The wheel is built from a copy of the sources (pip's wheel of pyproject's setuptools build; the
build requirements come from the configured package index). It is installed with `--no-deps`
into a new virtual environment that reuses this one's packages through a path file (installing
TensorFlow again would take minutes): that path is plain, so this environment's editable install
of the checkout is not on it, and `jupyter_supervisor` can only come from the wheel.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest

from helpers import PACKAGE_ROOT

pytestmark = pytest.mark.slow

DEADLINE = 600  # seconds: a build, then TensorFlow's start and a fit, on a loaded 2-core machine

# Run by the new environment's Python: the README's quickstart in miniature, in a shell.
QUICKSTART = textwrap.dedent('''
    import json, sys
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    for cell in [
        "%load_ext jupyter_supervisor",
        "import keras, numpy as np\\n"
        "x = np.random.default_rng(0).normal(size=(64, 4)).astype('float32')\\n"
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\\n"
        "model.compile('adam', 'mse')",
        "%%supervise --logdir runs/fit --max-steps 12 --wait\\n"
        "model.fit(x, x[:, :1], batch_size=8, epochs=5, verbose=0, callbacks=[sv.callback])",
    ]:
        if not shell.run_cell(cell).success:
            sys.exit(f"this cell failed:\\n{cell}")
    import jupyter_supervisor
    from jupyter_supervisor.view import widget
    view = widget.view_class()()
    print(json.dumps({"package": jupyter_supervisor.__file__,
                      "status": jupyter_supervisor.get_run("fit").status,
                      "front_end": [view._esm, view._css]}))
''')


def _pip(*args, cwd):
    done = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=DEADLINE)
    assert done.returncode == 0, f"pip {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


def test_the_wheel_ships_the_front_end_and_the_installed_package_serves_it(tmp_path):
    source = tmp_path / "source"
    package = os.path.join(PACKAGE_ROOT, "jupyter_supervisor")
    shutil.copytree(package, source / "jupyter_supervisor",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(PACKAGE_ROOT, name), source / name)
    _pip("wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source), cwd=tmp_path)
    (wheel,) = glob.glob(str(tmp_path / "dist" / "*.whl"))

    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    expected = {os.path.relpath(path, PACKAGE_ROOT).replace(os.sep, "/")
                for path in glob.glob(os.path.join(package, "**", "*.py"), recursive=True)
                + glob.glob(os.path.join(package, "view", "*.js"))
                + glob.glob(os.path.join(package, "view", "*.css"))}
    assert any(name.endswith(".js") for name in expected)
    assert any(name.endswith(".css") for name in expected)
    assert expected - shipped == set(), "the wheel lacks these files of the package"

    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True,
                   timeout=DEADLINE)
    python = str(env / "bin" / "python")
    _pip("--python", python, "install", "--no-deps", "-q", wheel, cwd=tmp_path)
    site_packages = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site_packages, "this_environments_packages.pth"), "w",
              encoding="utf-8") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")

    env_vars = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env_vars.pop("PYTHONPATH", None)
    done = subprocess.run([python, "-c", QUICKSTART], cwd=tmp_path, env=env_vars,
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["package"].startswith(site_packages + os.sep), report["package"]
    assert report["status"] == "finished"
    from jupyter_supervisor.view import widget  # pylint: disable=import-outside-toplevel
    view = widget.view_class()()
    assert report["front_end"] == [view._esm, view._css] and "" not in report["front_end"]
