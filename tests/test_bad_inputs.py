"""The table of bad inputs in docs/errors.md, row by row, through a real InteractiveShell.

The table is the single source of the expected errors: this module parses docs/errors.md and runs
one scenario per row (``SCENARIOS``, keyed by the row's case name), asserting what the user is
shown against the row's "What you get" column: the error's type and its message (``…`` stands for
what varies), that the cell failed, and that no frame of jupyter_supervisor's own code is shown.
Rows whose outcome is a note or a warning assert that the run went on. Every logdir that held
checkpoints before the bad input is compared byte for byte afterwards: nothing saved is lost.
The last test runs one row of each kind of error in a real kernel, as a notebook shows them.
"""
import dataclasses
import hashlib
import logging
import os
import pathlib
import re
import select
import subprocess
import sys
from typing import Callable, Dict, List, Optional

import pytest
import tensorflow as tf
from IPython.core.error import UsageError
from tensorflow.python.eager import context

import jupyter_supervisor
from jupyter_supervisor.notebook import magics
from jupyter_supervisor.notebook import run as run_module
from jupyter_supervisor.notebook.magics import RunFailedError

from helpers import (LOOP, Kernel, build_model, child_env, corrupt_checkpoint, made_read_only,
                     newest_step, unlist_newest_and_damage_the_rest)

v1 = tf.compat.v1
DEADLINE = 60.0       # seconds; generous for a loaded 2-core machine, never reached when passing
DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "errors.md"
LOGGER = "jupyter_supervisor"
# A frame of our own code in a shown traceback ("File .../jupyter_supervisor/run.py:527").
OUR_FRAME = re.compile(r"jupyter_supervisor[\\/](?:\w+[\\/])?\w+\.py")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ----------------------------------------------------------------------------------- the table

@dataclasses.dataclass(frozen=True)
class Row:
    """One row of docs/errors.md."""
    case: str
    did: str
    kind: str       # the error's type name, or "note" / "warning" when the run goes on
    message: str    # as documented; "…" stands for any text
    todo: str

    def regex(self) -> str:
        # A table cell holds one line: a space there matches a line break of the message.
        return ".*?".join(re.escape(part).replace("\\ ", "\\s+")
                          for part in self.message.split("…"))


def read_table(path: pathlib.Path = DOC) -> List[Row]:
    """The rows of every table in ``path`` whose first cell is a `case-name`."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"\|\s*`([a-z0-9-]+)`\s*\|(.*)\|\s*", line)
        if not match:
            continue
        cells = [cell.strip() for cell in match.group(2).split("|")]
        assert len(cells) == 3, f"row {match.group(1)!r} needs 4 cells: {line}"
        shown = re.search(r"``\s(.*?)\s``", cells[1])
        assert shown, f"row {match.group(1)!r}: no ``Type: message`` in {cells[1]!r}"
        kind, _, message = shown.group(1).partition(": ")
        rows.append(Row(match.group(1), cells[0], kind, message, cells[2]))
    return rows


ROWS = read_table()


# ------------------------------------------------------------------------------ the harness

@dataclasses.dataclass
class Shown:
    """What one cell did, as the user sees it."""
    error: Optional[BaseException]   # the cell's error (None: it ran)
    out: str                         # printed to stdout (IPython prints tracebacks there)
    err: str                         # printed to stderr (IPython prints UsageErrors there)
    started: list                    # the runs the cell started that are still live

    @property
    def display(self) -> str:
        """The error as IPython displays it (after what the cell printed before it)."""
        return ANSI.sub("", self.err if type(self.error).__name__ == "UsageError" else self.out)


# Not saved work: the lock, and the graph each session writes again (with its own new ops).
UNSAVED = ("supervisor.lock", "graph.pbtxt")


def snapshot(logdir, only: Callable[[str], bool] = lambda name: True) -> Dict[str, str]:
    """{file name: sha256} of what ``logdir`` saved: checkpoints, the checkpoint state file and
    event files."""
    return {name: hashlib.sha256((pathlib.Path(logdir) / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(logdir)) if name not in UNSAVED and only(name)}


class Ctx:
    """What a scenario works with: the shell, a directory of its own, and the logdirs whose
    saved files must come out of the bad input unchanged."""

    def __init__(self, ip, tmp_path, capsys, wait_for):
        self.ip = ip
        self.tmp = tmp_path
        self.wait_for = wait_for
        self._capsys = capsys
        self.kept: Dict[str, Dict[str, str]] = {}

    def run(self, source: str) -> Shown:
        """Runs ``source`` as a cell."""
        self._capsys.readouterr()
        before = {id(r) for r in jupyter_supervisor.runs() if r.is_live}
        result = self.ip.run_cell(source)
        out, err = self._capsys.readouterr()
        started = [r for r in jupyter_supervisor.runs() if r.is_live and id(r) not in before]
        return Shown(result.error_before_exec or result.error_in_exec, out, err, started)

    def cell(self, line: str, body: str = LOOP) -> Shown:
        """Runs a ``%%supervise`` cell."""
        return self.run(f"%%supervise {line}\n{body}")

    def magic(self, line: str) -> Shown:
        """Runs a ``%supervise`` line."""
        return self.run(f"%supervise {line}")

    def ok(self, line: str, body: str = LOOP) -> Shown:
        shown = self.cell(line, body)
        assert shown.error is None, shown.out + shown.err
        return shown

    def trained(self, name: str, steps=(10, 20)) -> str:
        """A logdir holding one checkpoint per entry of ``steps`` (the model of the current
        default graph), kept: it must be unchanged at the end."""
        logdir = str(self.tmp / name)
        for step in steps:
            self.ok(f"--logdir {logdir} --max-steps {step} --save-model-secs 0 "
                    "--save-summaries-secs 0 --wait")
        assert newest_step(logdir) == steps[-1]
        self.keep(logdir)
        return logdir

    def keep(self, logdir: str, only: Callable[[str], bool] = lambda name: True) -> None:
        """Records ``logdir``'s files now: they must be unchanged at the end."""
        self.kept[logdir] = snapshot(logdir, only)

    def release(self, logdir: str) -> None:
        """The scenario's run goes on training in ``logdir``: its files may change."""
        self.kept.pop(logdir, None)

    def running(self, name: str):
        run = jupyter_supervisor.get_run(name)
        self.wait_for(lambda: run.status == "running" and (run.global_step or 0) > 0,
                      timeout=DEADLINE, what=f"run {name!r} to train")
        return run


