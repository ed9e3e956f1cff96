"""Each tutorial after a kernel restart, as a person follows it: one more test per notebook.

nbval executes a tutorial cell by cell (its ``Cell N`` tests). Then ``after a kernel restart``
restarts that very kernel the way the notebook's restart button does (a shutdown request, a new
process in the notebook's folder), runs again exactly the cells the tutorial says to (those
marked ``MARKER``; its "Fresh start, or after a kernel restart" section says so), and checks
that every run of a marked ``%%supervise`` cell resumed from the newest checkpoint its logdir
held, instead of starting again from step 0. Runs still live afterwards are stopped. It also
checks what makes that safe: the tutorial has a fresh-start cell of its own, and no other cell
deletes anything.

Only when every cell of the notebook was collected (a selection of cells leaves nothing to
restart from); no other output is compared.

nbval itself is turned on here (``pytest_configure``) whenever pytest collects this folder: by
the README's test command (setup.cfg's ``testpaths``) or by a path in it on the command line.
``pytest tests`` runs the .py tests only, and ``-p no:nbval`` collects no notebook.
"""
import json
import os
import re
import shlex
import time

import nbformat
import pytest

# The tutorials' kernels ask only the loopback interface for a cloud's preemption notice
# (tests/conftest.py says why).
os.environ["JUPYTER_SUPERVISOR_METADATA_URL"] = "http://127.0.0.1:1"

MARKER = "# After a kernel restart, run this cell again."
FRESH_START = "# FRESH START:"
# What no cell but the fresh start does: a set-up cell run again would delete a run.
DELETES = re.compile(r"\b(rmtree|os\.remove|os\.unlink|\.unlink\(|shutil\.move|rm -)")
# A cell that runs 10 min fails (no cell takes more than a minute): a hang never keeps CI waiting.
CELL_SECS = 600
RESTART_SECS = 120       # a kernel's start on a loaded 2-core machine, never reached in a pass
RESULT = "RESTART-CHECK "

# Run in the restarted kernel after the marked cells: waits until no run is still 'starting'
# (a background run restores first), reports each run, then stops those still live.
CHECK = r"""
import json as _json, time as _time
import jupyter_supervisor as _supervisor
_deadline = _time.monotonic() + %(secs)d
while any(_r.status == "starting" for _r in _supervisor.runs()):
    assert _time.monotonic() < _deadline, "a run did not get past 'starting'"
    _time.sleep(0.05)
_found = [[_r.name, _r.logdir, _r.restored_from, _r.status, _r.global_step]
          for _r in _supervisor.runs()]
if _found:
    from jupyter_supervisor.notebook.run import stop_all as _stop_all
    _stop_all(timeout=%(secs)d)
print(%(prefix)r + _json.dumps(_found))
"""

# What nbval compares: every stored output (strict), with the machine's paths sanitized.
SANITIZE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nbval_sanitize.cfg")
NBVAL_CELL_TIMEOUT = 2000.0   # nbval's default: no --nbval-cell-timeout was given


def pytest_configure(config):
    """Turns nbval on for the tutorials (pytest loads this file only when it collects this
    folder), as ``--nbval --nbval-current-env --nbval-sanitize-with SANITIZE
    --nbval-cell-timeout CELL_SECS`` would: strict, in a kernel of this very environment. What
    the command line gives nbval wins (--nbval-lax, --nbval-kernel-name, a sanitize file, a
    timeout)."""
    if not config.pluginmanager.hasplugin("nbval"):
        return  # -p no:nbval: no notebook is collected
    option = config.option
    option.nbval = True
    if option.nbval_kernel_name is None:
        option.nbval_current_env = True
    if option.nbval_sanitize_with is None:
        option.nbval_sanitize_with = SANITIZE
    if option.nbval_cell_timeout == NBVAL_CELL_TIMEOUT:
        option.nbval_cell_timeout = float(CELL_SECS)


def marked_cells(notebook):
    """The sources of the code cells a tutorial says to run again after a restart."""
    return [cell.source for cell in notebook.cells
            if cell.cell_type == "code" and MARKER in cell.source.splitlines()]


def logdir_of(source):
    """The ``--logdir`` of a ``%%supervise`` cell, or None."""
    words = shlex.split(source.splitlines()[0])
    if words[0] != "%%supervise" or "--logdir" not in words:
        return None
    return words[words.index("--logdir") + 1]


