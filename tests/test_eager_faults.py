"""Faults on the TensorFlow 2 path that a careful user meets (issue 32), in a real kernel.

* The logdir becomes read-only mid-run: the user sees the CheckpointWriteError with its advice,
  not the PermissionError of the lock released after it.
* The logdir is deleted mid-run: the error names no checkpoint that is gone.
* One model (or optimizer, or tracked object) in two live runs: the second is refused.
* Mixed precision: a step the LossScaleOptimizer skipped is not divergence; real divergence is.

Each test asserts what the user sees and that every checkpoint written before still restores
with plain TensorFlow (``tf.train.Checkpoint.read`` into a fresh model, in this process).
Waiting is on kernel-side conditions with deadlines; nothing sleeps a fixed time.
"""
import os
import re
import shutil
import uuid

import pytest
import tensorflow as tf

import eager_models
from helpers import Kernel, made_read_only

FIT = ("%%supervise --logdir {logdir} --save-model-secs {secs} {options}\n"
       "model.fit(x, y, batch_size=8, epochs=100000, callbacks=[sv.callback], verbose=0)")
KERAS = ("import keras, eager_models\n"
         "x, y = eager_models.data(n=64)\n"
         "model = eager_models.make_model()\n")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("kernel"))
    yield k
    k.shutdown()


@pytest.fixture
def name(kernel):
    """A run name (and logdir runs/NAME) of this test's own; its runs are stopped after it."""
    run = f"r{uuid.uuid4().hex[:8]}"
    kernel.ok(KERAS)
    yield run
    kernel.ok("import jupyter_supervisor.notebook.run\n"
              "jupyter_supervisor.notebook.run.stop_all(timeout=60)")


def listed(logdir):
    """The checkpoints the state file lists, oldest first."""
    state = tf.train.get_checkpoint_state(str(logdir))
    return list(state.all_model_checkpoint_paths) if state else []


def assert_restores(paths):
    """Every checkpoint in ``paths`` restores into a fresh model and optimizer with plain
    TensorFlow, every value of the model read back."""
    assert paths
    for path in paths:
        model = eager_models.make_model()
        model.optimizer.build(model.trainable_variables)
        status = tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(path)
        status.assert_existing_objects_matched()
        assert int(model.optimizer.iterations.numpy()) == int(path.rsplit("-", 1)[1])


def checkpoint_past(kernel, logdir, step):
    kernel.wait_until(f"int((tf.train.latest_checkpoint({logdir!r}) or '-0')"
                      f".rsplit('-', 1)[1]) > {step}", f"a checkpoint past step {step}")


def failure_of_wait(kernel, name):
    """The error the user sees when waiting for the run: its last traceback line."""
    reply = kernel.execute(f"%supervise wait {name}")
    assert reply.status == "error", reply.stream()
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(reply.content["traceback"]))
    starts = [m.start() for m in re.finditer(r"(?m)^\w+Error: ", text)]
    assert starts, text
    return text[starts[-1]:]


# ------------------------------------------------------------------------ the logdir changes

def test_a_logdir_made_read_only_mid_run_shows_the_write_error_not_the_locks(kernel, name):
    logdir = f"runs/{name}"
    kernel.ok(FIT.format(logdir=logdir, secs=0.2, options=""))
    checkpoint_past(kernel, logdir, 8)
    with made_read_only(kernel.workdir / logdir) as path:
        before = listed(path)
        shown = failure_of_wait(kernel, name)
        assert shown.startswith(f"CheckpointWriteError: Could not write a checkpoint to "
                                f"{logdir}: "), shown
        assert "Read-only file system" in shown
        newest = os.path.relpath(listed(path)[-1], kernel.workdir)
        assert (f"The newest intact checkpoint is {newest}; nothing saved before was "
                "changed.") in shown, shown
        assert "Fix the cause (free disk space, permissions)" in shown
        assert "supervisor.lock" not in shown and "Error: [Errno" not in shown
        # The lock's failure is told beside it, in the run's output.
        output = kernel.value(f"get_run({name!r}).history.snapshot().output")
        assert "Releasing the logdir's lock failed too" in output, output
        assert listed(path)[:len(before)] == before
        assert_restores(listed(path))


def test_a_logdir_deleted_mid_run_names_no_checkpoint_that_is_gone(kernel, name):
    logdir = f"runs/{name}"
    kernel.ok(FIT.format(logdir=logdir, secs=0.2, options=""))
    checkpoint_past(kernel, logdir, 8)
    shutil.rmtree(kernel.workdir / logdir)
    shown = failure_of_wait(kernel, name)
    assert re.fullmatch(
        re.escape(f"CheckpointWriteError: Could not write a checkpoint to {logdir}: No such "
                  f"file or directory.\nWriting the checkpoint {logdir}/model.ckpt-")
        + r"\d+" + re.escape(
            " failed and the run stopped. The checkpoints written before are no longer in "
            f"{logdir}. Fix the cause (free disk space, permissions), then re-run the cell: "
            "it starts afresh."), shown), shown
    assert not (kernel.workdir / logdir).exists()
    # Re-running the cell starts afresh there, and what it writes restores.
    kernel.ok(KERAS)
    kernel.ok(FIT.format(logdir=logdir, secs=0, options="--max-steps 5 --wait"))
    assert_restores(listed(kernel.workdir / logdir))