SCENARIOS: Dict[str, Callable[[Ctx], Shown]] = {}


def scenario(case: str):
    def register(fn):
        assert case not in SCENARIOS, case
        SCENARIOS[case] = fn
        return fn
    return register


# ---------------------------------------------------------------------------------- options

@scenario("unknown-option")
def _(ctx):
    return ctx.cell("--logdri runs/x")


@scenario("missing-value")
def _(ctx):
    return ctx.cell("--logdir")


@scenario("unclosed-quote")
def _(ctx):
    return ctx.cell('--logdir "runs/my run')


@scenario("not-a-number")
def _(ctx):
    return ctx.cell("--keep five")


@scenario("negative-interval")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --save-model-secs -1")


@scenario("negative-summaries-interval")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --save-summaries-secs -0.5")


@scenario("infinite-interval")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --save-model-secs inf")


@scenario("nan-interval")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --stop-grace-secs nan")


@scenario("max-steps-zero")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --max-steps 0")


@scenario("max-steps-negative")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --max-steps -100")


@scenario("keep-zero")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --keep 0")


@scenario("basename-with-directory")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --checkpoint-basename ckpt/model")


@scenario("init-fn-undefined")
def _(ctx):
    ctx.ip.user_ns.pop("warm_start", None)
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --init-fn warm_start")


@scenario("init-fn-not-a-function")
def _(ctx):
    ctx.ip.user_ns["learning_rate"] = 0.1
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --init-fn learning_rate")


@scenario("empty-body")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'}", body="\n   \n")


@scenario("worker-without-cluster")
def _(ctx):
    return ctx.cell("--task-index 1 --name worker1")


@scenario("on-nan-unknown")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --on-nan skip")


@scenario("max-rollbacks-zero")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --on-nan rollback --max-rollbacks 0")


@scenario("keep-best-direction-unknown")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --keep-best agreement")


@scenario("keep-best-mode-alone")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --keep-best-mode max")


@scenario("keep-best-without-logdir")
def _(ctx):
    return ctx.cell("--keep-best val_loss")


@scenario("keep-best-mode-unknown")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'x'} --keep-best val_loss --keep-best-mode lowest")


@scenario("unknown-command")
def _(ctx):
    return ctx.magic("frobnicate")


@scenario("stop-unknown-run")
def _(ctx):
    return ctx.magic("stop nonesuch")


@scenario("list-with-name")
def _(ctx):
    return ctx.magic("list mnist")


@scenario("stop-two-runs")
def _(ctx):
    return ctx.magic("stop a b")


# ---------------------------------------------------------------------------------- the model

@scenario("eager-on-a-graph-logdir")
def _(ctx):
    logdir = ctx.trained("eager")
    with context.eager_mode():
        ctx.run("import keras\nmodel = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])")
        return ctx.cell(f"--logdir {logdir} --wait",
                        "sv.track(model=model)\nwhile not sv.should_stop():\n    sv.step()\n")


@scenario("keep-best-in-graph-code")
def _(ctx):
    return ctx.cell(f"--logdir {ctx.tmp / 'graph'} --keep-best val_loss")


# An eager fit (the cell's arguments after `model.fit(x, y, `) and a custom loop's track.
KERAS_MODEL = """
import keras, numpy as np
x, y = np.ones((16, 4), "float32"), np.ones((16, 1), "float32")
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2), keras.layers.Dense(1)])
model.compile({optimizer}, "mse")
"""