def newest_checkpoint(logdir):
    """The file name of the newest checkpoint ``logdir``'s state file names, or None."""
    try:
        with open(os.path.join(logdir, "checkpoint"), encoding="utf-8") as f:
            match = re.search(r'^model_checkpoint_path: "(.*)"$', f.read(), re.M)
    except FileNotFoundError:
        return None
    return os.path.basename(match.group(1)) if match else None


class RestartItem(pytest.Item):
    """The tutorial of ``parent`` (nbval's IPyNbFile, whose kernel ran its cells) after a
    kernel restart."""

    def runtest(self):
        notebook = nbformat.read(str(self.path), as_version=4)
        self._check_the_rules(notebook)
        marked = marked_cells(notebook)
        folder = os.path.dirname(str(self.path))
        logdirs = {logdir_of(source) for source in marked} - {None}
        kernel = self.parent.kernel
        kernel.km.restart_kernel(now=False)
        kernel.kc.wait_for_ready(timeout=RESTART_SECS)
        before = {logdir: newest_checkpoint(os.path.join(folder, logdir)) for logdir in logdirs}
        assert all(before.values()), f"a logdir to resume holds no checkpoint: {before}"
        for source in marked:
            self._execute(source)
        printed = self._execute(CHECK % {"secs": CELL_SECS, "prefix": RESULT})
        found = json.loads(printed.split(RESULT, 1)[1])
        for logdir, newest in before.items():
            runs = [run for run in found if run[1] == logdir]
            assert runs, f"no run of {logdir} after the restart: {found}"
            for name, _, restored_from, status, step in runs:
                assert restored_from and os.path.basename(restored_from) == newest, (
                    f"{name} restarted instead of resuming from {logdir}/{newest}: "
                    f"restored_from={restored_from}")
                assert status != "failed" and step >= int(newest.rsplit("-", 1)[1]) > 0, \
                    (name, status, step, newest)

    def _check_the_rules(self, notebook):
        code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
        text = " ".join(" ".join(cell.source.split()) for cell in notebook.cells
                        if cell.cell_type == "markdown")
        assert f"run only the cells marked `{MARKER}`" in text, \
            "the tutorial does not say which cells to run again after a kernel restart"
        fresh = [source for source in code if source.startswith(FRESH_START)]
        assert len(fresh) == 1 and MARKER not in fresh[0], "one fresh-start cell, not marked"
        for source in code:
            assert source in fresh or not DELETES.search(source), \
                f"a cell besides the fresh start deletes:\n{source}"
        assert any(logdir_of(source) for source in marked_cells(notebook)), \
            "no marked %%supervise cell with a --logdir: nothing resumes"

    def _execute(self, source):
        """Runs ``source`` in the kernel; returns what it printed; fails on an error."""
        kc = self.parent.kernel.kc
        printed, errors = [], []

        def collect(msg):
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                errors.append("\n".join(msg["content"]["traceback"]))

        started = time.monotonic()
        reply = kc.execute_interactive(source, timeout=CELL_SECS, output_hook=collect,
                                       allow_stdin=False)
        assert reply["content"]["status"] == "ok" and not errors, (
            f"after {time.monotonic() - started:.0f} s, this cell failed:\n{source}\n"
            + "\n".join(errors) + "".join(printed))
        return "".join(printed)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: after a kernel restart"


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_itemcollected(item):
    """A tutorial's cells run in a real kernel (setup.cfg's markers): ``-m "not kernel"``
    leaves them out."""
    if type(item).__name__ == "IPyNbCell":
        item.add_marker(pytest.mark.kernel)


@pytest.hookimpl(trylast=True)  # after -k / -m deselected what they deselect
def pytest_collection_modifyitems(items):
    """Adds ``after a kernel restart`` after the last cell of each notebook whose cells were
    all collected."""
    by_notebook = {}
    for item in items:
        if type(item).__name__ == "IPyNbCell":
            by_notebook.setdefault(item.parent, []).append(item)
    for notebook_file, cells in by_notebook.items():
        notebook = nbformat.read(str(notebook_file.path), as_version=4)
        if len(cells) != sum(cell.cell_type == "code" for cell in notebook.cells):
            continue
        restart = RestartItem.from_parent(notebook_file, name="after a kernel restart")
        restart.add_marker(pytest.mark.kernel)
        items.insert(items.index(cells[-1]) + 1, restart)
