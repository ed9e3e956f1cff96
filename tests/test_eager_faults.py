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
import time
import uuid

import numpy as np
import pytest
import tensorflow as tf

import eager_models
from helpers import made_read_only

pytestmark = pytest.mark.kernel

FIT = ("%%supervise --logdir {logdir} --save-model-secs {secs} {options}\n"
       "model.fit(x, y, batch_size=8, epochs=100000, callbacks=[sv.callback], verbose=0)")
KERAS = ("import keras, eager_models\n"
         "x, y = eager_models.data(n=64)\n"
         "model = eager_models.make_model()\n")


@pytest.fixture
def name(kernel):
    """A run name (and logdir runs/NAME) of this test's own, with the Keras model in the
    kernel; its runs are stopped after it (the ``kernel`` fixture)."""
    kernel.eager()
    kernel.ok(KERAS)
    return f"r{uuid.uuid4().hex[:8]}"


def listed(logdir):
    """The checkpoints the state file lists, oldest first."""
    state = tf.train.get_checkpoint_state(str(logdir))
    return list(state.all_model_checkpoint_paths) if state else []


def assert_restores(paths, trained_before=0):
    """Every checkpoint in ``paths`` restores into a fresh model and optimizer with plain
    TensorFlow; its optimizer took ``trained_before`` steps more than the checkpoint's step
    (steps of the model trained in another logdir first)."""
    assert paths
    for path in paths:
        model = eager_models.make_model()
        model.optimizer.build(model.trainable_variables)
        status = tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(path)
        status.assert_existing_objects_matched()
        assert int(model.optimizer.iterations.numpy()) == \
            trained_before + int(path.rsplit("-", 1)[1])


def checkpoint_past(kernel, logdir, step):
    kernel.wait_until(f"int((tf.train.latest_checkpoint({logdir!r}) or '-0')"
                      f".rsplit('-', 1)[1]) > {step}", f"a checkpoint past step {step}")


def refused(kernel, cell):
    """Runs ``cell``, which must fail; returns the error the user sees, from its type on."""
    reply = kernel.execute(cell)
    assert reply.status == "error", reply.stream()
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(reply.content["traceback"]))
    starts = [m.start() for m in re.finditer(r"(?m)^\w+Error: ", text)]
    assert starts, text
    return text[starts[-1]:]


def failure_of_wait(kernel, name):
    """The error the user sees when waiting for the run."""
    return refused(kernel, f"%supervise wait {name}")


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
    deadline = time.monotonic() + 30
    while (kernel.workdir / logdir).exists():  # a save in flight may add a file meanwhile
        shutil.rmtree(kernel.workdir / logdir, ignore_errors=True)
        assert time.monotonic() < deadline, "the logdir could not be deleted"
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


# ---------------------------------------------------------------------- one model, two runs

def conflict(holder, what):
    return (f"RunConflictError: Run {holder!r} is training {what}: one live run trains a model "
            f"at a time. Stop it first with `%supervise stop {holder}` (or "
            f"jupyter_supervisor.get_run({holder!r}).stop()). Or train another copy in this "
            "run (keras.models.clone_model(model), compiled anew).")


def test_a_model_that_a_live_fit_trains_is_refused_to_a_second_fit(kernel, name):
    first, second = f"runs/{name}", f"runs/{name}-second"
    kernel.ok(FIT.format(logdir=first, secs=0.2, options=""))
    checkpoint_past(kernel, first, 8)
    shown = refused(kernel, FIT.format(logdir=second, secs=0, options="--wait"))
    assert shown == conflict(name, "model (Sequential)"), shown
    assert listed(kernel.workdir / second) == []
    step = kernel.value(f"get_run({name!r}).global_step")
    kernel.wait_until(f"get_run({name!r}).global_step > {step}", "the first run to go on")
    assert kernel.value(f"get_run({name!r}).status") == "running"
    kernel.ok(f"%supervise stop {name}")
    final = kernel.value(f"get_run({name!r}).global_step")
    # The model took the first run's steps only, and each of its checkpoints restores.
    assert kernel.value("int(model.optimizer.iterations.numpy())") == final
    assert listed(kernel.workdir / first)[-1].endswith(f"-{final}")
    assert_restores(listed(kernel.workdir / first))
    # Released when the first run ended: the second trains it now.
    kernel.ok(FIT.format(logdir=second, secs=0, options="--max-steps 4 --wait"))
    assert kernel.value("int(model.optimizer.iterations.numpy())") == final + 4
    assert_restores(listed(kernel.workdir / second), trained_before=final)