def _fit(ctx, logdir, optimizer="'adam'", fit="epochs=1", before="", callbacks=""):
    ctx.run(before + KERAS_MODEL.format(optimizer=optimizer))
    return ctx.cell(f"--logdir {logdir} --wait",
                    f"model.fit(x, y, batch_size=8, verbose=0, "
                    f"callbacks=[sv.callback{callbacks}], {fit})")


def _kept_checkpoints(ctx, logdir):
    ctx.keep(str(logdir), only=lambda name: not name.startswith("events."))


def _refit(ctx, name, first, then):
    """A fit (``first``: ``_fit``'s keywords) that checkpoints into a fresh logdir, whose
    checkpoints must survive the fit ``then`` on it: returns what that one showed."""
    logdir = ctx.tmp / name
    with context.eager_mode():
        assert _fit(ctx, logdir, **first).error is None
        _kept_checkpoints(ctx, logdir)
        return _fit(ctx, logdir, **then)


@scenario("initial-epoch-after-checkpoint")
def _(ctx):
    return _refit(ctx, "initial", {"fit": "epochs=2"}, {"fit": "epochs=5, initial_epoch=3"})


@scenario("optimizer-changed")
def _(ctx):
    return _refit(ctx, "optimizer", {}, {"optimizer": "'sgd'"})


@scenario("learning-rate-kind-changed")
def _(ctx):
    return _refit(ctx, "schedule", {}, {"optimizer": "keras.optimizers.Adam(keras.optimizers."
                                                     "schedules.ExponentialDecay(0.01, 8, 0.5))"})


@scenario("backup-and-restore-beside")
def _(ctx):
    with context.eager_mode():
        return _fit(ctx, ctx.tmp / "backup", callbacks=", keras.callbacks.BackupAndRestore("
                    f"{str(ctx.tmp / 'backup-dir')!r})")


@scenario("callback-state-not-json")
def _(ctx):
    with context.eager_mode():
        return _fit(ctx, ctx.tmp / "state", callbacks=", Mine()", before=(
            "import keras\n"
            "class Mine(keras.callbacks.Callback):\n"
            "    def get_state(self):\n"
            "        return {'at': (1, 2)}\n"
            "    def set_state(self, state):\n"
            "        pass\n"))


@scenario("precision-changed")
def _(ctx):
    logdir = ctx.tmp / "precision"
    with context.eager_mode():
        try:
            shown = _fit(ctx, logdir, before="import keras\n"
                         "keras.mixed_precision.set_global_policy('mixed_float16')\n")
        finally:
            ctx.run("keras.mixed_precision.set_global_policy('float32')")
        assert shown.error is None
        _kept_checkpoints(ctx, logdir)
        return _fit(ctx, logdir)


@scenario("track-renamed")
def _(ctx):
    logdir = ctx.tmp / "renamed"
    loop = "while not sv.should_stop():\n    sv.step()\n"
    with context.eager_mode():
        ctx.run(KERAS_MODEL.format(optimizer="'adam'")
                + "model.optimizer.build(model.trainable_variables)")
        ctx.ok(f"--logdir {logdir} --max-steps 2 --wait",
               "sv.track(model=model, optimizer=model.optimizer)\n" + loop)
        _kept_checkpoints(ctx, logdir)
        return ctx.cell(f"--logdir {logdir} --max-steps 4 --wait",
                        "sv.track(net=model, opt=model.optimizer)\n" + loop)


@scenario("track-a-function")
def _(ctx):
    with context.eager_mode():
        ctx.run(KERAS_MODEL.format(optimizer="'adam'")
                + "train_step = tf.function(lambda x: model(x))")
        return ctx.cell(f"--logdir {ctx.tmp / 'function'} --wait",
                        "sv.track(step=train_step)\nwhile not sv.should_stop():\n    sv.step()\n")


@scenario("empty-graph")
def _(ctx):
    logdir = ctx.trained("empty")
    with tf.Graph().as_default():
        return ctx.cell(f"--logdir {logdir}")


@scenario("max-steps-without-global-step")
def _(ctx):
    logdir = ctx.tmp / "nostep"
    with tf.Graph().as_default():
        ctx.ip.user_ns["train_op"] = v1.assign_add(v1.get_variable("c", initializer=0.0), 1.0)
        shown = ctx.cell(f"--logdir {logdir} --max-steps 100")
    assert not logdir.exists()  # refused before anything was written
    return shown


@scenario("global-step-not-integer")
def _(ctx):
    logdir = ctx.tmp / "floatstep"
    with tf.Graph().as_default():
        step = tf.Variable(0.0, name="global_step", trainable=False)
        ctx.ip.user_ns["train_op"] = v1.assign_add(step, 1.0)
        shown = ctx.cell(f"--logdir {logdir}")
    assert not logdir.exists()
    return shown


