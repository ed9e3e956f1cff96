"""The README's set-up, as a newcomer pastes it: its commands leave a clean clone clean, CI runs
its test command, its first cell is quiet; and the committed tutorials hold nothing of the
machine that stored their outputs. The commands are read from README.md, so they cannot drift.
"""
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import pytest

from helpers import PACKAGE_ROOT, child_env

README = os.path.join(PACKAGE_ROOT, "README.md")
DEADLINE = 600  # seconds: the quickstart notebook on a loaded 2-core machine


def setup_commands(readme=README):
    """The README's Set-up section: its bash blocks, (quickstart, test command)."""
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Set-up\n", 1)[1].split("\n## ", 1)[0]
    quickstart, tests = re.findall(r"```bash\n(.+?)\n```", section, re.S)
    return quickstart, tests


def first_cell(readme=README):
    """The README's first notebook cell."""
    with open(readme, encoding="utf-8") as f:
        return re.search(r"```python\n(.+?)\n```", f.read(), re.S).group(1)


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def test_ci_runs_the_readme_test_command_and_nothing_else():
    with open(os.path.join(PACKAGE_ROOT, ".ci", "run"), encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines()
                 if line and not line.startswith("#")]
    assert lines[:2] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."']
    assert lines[2:] == [setup_commands()[1]]


@pytest.mark.kernel
def test_the_quickstart_command_leaves_a_clean_clone_clean(tmp_path):
    """The quickstart on a fresh clone of this commit: its notebook executes into a copy under
    runs/, and `git status` is empty. This environment stands in for the one the command
    creates (installing TensorFlow again would take minutes): `.venv/bin/` is this one's."""
    clone = tmp_path / "clone"
    git("clone", "-q", PACKAGE_ROOT, str(clone), cwd=tmp_path)
    quickstart, _ = setup_commands(str(clone / "README.md"))
    steps = quickstart.split(" && ")
    assert steps[0] == "python3 -m venv .venv"
    assert steps[1].startswith(".venv/bin/pip install ")
    bin_dir = os.path.dirname(sys.executable) + os.sep
    for step in steps[2:]:
        argv = [bin_dir + word[len(".venv/bin/"):] if word.startswith(".venv/bin/") else word
                for word in shlex.split(step)]
        done = subprocess.run(argv, cwd=clone, env=child_env(), capture_output=True,
                              text=True, timeout=DEADLINE)
        assert done.returncode == 0, f"{step}\n{done.stdout}\n{done.stderr}"
    assert git("status", "--porcelain", "--untracked-files=all", cwd=clone) == ""
    # It trained where the copy trains when a person opens it: its logdir is relative to the
    # copy's folder.
    assert (clone / "runs" / "runs" / "keras" / "checkpoint").exists()
    assert not (clone / "notebooks" / "runs").exists()
    copy = clone / "runs" / "00_quickstart_keras.ipynb"
    with open(copy, encoding="utf-8") as f:
        executed = json.load(f)
    assert all(c.get("execution_count") for c in executed["cells"] if c["cell_type"] == "code")


@pytest.mark.kernel
def test_the_readme_first_cell_prints_nothing_on_stderr(tmp_path):
    from jupyter_client.manager import KernelManager  # pylint: disable=import-outside-toplevel
    cell = "\n".join(line for line in first_cell().splitlines() if "[...]" not in line)
    assert "import keras" in cell
    env = child_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL")  # as a newcomer's kernel has it: unset
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp_path), env=env)
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        streams = []
        reply = kc.execute_interactive(
            cell + "\nimport tensorflow as tf\nprint(int(tf.constant(1) + 1))", timeout=120,
            output_hook=lambda msg: streams.append(msg["content"])
            if msg["msg_type"] in ("stream", "error") else None)
        assert reply["content"]["status"] == "ok", streams
        assert streams == [{"name": "stdout", "text": "2\n"}]
    finally:
        km.shutdown_kernel(now=True)


# Where a committed notebook would show the machine that stored it.
MACHINE_PATHS = sorted({PACKAGE_ROOT, sys.prefix, sys.base_prefix, tempfile.gettempdir(),
                        os.path.expanduser("~")}, key=len, reverse=True)
ANY_SITE_PACKAGES = re.compile(r"(?<![\w.~<>-])/(?:[^/\s\"'&;]+/)+site-packages/")


@pytest.mark.parametrize("notebook", sorted(
    os.path.basename(p) for p in glob.glob(os.path.join(PACKAGE_ROOT, "notebooks", "*.ipynb"))))
def test_a_committed_notebook_holds_nothing_of_the_machine_that_ran_it(notebook):
    with open(os.path.join(PACKAGE_ROOT, "notebooks", notebook), encoding="utf-8") as f:
        stored = json.load(f)
    parts = {f"cell {i}": cell.get("outputs", []) for i, cell in enumerate(stored["cells"])}
    parts["widget state"] = stored["metadata"].get("widgets", {})
    for where, value in parts.items():
        text = json.dumps(value, ensure_ascii=False)
        found = [path for path in MACHINE_PATHS if path + "/" in text]
        found += sorted(set(ANY_SITE_PACKAGES.findall(text)))
        assert not found, (
            f"{notebook}, {where}, stores paths of the machine that ran it: {found}. Store "
            f"its outputs with `.venv/bin/python notebooks/store_outputs.py notebooks/"
            f"{notebook}`.")