def test_an_optimizer_that_a_live_track_trains_is_refused_to_a_second_track(kernel, name):
    first, second = f"runs/{name}", f"runs/{name}-second"
    loop = ("sv.track(model={model}, optimizer=model.optimizer)\n"
            "while not sv.should_stop():\n"
            "    {model}.train_on_batch(x[:8], y[:8])\n"
            "    sv.step()\n")
    kernel.ok(f"%%supervise --logdir {first} --save-model-secs 0.2\n" + loop.format(model="model"))
    checkpoint_past(kernel, first, 8)
    kernel.ok("other = eager_models.make_model()\nother.compile(model.optimizer, 'mse')")
    shown = refused(kernel, f"%%supervise --logdir {second} --wait\n" + loop.format(model="other"))
    assert shown == conflict(name, "optimizer (Adam)"), shown
    assert kernel.value(f"get_run({name!r}).status") == "running"
    kernel.ok(f"%supervise stop {name}")
    assert_restores(listed(kernel.workdir / first))


# -------------------------------------------------------------------------- mixed precision

MIXED = """
keras.mixed_precision.set_global_policy("mixed_float16")
mixed = eager_models.make_model()   # compile wraps its Adam in a LossScaleOptimizer
keras.mixed_precision.set_global_policy("float32")
xm, ym = eager_models.data(n=64)
"""
MIXED_FIT = ("%%supervise --logdir {logdir} --save-model-secs 0 --max-steps {steps} --wait\n"
             "mixed.fit(xm, ym, batch_size=8, epochs=100, shuffle=False, "
             "callbacks=[sv.callback], verbose=0)")


def assert_mixed_restores(paths):
    """Each checkpoint restores into a fresh mixed-precision model with plain TensorFlow, and
    its weights are finite."""
    assert paths
    import keras  # pylint: disable=import-outside-toplevel
    keras_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        for path in paths:
            model = eager_models.make_model()
            model.optimizer.build(model.trainable_variables)
            assert type(model.optimizer).__name__ == "LossScaleOptimizer"
            status = tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(path)
            status.assert_existing_objects_matched()
            assert all(np.isfinite(v.numpy()).all() for v in model.trainable_variables)
    finally:
        keras.mixed_precision.set_global_policy(keras_policy)


def test_a_step_the_loss_scale_optimizer_skipped_is_not_divergence(kernel, name):
    logdir = f"runs/{name}"
    kernel.ok(MIXED)
    # The second batch of every epoch overflows float16: its loss is infinite, and so is fit's
    # mean loss for the rest of the epoch; the LossScaleOptimizer skips it and halves its scale.
    kernel.ok("xm[8:16] *= 1e6")
    reply = kernel.ok(MIXED_FIT.format(logdir=logdir, steps=20))
    assert "NonFiniteError" not in reply.stream()
    assert kernel.value(f"get_run({name!r}).status") == "finished"
    assert not np.isfinite(kernel.value("float(mixed.history.history['loss'][-1])"))
    scale = kernel.value("float(mixed.optimizer.dynamic_scale.numpy())")
    assert 1.0 <= scale <= 2.0 ** 15 / 2 ** 3   # three skipped steps at least
    assert listed(kernel.workdir / logdir)[-1].endswith("-20")
    assert_mixed_restores(listed(kernel.workdir / logdir))


def test_divergence_in_mixed_precision_is_still_caught(kernel, name):
    logdir = f"runs/{name}"
    kernel.ok(MIXED)
    kernel.ok(MIXED_FIT.format(logdir=logdir, steps=8))
    good = listed(kernel.workdir / logdir)
    assert good[-1].endswith("-8")
    # Every batch is NaN from now on: each step is skipped, the scale halves every step, and
    # below 1 the loss is not finite for real.
    kernel.ok("xm[:] = float('nan')")
    shown = refused(kernel, MIXED_FIT.format(logdir=logdir, steps=40))
    assert re.fullmatch(
        r"NonFiniteError: Training diverged at step 40: summary 'loss' is NaN.*"
        + re.escape(f"the newest good checkpoint is {logdir}/model.ckpt-8.") + ".*",
        shown, re.DOTALL), shown
    assert kernel.value("float(mixed.optimizer.dynamic_scale.numpy())") < 1.0
    assert listed(kernel.workdir / logdir) == good
    assert_mixed_restores(good)