@scenario("no-global-step")
def _(ctx):
    logdir = str(ctx.tmp / "counter")
    body = "for _ in range(50):\n    sess.run(train_op)\n"
    with tf.Graph().as_default():
        ctx.ip.user_ns["train_op"] = v1.assign_add(v1.get_variable("c", initializer=0.0), 1.0)
        shown = ctx.ok(f"--logdir {logdir} --wait", body)
        assert jupyter_supervisor.get_run("counter").status == "finished"
        # It checkpoints and resumes: the second run continues from the first one's value.
        ctx.ok(f"--logdir {logdir} --wait", body)
    assert tf.train.load_checkpoint(os.path.join(logdir, "model.ckpt")).get_tensor("c") == 100
    return shown


@scenario("no-variables")
def _(ctx):
    logdir = ctx.tmp / "stateless"
    with tf.Graph().as_default():
        value = tf.constant(1.0)
        v1.summary.scalar("value", value)
        ctx.ip.user_ns["value"] = value
        shown = ctx.ok(f"--logdir {logdir} --wait", "for _ in range(3):\n    sess.run(value)\n")
    assert jupyter_supervisor.get_run("stateless").status == "finished"
    assert not [name for name in os.listdir(logdir) if ".ckpt" in name]
    assert [name for name in os.listdir(logdir) if name.startswith("events.out.tfevents")]
    return shown


# --------------------------------------------------------------------------------- the logdir

@scenario("logdir-is-a-file")
def _(ctx):
    notes = ctx.tmp / "notes.txt"
    notes.write_text("precious")
    shown = ctx.cell(f"--logdir {notes}")
    assert notes.read_text() == "precious"
    return shown


@scenario("logdir-with-glob-characters")
def _(ctx):
    logdir = ctx.tmp / "lr[0.1]"
    shown = ctx.cell(f"--logdir {logdir}")
    assert not logdir.exists()  # refused before anything was written
    return shown


@scenario("logdir-under-a-file")
def _(ctx):
    notes = ctx.tmp / "notes.txt"
    notes.write_text("precious")
    shown = ctx.cell(f"--logdir {notes / 'run1'}")
    assert notes.read_text() == "precious"
    return shown


@scenario("logdir-read-only")
def _(ctx):
    logdir = ctx.tmp / "readonly"
    logdir.mkdir()
    as_root = os.geteuid() == 0
    if as_root:
        # Root writes through permission bits: a read-only file system stands in.
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs",
                                  str(logdir)], capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a read-only file system here: {mounted.stderr.strip()}")
    try:
        ctx.trained("readonly")
        if as_root:
            subprocess.run(["mount", "-o", "remount,ro", str(logdir)], check=True)
        else:
            logdir.chmod(0o555)
        return ctx.cell(f"--logdir {logdir}")
    finally:
        try:
            _check_kept(ctx, str(logdir))  # before the file system goes away
        finally:
            if as_root:
                subprocess.run(["umount", "-l", str(logdir)], check=True)
            else:
                logdir.chmod(0o755)


@scenario("logdir-read-only-mid-run")
def _(ctx):
    logdir = ctx.tmp / "turned-read-only"
    ctx.ok(f"--logdir {logdir} --save-model-secs 0.05")
    ctx.running("turned-read-only")
    ctx.wait_for(lambda: (newest_step(str(logdir)) or 0) > 0, timeout=DEADLINE,
                 what="a checkpoint")
    with made_read_only(logdir):
        state = tf.train.get_checkpoint_state(str(logdir))
        prefixes = tuple(os.path.basename(p) + "." for p in state.all_model_checkpoint_paths)
        ctx.keep(str(logdir), only=lambda name: name == "checkpoint" or name.startswith(prefixes))
        try:
            return ctx.magic("wait turned-read-only")
        finally:
            _check_kept(ctx, str(logdir))  # while it is mounted


@scenario("logdir-in-use-here")
def _(ctx):
    logdir = ctx.tmp / "busy"
    ctx.ok(f"--logdir {logdir}")
    run = ctx.running("busy")
    shown = ctx.cell(f"--logdir {logdir}")
    # The live run goes on undisturbed, and stops with a final checkpoint.
    assert jupyter_supervisor.get_run("busy") is run and run.status == "running"
    assert run.stop(wait=True, timeout=DEADLINE) and run.status == "stopped"
    assert newest_step(str(logdir)) == run.global_step
    return shown


@scenario("logdir-in-use-elsewhere")
def _(ctx):
    logdir = ctx.trained("shared")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\n"
         "from jupyter_supervisor.lockfile import LogdirLock\n"
         "lock = LogdirLock(sys.argv[1])\n"
         "lock.acquire()\n"
         "print('held', flush=True)\n"
         "sys.stdin.read()\n"
         "lock.release()\n", logdir],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        ready, _, _ = select.select([holder.stdout], [], [], DEADLINE)
        assert ready and holder.stdout.readline() == "held\n", "the other process took no lock"
        shown = ctx.cell(f"--logdir {logdir}")
        assert f"(pid {holder.pid} on host" in str(shown.error)
    finally:
        holder.stdin.close()
        holder.wait(DEADLINE)
    assert holder.returncode == 0
    return shown


