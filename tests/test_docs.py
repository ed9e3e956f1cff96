"""The README and docs/ against the code: the options page lists what `%%supervise?` shows, no
page names an option or a line command that does not exist, and every relative link resolves."""
import json
import pathlib
import re

import pytest

from jupyter_supervisor.notebook.magics import COMMANDS, SuperviseMagics

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _help_options():
    """The options `%%supervise?` prints (the magic's docstring, as IPython shows it)."""
    return set(OPTION.findall(SuperviseMagics.supervise_cell.__doc__))


def _magic_snippets(text):
    """The code in ``text`` that is about the magic: inline spans that start with an option or
    use the magic, and lines of code blocks that start with it."""
    for block in FENCE.findall(text):
        for line in block.splitlines():
            if line.lstrip().startswith(("%%supervise", "%supervise")):
                yield line
    for span in INLINE_CODE.findall(FENCE.sub("", text)):
        if span.startswith("--") or "%supervise" in span:
            yield span


def test_help_lists_the_options_the_parser_takes():
    assert {"--logdir", "--max-steps", "--wait", "--on-nan"} <= _help_options()


def test_the_options_page_lists_every_option_of_the_help():
    page = (ROOT / "docs" / "magic.md").read_text()
    listed = set()
    for line in page.splitlines():
        if line.startswith("| `--"):
            listed |= set(OPTION.findall(line.split("|")[1]))
    assert listed == _help_options()


def test_the_options_page_lists_every_line_command():
    page = (ROOT / "docs" / "magic.md").read_text()
    for command in COMMANDS:
        if command != "list":
            assert re.search(rf"`%supervise {command}[ `]", page), command


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_an_option_or_command_that_does_not_exist(page):
    text = page.read_text()
    # docs/errors.md shows a misspelled option and command on purpose, next to their errors.
    refused = set(re.findall(r"unrecognized arguments: (--[a-z][a-z0-9-]*)", text))
    refused_commands = set(re.findall(r"invalid choice: '([a-z]+)'", text))
    options = _help_options()
    for snippet in _magic_snippets(text):
        unknown = set(OPTION.findall(snippet)) - options - refused
        assert not unknown, f"{snippet!r} names {sorted(unknown)}, which %%supervise? lacks"
        command = re.match(r"\s*%supervise\s+([a-z]+)", snippet)
        if command:
            assert command.group(1) in COMMANDS or command.group(1) in refused_commands, snippet


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.name} links {target}, which does not exist"


def test_the_readme_screenshot_is_a_png():
    image = ROOT / "docs" / "panel.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------- pages whose code runs

# A block that starts with this line runs as another program: a fresh Python where importing
# jupyter_supervisor fails. Every other block is a notebook cell, run in order in one shell.
ELSEWHERE = "# Another program, without jupyter_supervisor:"
SHELL = r"""
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for cell in json.load(open(sys.argv[1])):
    if not shell.run_cell(cell).success:
        sys.exit(f"this cell failed:\n{cell}")
"""
WITHOUT_US = r"""
import importlib.abc, sys
class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "jupyter_supervisor":
            raise ImportError("jupyter_supervisor is not installed here")
sys.meta_path.insert(0, _Absent())
"""
DOC_DEADLINE = 600  # seconds: TensorFlow's start, training and export on a loaded 2-core machine


def _python_blocks(page):
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


def run_page(page, workdir, after=()):
    """Runs ``page``'s python blocks as a person pastes them, in ``workdir``: the cells in one
    IPython shell (then the test's own cells ``after``), then each ``ELSEWHERE`` block in a
    Python of its own. Returns what the programs printed."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    from helpers import child_env  # pylint: disable=import-outside-toplevel
    blocks = _python_blocks(page)
    cells = [b for b in blocks if not b.startswith(ELSEWHERE)] + list(after)
    (workdir / "cells.json").write_text(json.dumps(cells))
    runs = [[sys.executable, "-c", SHELL, "cells.json"]]
    for i, block in enumerate(b for b in blocks if b.startswith(ELSEWHERE)):
        (workdir / f"elsewhere{i}.py").write_text(WITHOUT_US + block)
        runs.append([sys.executable, f"elsewhere{i}.py"])
    printed = []
    for argv in runs:
        done = subprocess.run(argv, cwd=workdir, env=child_env(), capture_output=True,
                              text=True, timeout=DOC_DEADLINE)
        assert done.returncode == 0, f"{argv[-1]}:\n{done.stdout}\n{done.stderr}"
        printed.append(done.stdout)
    return printed


# Run after the page's cells, in the same shell: what its "keep the best" section claims.
BEST_CHECKS = """
import json as _json, os as _os
_val = jupyter_supervisor.get_run("best").history.snapshot().scalars["epoch_val_loss"]
_fresh = keras.Sequential([keras.Input((1,)), keras.layers.Dense(128, activation="relu"),
                           keras.layers.Dense(128, activation="relu"), keras.layers.Dense(1)])
tf.train.Checkpoint(model=_fresh).read(best_path).expect_partial()
_saved = keras.models.load_model("best.keras")
print("CHECKS " + _json.dumps({
    "best": [best.path, best.step, best.epoch, best.value],
    "lowest": float(min(_val.values)), "last": float(_val.values[-1]),
    "listed": list(tf.train.get_checkpoint_state("runs/best").all_model_checkpoint_paths),
    "same": [bool(np.array_equal(_fresh(x_val), p)) for p in (wide(x_val), _saved(x_val))],
    "evaluated": float(np.mean((wide(x_val).numpy() - y_val) ** 2)),
    "exported": _os.path.isdir("best_export"), "best_path": best_path}))
"""


@pytest.mark.slow
def test_the_after_training_page_runs_as_written(tmp_path):
    """The page as written; of its "keep the best" section: the best is the epoch of the
    lowest val_loss (worse at the end), restore_best() puts it into the model that is saved
    and exported, and TensorFlow alone finds the same path."""
    page = ROOT / "docs" / "after-training.md"
    assert any(b.startswith(ELSEWHERE) for b in _python_blocks(page))
    in_the_notebook, elsewhere = run_page(page, tmp_path, after=[BEST_CHECKS])
    assert "True True" in in_the_notebook.splitlines()
    assert elsewhere.splitlines()[-1] == "runs/export/model.ckpt-200 200"
    assert (tmp_path / "from_checkpoint.keras").exists()

    checks = json.loads(in_the_notebook.split("CHECKS ", 1)[1].splitlines()[0])
    path, step, epoch, value = checks["best"]
    assert value == checks["lowest"] < checks["last"]       # best in the middle of the run
    assert (path, step) == (f"runs/best/model.ckpt-{step}", (epoch + 1) * 4)
    assert checks["listed"] == [path, "runs/best/model.ckpt-240"]
    assert checks["same"] == [True, True] and checks["exported"]
    assert checks["evaluated"] == pytest.approx(value, rel=1e-5)
    assert checks["best_path"] == path


@pytest.mark.slow
def test_the_gpu_pages_code_runs_as_written(tmp_path):
    """On this machine's CPU: ``MirroredStrategy`` with one replica."""
    (in_the_notebook,) = run_page(ROOT / "docs" / "gpu.md", tmp_path)
    assert in_the_notebook.splitlines()[-1] == (
        "1 replica(s); finished at step 80 | restored from runs/mirrored/model.ckpt-40")
