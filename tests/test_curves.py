"""Curves a person can watch for days (issue 41, the kernel side): the points the live panel drew
are what the event files hold, so a panel reloaded in a new kernel and TensorBoard's own reader
see the same curve, with a summary at each session's end; the header's numbers agree with each
other; a stop is stamped with the step at which it was asked; a resume says how many steps were
lost; a stall is raised and cleared.

Kernel-level tests drive a real IPython kernel through jupyter_client (``helpers.Kernel``); the
others run a ``TrainingRun`` in this process on a real TensorFlow model. Nothing sleeps to wait:
conditions are waited for, with deadlines; assertions are on steps, never on timing.
"""
import json
import threading

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from jupyter_supervisor import events, names
from jupyter_supervisor.config import RunConfig
from jupyter_supervisor.notebook import run as run_module
from jupyter_supervisor.view import text
from jupyter_supervisor.view.history import RunHistory

import eager_models
from helpers import FakeClock, Kernel, wait_for

DEADLINE = 90.0   # seconds; generous for a loaded 2-core machine, never reached when passing
SESSIONS = 10
RATE = names.STEP_RATE_TAG

EAGER_SETUP = """
import eager_models
model = eager_models.make_model()
x, y = eager_models.data(n=64)
xs, ys = tf.constant(x[:8]), tf.constant(y[:8])
opt = model.optimizer
opt.build(model.trainable_variables)

@tf.function
def train_step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xs) - ys))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                            model.trainable_variables))
    return loss
"""
EAGER_CELL = """%%supervise --logdir {logdir}{options}
sv.track(model=model, optimizer=opt)
while not sv.should_stop():
    sv.step(loss=train_step())
    time.sleep(0.001)
"""
GRAPH_CELL = """%%supervise --logdir {logdir}{options}
while not sv.should_stop():
    sess.run(train_op)
    time.sleep(0.001)
"""
# The live history's series, as plain lists, written by the kernel for the test to read.
DUMP = """
snap = get_run({name!r}).history.snapshot()
pathlib.Path({path!r}).write_text(json.dumps({{
    tag: [s.steps.tolist(), s.values.tolist(), s.mins.tolist(), s.maxs.tolist()]
    for tag, s in snap.scalars.items()}}))
"""


@pytest.fixture
def kernel(tmp_path):
    k = Kernel(tmp_path)
    yield k
    k.shutdown()


def short_sessions(kernel, name, cell, sessions=SESSIONS, steps=20):
    """Runs ``cell``, then stops and resumes the run ``sessions`` times in all, each session
    stopped once it trained ``steps`` steps; returns each session's (first, last) step."""
    kernel.ok(cell)
    spans = []
    for session in range(sessions):
        if session:
            kernel.ok(f"%supervise resume {name}")
        first = spans[-1][1] if spans else 0   # each resumes from the final checkpoint
        kernel.wait_until(f"(get_run({name!r}).global_step or 0) >= {first + steps}", "steps")
        kernel.ok(f"%supervise stop {name}")
        spans.append((first, kernel.value(f"get_run({name!r}).global_step")))
    return spans


def live_series(kernel, name, tmp_path):
    path = str(tmp_path / "live.json")
    kernel.ok(DUMP.format(name=name, path=path))
    with open(path) as f:
        return json.load(f)


def reloaded_series(kernel, name, cell, last_step, tmp_path):
    """Re-runs ``cell`` in the (new) kernel with --max-steps at the last step: the run resumes,
    has nothing to train, and its panel shows what it loaded from the event files."""
    kernel.ok(cell.replace("{options}", f" --max-steps {last_step} --wait"))
    assert kernel.value(f"get_run({name!r}).status") == "finished"
    return live_series(kernel, name, tmp_path)


def assert_same_points(live, reloaded):
    assert sorted(reloaded) == sorted(live)
    for tag in live:
        steps, values, mins, maxs = live[tag]
        assert reloaded[tag][0] == steps, tag
        np.testing.assert_array_equal(reloaded[tag][1], values, err_msg=tag)
        np.testing.assert_array_equal(reloaded[tag][2], mins, err_msg=tag)
        np.testing.assert_array_equal(reloaded[tag][3], maxs, err_msg=tag)


def assert_tensorboard_sees_each_session(logdir, spans, tag):
    """TensorBoard's own reader (with its purge of orphaned points) has a ``tag`` point at each
    session's last step, and a step rate in each session's steps."""
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    steps = {e.step for e in acc.Scalars(tag)}
    assert all(last in steps for _, last in spans), (spans, sorted(steps))
    rates = [e.step for e in acc.Scalars(RATE)]
    assert all(any(first < step <= last for step in rates) for first, last in spans), (
        spans, rates)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_ten_short_sessions_reload_in_a_new_kernel_as_the_live_panel_drew_them(
        kernel, tmp_path, mode):
    """A run stopped and resumed ten times in short sessions (a few seconds, shorter than the
    step counter's 10 s): the live panel's curves, the panel's after a kernel restart, and
    TensorBoard's reading of the event files hold the same points, each session's last step
    included (loss and step rate)."""
    name = f"short{mode}"
    logdir = f"runs/{name}"
    if mode == "eager":
        kernel.ok(EAGER_SETUP)
        cell, tag = EAGER_CELL.replace("{logdir}", logdir), "loss"
    else:
        kernel.model()
        cell, tag = GRAPH_CELL.replace("{logdir}", logdir), "loss"
    spans = short_sessions(kernel, name, cell.replace("{options}", ""))
    live = live_series(kernel, name, tmp_path)
    assert {tag, RATE} <= set(live)
    assert all(last in live[tag][0] for _, last in spans)

    kernel.restart()
    if mode == "eager":
        kernel.ok(EAGER_SETUP)
    else:
        kernel.model()
    reloaded = reloaded_series(kernel, name, cell, spans[-1][1], tmp_path)
    assert_same_points(live, reloaded)
    assert_tensorboard_sees_each_session(tmp_path / logdir, spans, tag)