@scenario("same-graph-two-runs")
def _(ctx):
    ctx.ok(f"--logdir {ctx.tmp / 'first'}")
    run = ctx.running("first")
    shown = ctx.cell(f"--logdir {ctx.tmp / 'second'}")
    assert run.status == "running"
    assert not (ctx.tmp / "second").exists()
    return shown


@scenario("same-model-two-runs")
def _(ctx):
    with context.eager_mode():
        ctx.run("import keras, eager_models\nx, y = eager_models.data(n=64)\n"
                "model = eager_models.make_model()")
        fit = ("model.fit(x, y, batch_size=8, epochs=100000, callbacks=[sv.callback], "
               "verbose=0)")
        ctx.ok(f"--logdir {ctx.tmp / 'first'} --save-model-secs 0", fit)
        run = ctx.running("first")
        shown = ctx.cell(f"--logdir {ctx.tmp / 'second'} --wait", fit)
        assert run.status == "running"
        assert tf.train.latest_checkpoint(str(ctx.tmp / "second")) is None
        return shown


# ------------------------------------------------------------------------------- checkpoints

@scenario("checkpoint-missing-variable")
def _(ctx):
    logdir = ctx.trained("grown")
    with tf.Graph().as_default():
        build_model(ctx.ip.user_ns, extra_variable="head/bias")
        return ctx.cell(f"--logdir {logdir}")


@scenario("checkpoint-shape-changed")
def _(ctx):
    logdir = ctx.trained("reshaped")
    with tf.Graph().as_default():
        build_model(ctx.ip.user_ns, w_shape=(3,))
        return ctx.cell(f"--logdir {logdir}")


@scenario("last-stop-cut")
def _(ctx):
    logdir = ctx.trained("cut")
    # What a kernel killed while it wrote its final checkpoint leaves: its lock, with the stop.
    subprocess.run(
        [sys.executable, "-c",
         "import os, sys\n"
         "from jupyter_supervisor.lockfile import LogdirLock, note_stop\n"
         "from jupyter_supervisor.notebook.shutdown import cut_advice\n"
         "lock = LogdirLock(sys.argv[1])\n"
         "lock.acquire()\n"
         "why = 'the kernel received SIGTERM'\n"
         "assert note_stop(sys.argv[1], why, cut_advice(why))\n"
         "os._exit(0)\n", logdir], env=child_env(), check=True, timeout=DEADLINE)
    ctx.release(logdir)
    shown = ctx.ok(f"--logdir {logdir} --max-steps 30 --save-model-secs 0 --wait")
    run = jupyter_supervisor.get_run("cut")
    assert run.status == "finished" and run.restored_from.endswith("model.ckpt-20")
    assert not os.path.exists(os.path.join(logdir, "supervisor.lock"))
    return shown


@scenario("newest-checkpoint-corrupted")
def _(ctx):
    logdir = ctx.trained("damaged")
    corrupt_checkpoint(os.path.join(logdir, "model.ckpt-20"))
    ctx.release(logdir)
    shown = ctx.ok(f"--logdir {logdir} --max-steps 30 --save-model-secs 0 --wait")
    run = jupyter_supervisor.get_run("damaged")
    assert run.status == "finished" and run.restored_from.endswith("model.ckpt-10")
    assert newest_step(logdir) == 30
    return shown


@scenario("all-checkpoints-corrupted")
def _(ctx):
    logdir = ctx.trained("ruined")
    for step in (10, 20):
        corrupt_checkpoint(os.path.join(logdir, f"model.ckpt-{step}"))
    ctx.keep(logdir)  # as damaged: left exactly so
    shown = ctx.cell(f"--logdir {logdir} --wait")
    assert jupyter_supervisor.get_run("ruined").status == "failed"
    return shown


@scenario("listed-checkpoints-unreadable")
def _(ctx):
    logdir = ctx.trained("unlisted", steps=(10, 20, 30))
    unlisted, _ = unlist_newest_and_damage_the_rest(logdir)
    # The run trains on in the logdir; the checkpoints it had stay exactly as they are.
    ctx.keep(logdir, only=lambda name: re.match(r"model\.ckpt-(10|20|30)\.", name))
    shown = ctx.ok(f"--logdir {logdir} --max-steps 40 --save-model-secs 0 --wait")
    run = jupyter_supervisor.get_run("unlisted")
    assert run.status == "finished" and run.restored_from == unlisted
    return shown


@scenario("state-file-damaged")
def _(ctx):
    logdir = ctx.trained("stateless_state")
    with open(os.path.join(logdir, "checkpoint"), "w", encoding="utf-8") as f:
        f.write("model_checkpoint_path: \"model.ckpt-20\n")  # cut off mid-line
    ctx.keep(logdir, only=lambda name: name.startswith("model.ckpt-"))
    shown = ctx.ok(f"--logdir {logdir} --max-steps 30 --save-model-secs 0 --wait")
    run = jupyter_supervisor.get_run("stateless_state")
    assert run.status == "finished" and run.restored_from.endswith("model.ckpt-20")
    # The next checkpoint rewrote the state file: all of them are listed again.
    state = tf.train.get_checkpoint_state(logdir)
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-10", "model.ckpt-20", "model.ckpt-30"]
    return shown


@scenario("state-file-missing")
def _(ctx):
    logdir = ctx.trained("stateless_copy")
    os.remove(os.path.join(logdir, "checkpoint"))
    ctx.keep(logdir, only=lambda name: name.startswith("model.ckpt-"))
    shown = ctx.ok(f"--logdir {logdir} --max-steps 30 --save-model-secs 0 --wait")
    run = jupyter_supervisor.get_run("stateless_copy")
    assert run.status == "finished" and run.restored_from.endswith("model.ckpt-20")
    return shown


@scenario("checkpoint-files-deleted")
def _(ctx):
    logdir = ctx.trained("emptied")
    for name in os.listdir(logdir):
        if name.startswith("model.ckpt-"):
            os.remove(os.path.join(logdir, name))
    ctx.keep(logdir)
    shown = ctx.cell(f"--logdir {logdir} --wait")
    assert jupyter_supervisor.get_run("emptied").status == "failed"
    return shown


# ----------------------------------------------------------------------- the body and init_fn

@scenario("body-syntax-error")
def _(ctx):
    logdir = ctx.trained("typo")
    shown = ctx.cell(f"--logdir {logdir}", "while not sv.should_stop()\n    sess.run(train_op)\n")
    assert "    while not sv.should_stop()\n" in shown.display and "^" in shown.display
    assert jupyter_supervisor.get_run("typo").status == "failed"
    return shown


@scenario("body-raises")
def _(ctx):
    logdir = ctx.trained("diverged")
    # No periodic save: the checkpoint service's first save, made as it starts, would list the
    # body's one step (21) in the state file whenever the service's thread runs after that
    # step, as on a loaded machine; what is kept is then whether the failure wrote anything.
    shown = ctx.cell(f"--logdir {logdir} --save-model-secs 0 --wait",
                     "sess.run(train_op)\nraise ValueError('loss diverged')\n")
    lines = shown.display.splitlines()
    assert any(line.startswith("----> 3 raise ValueError('loss diverged')") for line in lines)
    return shown


@scenario("report-in-fit")
def _(ctx):
    callback = ("class Report(keras.callbacks.Callback):\n"
                "    def on_epoch_end(self, epoch, logs=None):\n"
                "        sv.report(val_loss=1.0)\n")
    with context.eager_mode():
        ctx.run(KERAS_MODEL.format(optimizer="'adam'") + callback)
        return ctx.cell(f"--logdir {ctx.tmp / 'reported'} --keep-best val_loss --wait",
                        "model.fit(x, y, batch_size=8, epochs=1, verbose=0, "
                        "callbacks=[sv.callback, Report()])")


@scenario("body-creates-ops")
def _(ctx):
    logdir = ctx.trained("growing")
    return ctx.cell(f"--logdir {logdir} --wait", "x = tf.constant(1.0)\n" + LOOP)


@scenario("summary-needs-a-feed")
def _(ctx):
    ctx.run("fed = tf.compat.v1.placeholder(tf.float32)\n"
            "tf.compat.v1.summary.scalar('needs_a_feed', fed)")
    return ctx.cell(f"--logdir {ctx.tmp / 'fed'} --save-summaries-secs 0.05 --wait")


@scenario("init-fn-raises")
def _(ctx):
    logdir = ctx.tmp / "pretrained"
    defined = ctx.run("def warm_start(sess):\n"
                      "    raise FileNotFoundError('no pretrained weights at "
                      "/data/pretrained.ckpt')\n")
    assert defined.error is None
    shown = ctx.cell(f"--logdir {logdir} --init-fn warm_start --wait")
    assert "in warm_start(sess)" in shown.display  # the traceback is the function's
    assert jupyter_supervisor.get_run("pretrained").status == "failed"
    assert not [name for name in os.listdir(logdir) if ".ckpt" in name]  # nothing half-made
    return shown


# --------------------------------------------------------------------------- training diverges

@scenario("diverged")
def _(ctx):
    logdir = ctx.trained("exploded")  # good checkpoints 10 and 20: kept as they are
    with tf.Graph().as_default():
        build_model(ctx.ip.user_ns, learning_rate=8.5)
        shown = ctx.cell(f"--logdir {logdir} --max-steps 60 --save-model-secs 0 --wait")
    run = jupyter_supervisor.get_run("exploded")
    assert run.status == "failed" and run.exception.newest_good.endswith("model.ckpt-20")
    assert tf.train.latest_checkpoint(logdir) == run.exception.newest_good
    return shown


@scenario("diverged-rollback")
def _(ctx):
    logdir = str(ctx.tmp / "bumpy")
    # Waits for the checkpoint written at start, so that there is a good one to go back to.
    body = ("while tf.train.latest_checkpoint(sv.logdir) is None and "
            "not sv.coord.wait_for_stop(0.01):\n    pass\n" + LOOP)
    with tf.Graph().as_default():
        build_model(ctx.ip.user_ns, learning_rate=8.5)
        shown = ctx.ok(f"--logdir {logdir} --on-nan rollback --save-model-secs 0.05", body)
        run = jupyter_supervisor.get_run("bumpy")
        ctx.wait_for(lambda: run.history.snapshot().rollbacks, timeout=DEADLINE,
                     what="a rollback")
        run_module.stop_all(timeout=DEADLINE)
    return shown


# ---------------------------------------------------------------------------- steering runs

@scenario("resume-running-run")
def _(ctx):
    ctx.ok(f"--logdir {ctx.tmp / 'live'}")
    run = ctx.running("live")
    shown = ctx.magic("resume live")
    assert run.status == "running"
    return shown


@scenario("stop-ended-run")
def _(ctx):
    ctx.ok(f"--logdir {ctx.tmp / 'done'} --max-steps 5 --wait")
    return ctx.magic("stop done")


@scenario("save-ended-run")
def _(ctx):
    logdir = str(ctx.tmp / "done")
    ctx.ok(f"--logdir {logdir} --max-steps 5 --wait")
    ctx.keep(logdir)
    return ctx.magic("save done")


@scenario("resume-without-logdir")
def _(ctx):
    ctx.ok("--name unsaved --max-steps 5 --wait")
    return ctx.magic("resume unsaved")


# -------------------------------------------------------------------------------- the tests

def _check_kept(ctx: Ctx, logdir: str) -> None:
    before = ctx.kept.pop(logdir, None)
    if before is None:
        return
    after = snapshot(logdir)
    lost = sorted(name for name in before if name not in after)
    changed = sorted(name for name in before if name in after and after[name] != before[name])
    assert not lost and not changed, f"{logdir}: lost {lost}, changed {changed}"


def test_the_table_has_a_scenario_for_every_row_and_a_row_for_every_scenario():
    cases = [row.case for row in ROWS]
    assert len(cases) >= 20
    assert len(set(cases)) == len(cases), "a case name is used twice"
    assert set(cases) == set(SCENARIOS)
    for row in ROWS:
        assert row.kind.isidentifier() and row.message and row.did and row.todo, row


@pytest.mark.parametrize("basename", ["model[1].ckpt", "model*.ckpt", "model?.ckpt",
                                      "model\\1.ckpt"])
def test_a_basename_with_glob_characters_is_refused(basename):
    """TensorFlow finds a checkpoint's files by glob pattern: it could write these, never read
    them back. Refused by the option and by RunConfig (``basename-with-directory``'s form)."""
    expected = "Expected a file name such as 'model.ckpt', without /, *, ?, [ or \\."
    with pytest.raises(UsageError, match=re.escape(expected)):
        magics.SuperviseMagics.supervise_cell.parser.parse_args(
            ["--checkpoint-basename", basename])
    with pytest.raises(ValueError, match=re.escape(expected)):
        jupyter_supervisor.RunConfig(checkpoint_basename=basename)


def test_the_supervisor_refuses_a_logdir_it_could_not_resume_from(tmp_path):
    """The graph Supervisor (TensorFlow's API) refuses a glob character in the logdir or the
    basename of a chief that saves, before it adds anything to the graph or creates the
    directory; without a Saver nothing is globbed, and TensorFlow's behaviour stays."""
    graph = tf.Graph()
    with context.graph_mode(), graph.as_default():
        build_model({})
        ops = len(graph.get_operations())
        logdir = tmp_path / "lr[0.1]"
        with pytest.raises(ValueError, match=re.escape("Received: logdir=")):
            jupyter_supervisor.Supervisor(graph=graph, logdir=str(logdir))
        with pytest.raises(ValueError, match=re.escape("Received: checkpoint_basename=")):
            jupyter_supervisor.Supervisor(graph=graph, logdir=str(tmp_path / "ok"),
                                          checkpoint_basename="model?.ckpt")
        assert len(graph.get_operations()) == ops and not logdir.exists()
        summaries_only = jupyter_supervisor.Supervisor(graph=graph, logdir=str(logdir),
                                                       saver=None)
        summaries_only.stop()


@pytest.mark.parametrize("row", ROWS, ids=[row.case for row in ROWS])
def test_bad_input(row, ip, tmp_path, capsys, caplog, wait_for):
    ctx = Ctx(ip, tmp_path, capsys, wait_for)
    with caplog.at_level(logging.WARNING, logger=LOGGER), context.graph_mode(), \
            tf.Graph().as_default():
        build_model(ip.user_ns)
        try:
            shown = SCENARIOS[row.case](ctx)
        finally:
            late = run_module.stop_all(timeout=DEADLINE)
        assert not late, f"runs did not stop: {late}"
    for logdir in list(ctx.kept):
        _check_kept(ctx, logdir)

    if row.kind == "note":
        assert shown.error is None
        assert re.search(f"(?m)^{row.regex()}$", shown.out), shown.out
        return
    if row.kind == "warning":
        assert shown.error is None
        warnings = [r.getMessage() for r in caplog.records
                    if r.name == LOGGER and r.levelno == logging.WARNING]
        assert any(re.fullmatch(row.regex(), w) for w in warnings), warnings
        return

    assert shown.error is not None, f"the cell did not fail:\n{shown.out}{shown.err}"
    display = shown.display
    assert not OUR_FRAME.search(display), f"a frame of ours is shown:\n{display}"
    starts = [m.end() for m in re.finditer(f"(?m)^{re.escape(row.kind)}: ", display)]
    assert starts, f"no '{row.kind}: ' line in what the user sees:\n{display}"
    message = display[starts[-1]:].strip()
    assert re.fullmatch(row.regex(), message, re.DOTALL), \
        f"\nexpected: {row.message}\nshown:    {message}"
    if isinstance(shown.error, RunFailedError):
        # A failure of the run: the panel and %supervise show the same error.
        run = shown.error.run
        assert run.status == "failed"
        text = run.error_text.strip()
        start = [m.end() for m in re.finditer(f"(?m)^{re.escape(row.kind)}: ", text)][-1]
        assert re.fullmatch(row.regex(), text[start:], re.DOTALL), text
    else:
        # Refused at once: one error, no traceback, and nothing started.
        assert display.strip().startswith(f"{row.kind}: "), display
        assert not shown.started


def _execute(kernel: Kernel, code: str) -> dict:
    """Executes ``code`` in the kernel; returns the reply's content plus what it printed to
    stderr, once the kernel is idle again."""
    reply = kernel.execute(code, timeout=DEADLINE)
    return dict(reply.content, stderr=reply.stream("stderr"))


@pytest.mark.kernel
def test_a_kernel_shows_each_kind_of_error_as_the_table_says(tmp_path):
    """One row of each kind, in a real kernel: what a notebook receives is the error of the
    table, and a traceback only where it is the user's own code."""
    rows = {row.case: row for row in ROWS}
    kernel = Kernel(tmp_path)  # helpers.KERNEL_SETUP ran: the extension loaded, tf imported
    try:
        setup = _execute(kernel, (
            "tf.compat.v1.disable_eager_execution()\n"
            "gs = tf.compat.v1.train.get_or_create_global_step()\n"
            "train_op = tf.compat.v1.assign_add(gs, 1)\n"
            "open('notes.txt', 'w').write('precious')\n"
            "def warm_start(sess):\n"
            "    raise FileNotFoundError('no pretrained weights at /data/pretrained.ckpt')\n"))
        assert setup["status"] == "ok", setup

        # A bad option: IPython's one-line UsageError, no traceback.
        reply = _execute(kernel, "%%supervise --logdri runs/x\n" + LOOP)
        row = rows["unknown-option"]
        assert (reply["status"], reply["ename"]) == ("error", row.kind)
        assert re.fullmatch(row.regex(), reply["evalue"], re.DOTALL), reply["evalue"]
        assert reply["traceback"] == [] and reply["stderr"] == f"UsageError: {reply['evalue']}\n"

        # Refused when starting: one line, type and message.
        reply = _execute(kernel, "%%supervise --logdir notes.txt\n" + LOOP)
        row = rows["logdir-is-a-file"]
        assert (reply["status"], reply["ename"]) == ("error", row.kind)
        assert re.fullmatch(row.regex(), reply["evalue"], re.DOTALL), reply["evalue"]
        assert reply["traceback"] == [f"{row.kind}: {reply['evalue']}"]

        # The body does not compile: the cell fails at once, pointing at the line.
        reply = _execute(kernel, "%%supervise --logdir runs/typo\nwhile not sv.should_stop()\n"
                                 "    sess.run(train_op)\n")
        row = rows["body-syntax-error"]
        assert reply["status"] == "error"
        assert reply["traceback"][-1] == f"{row.kind}: {row.message}"
        assert "    while not sv.should_stop()" in reply["traceback"]

        # A failure in the background, waited for: the user's function's traceback only.
        reply = _execute(kernel, "%%supervise --logdir runs/pretrained --init-fn warm_start "
                                 "--wait\n" + LOOP)
        row = rows["init-fn-raises"]
        assert reply["status"] == "error"
        assert re.fullmatch(f"{row.kind}: {row.regex()}", reply["traceback"][-1])
        assert any("in warm_start(sess)" in line for line in reply["traceback"])
        assert not OUR_FRAME.search("\n".join(reply["traceback"]))
    finally:
        kernel.shutdown()
