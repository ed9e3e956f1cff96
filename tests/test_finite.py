"""A diverged run never checkpoints a non-finite model (issue 15): finite.py and the Supervisor.

Real graphs and sessions; the divergence is exact and known in advance. The model is
``w <- w - lr * d(w - 1)^2/dw``, so ``w - 1`` is multiplied by ``1 - 2 * lr`` each step: with
``lr = 8.5`` by -16, a power of two, so float32 computes it exactly. From ``w = 5``:

    step k:  w - 1 = 4 * (-16)^k = +-2^(2 + 4k)     loss = (w - 1)^2 = 2^(4 + 8k)
    the loss is +inf from step 16 on (2^132); w is infinite at step 32, NaN from step 33.

Checkpoints are written by the body at fixed steps (``sv.save_checkpoint``) where the step
matters, so that every test knows which checkpoints must exist. Nothing waits a fixed time.
"""
import glob
import logging
import os
import re
import threading
import time
import types

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader
from tensorflow.python.eager import context

from jupyter_supervisor import events, finite
from jupyter_supervisor.eager.snapshot import Snapshot
from jupyter_supervisor.graph import saver_guard
from jupyter_supervisor.graph.summaries import ScalarWatch
from jupyter_supervisor.graph.supervisor import Supervisor

from helpers import Recorder

v1 = tf.compat.v1
DEADLINE = 60.0       # seconds; generous for a loaded 2-core machine, never reached when passing
LOGGER = "jupyter_supervisor"
DIVERGING_LR = 8.5    # w - 1 is multiplied by -16 each step (see the module docstring)
LOSS_INF_STEP = 16
W_INF_STEP = 32


@pytest.fixture(autouse=True)
def graph_mode():
    with context.graph_mode():
        yield


def diverging_model(lr=DIVERGING_LR, summaries=True):
    """A new graph: global step, ``w`` (shape [3], all 5.0), an int variable ``count``, loss
    sum((w * x - 1)^2) and its summary. ``x`` is 1 unless fed: ``x = NaN`` is a bad batch (its
    gradient makes w NaN). ``step_after``: the step after one train step.
    """
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("w", initializer=tf.fill([3], 5.0))
        count = v1.get_variable("count", initializer=tf.constant(0, tf.int64))
        lr_in = v1.placeholder_with_default(tf.constant(lr, tf.float32), [], name="lr")
        bad = v1.placeholder_with_default(tf.constant(1.0), [], name="x")
        loss = tf.reduce_sum(tf.square(w * bad - 1.0))
        summary = v1.summary.scalar("loss", loss) if summaries else None
        train = v1.train.GradientDescentOptimizer(lr_in).minimize(loss, global_step=step)
        with tf.control_dependencies([train, v1.assign_add(count, 1)]):
            step_after = tf.identity(step.read_value())
    return types.SimpleNamespace(graph=graph, step=step, w=w, lr=lr_in, bad=bad, loss=loss,
                                 summary=summary, step_after=step_after)


def make_supervisor(model, logdir, keep=3, sharded=False, **kwargs):
    """``sharded``: a Saver that merges its parts under the checkpoint's name (the guard gates
    the merge and checks beside the write), else a plain one (the guard checks before)."""
    kwargs.setdefault("save_model_secs", 0)
    kwargs.setdefault("save_summaries_secs", 0)
    with model.graph.as_default():
        return Supervisor(graph=model.graph, logdir=str(logdir),
                          saver=v1.train.Saver(max_to_keep=keep, sharded=sharded), **kwargs)


def leftovers(logdir):
    """What a refused or cut-short save may have left: temporary files and directories."""
    return [n for n in os.listdir(str(logdir)) if "_temp" in n or "tempstate" in n]


def train_step(model, sess, sv, feed=None):
    """One step, then its loss summary written through the Supervisor (as a body would with
    summary_computed); returns the step after it."""
    step = sess.run(model.step_after, feed)
    if model.summary is not None:
        sv.summary_computed(sess, sess.run(model.summary))
    return int(step)


def listed_steps(logdir):
    state = tf.train.get_checkpoint_state(str(logdir))
    return [] if not state else [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]


def file_steps(logdir):
    return sorted(int(re.search(r"-(\d+)\.index$", p).group(1))
                  for p in glob.glob(os.path.join(str(logdir), "model.ckpt-*.index")))


def assert_every_checkpoint_finite(logdir):
    """Every checkpoint file in ``logdir`` restores to finite values (all float tensors)."""
    steps = file_steps(logdir)
    assert steps, "no checkpoint at all"
    for step in steps:
        reader = tf.train.load_checkpoint(os.path.join(str(logdir), f"model.ckpt-{step}"))
        for name, dtype in reader.get_variable_to_dtype_map().items():
            if dtype.is_floating:
                assert np.all(np.isfinite(reader.get_tensor(name))), (step, name)


def session_logs(logdir):
    found = []
    for path in glob.glob(os.path.join(str(logdir), "events.out.tfevents.*")):
        found.extend(e for e in event_file_loader.LegacyEventFileLoader(path).Load()
                     if e.WhichOneof("what") == "session_log")
    return sorted(found, key=lambda e: e.wall_time)


# ------------------------------------------------------------------------------- the check

def test_the_check_is_one_op_over_the_float_variables_and_names_the_bad_ones():
    model = diverging_model()
    with model.graph.as_default():
        check = saver_guard.variable_check(v1.trainable_variables() + [
            v1.get_variable("count_again", initializer=tf.constant(0, tf.int32))])
        poison = v1.assign(model.w, [1.0, np.nan, -np.inf])
        init = v1.global_variables_initializer()
    assert check.names == ["w"]  # integers cannot be NaN: not checked
    flags = model.graph.get_collection("jupyter_supervisor_finite_flags")
    assert len(flags) == 1 and flags[0].shape.as_list() == [1]
    with v1.Session(graph=model.graph) as sess:
        sess.run(init)
        assert check.run(sess) == []
        sess.run(poison)
        assert check.run(sess) == ["w"]
    # A second check of the same variables reuses the op, also once the graph is finalized.
    model.graph.finalize()
    again = saver_guard.variable_check([model.w], model.graph)
    assert again is not None and again.names == ["w"]
    assert model.graph.get_collection("jupyter_supervisor_finite_flags") == flags


def test_the_eager_check_is_the_same_computation_on_tf_variables():
    with context.eager_mode():
        good = tf.Variable([1.0, 2.0], name="dense/kernel")
        other = tf.Variable(3.0, dtype=tf.float64, name="bias")
        steps = tf.Variable(0, name="steps")
        check = finite.VariableCheck.eager([good, other, steps])
        assert check.names == ["dense/kernel", "bias"]
        assert check.run() == []
        other.assign(np.inf)
        good.assign([np.nan, 0.0])
        assert check.run() == ["dense/kernel", "bias"]


def checked_write(variables):
    """The eager writer's checked write of the copies of ``variables`` (``write(path)``) and
    the check of those copies (``check()``), as ``eager/snapshot.py`` makes them:
    ``refresh()`` copies the variables' values, and makes the write and check of that copy."""
    snapshot = Snapshot({f"v{i}": v for i, v in enumerate(variables)})
    made = {}

    def refresh():
        assert snapshot.copy()
        made["write"], made["check"] = snapshot.write_function(variables)

    refresh()
    return (lambda path: made["write"](str(path))), (lambda: made["check"]), refresh


def test_a_checked_write_writes_a_finite_state_and_refuses_the_rest(tmp_path):
    """A snapshot's write: one call writes the checkpoint, the same one an eager write makes,
    or, when a checked variable is not finite, raises the guard's error naming it and writes
    nothing at all (the check runs before the write). A refusal does not break the next
    write."""
    with context.eager_mode():
        good = tf.Variable(tf.ones([300, 100]), name="dense/kernel")
        other = tf.Variable(3.0, dtype=tf.float64, name="bias")
        steps = tf.Variable(7, name="steps")
        write, check, refresh = checked_write([good, other, steps])
        assert check().names == ["dense/kernel", "bias"]
        first = str(tmp_path / "ckpt-1")
        write(first)
        eager = str(tmp_path / "eager-1")
        tf.train.Checkpoint(v0=good, v1=other, v2=steps).write(eager)
        reader, expected = tf.train.load_checkpoint(first), tf.train.load_checkpoint(eager)
        keys = expected.get_variable_to_shape_map()
        assert set(keys) < set(reader.get_variable_to_shape_map())  # and the save counter
        for key in set(keys) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}:  # ours has the counter
            np.testing.assert_array_equal(reader.get_tensor(key), expected.get_tensor(key))
        assert sorted(glob.glob(first + ".*")) == [
            first + ".data-00000-of-00001", first + ".index"]  # one shard, as eager writes

        good.assign(tf.tensor_scatter_nd_update(good, [[299, 99]], [np.nan]))
        refresh()
        refused = str(tmp_path / "ckpt-2")
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            write(refused)
        assert finite.is_guard_failure(raised.value)
        assert "dense/kernel" in str(raised.value)
        assert glob.glob(refused + "*") == []

        good.assign(tf.ones([300, 100]))
        other.assign(-np.inf)
        refresh()
        with pytest.raises(tf.errors.InvalidArgumentError, match="bias"):
            write(refused)
        assert check().run() == ["bias"]
        other.assign(2.0)
        refresh()
        write(tmp_path / "ckpt-3")
        restored = tf.Variable(0.0, dtype=tf.float64)
        tf.train.Checkpoint(v1=restored).read(str(tmp_path / "ckpt-3")).expect_partial()
        assert restored.numpy() == 2.0


def test_a_refused_save_on_s3_leaves_no_parts(tmp_path):
    """On s3:// TensorFlow writes a sharded save's parts as ``<path>.part-*`` next to the
    checkpoints, not in ``<path>_temp`` (functional_saver's sharded suffix): those of a
    refused save are deleted too, and nothing of another checkpoint."""
    logdir = tmp_path / "run[1]"  # glob's special characters, taken literally
    logdir.mkdir()
    with context.eager_mode():
        variable = tf.Variable(tf.ones([3]))
        for name in ("ckpt-2", "ckpt-20"):  # the parts of two saves: only ckpt-2 is refused
            tf.raw_ops.SaveV2(prefix=str(logdir / f"{name}.part-00000-of-00001"),
                              tensor_names=["v"], shape_and_slices=[""],
                              tensors=[variable.read_value()])
        kept = str(logdir / "ckpt-20")
        tf.train.Checkpoint(v=variable).write(kept)
        before = sorted(os.listdir(logdir))
        assert [n for n in before if n.startswith("ckpt-2.part-")]
        finite.remove_refused_save(str(logdir / "ckpt-2"))
        assert sorted(os.listdir(logdir)) == [n for n in before
                                              if not n.startswith("ckpt-2.part-")]


def test_the_check_of_a_snapshot_is_the_fused_check_traced_once_per_structure():
    """The check of a snapshot's copies: a reduction per float variable (the int step is not
    checked), named after the variables, in one traced function per structure of the copies,
    which copies of other variables of the same dtypes and shapes reuse."""
    with context.eager_mode():
        variables = [tf.Variable(tf.zeros([4]), name=f"layer{i}") for i in range(3)]
        snapshot = Snapshot({"layers": variables, "steps": tf.Variable(0)})
        assert snapshot.copy()
        _, check = snapshot.write_function(variables)
        assert check.names == ["layer0", "layer1", "layer2"] and check.run() == []
        function = finite.copies_flags(snapshot.copies_of(variables))
        sums = [op for op in function.graph.get_operations() if op.type == "Sum"]
        assert len(sums) == 3
        assert finite.copies_flags([tf.ones([4])] * 3) is function
        snapshot.release()


def test_scalar_watch_reports_the_summary_that_went_bad_first():
    watch = ScalarWatch()
    watch.observe(10, {"loss": 1.0, "acc": 0.5})
    watch.observe(12, {"loss": float("inf"), "acc": 0.5})
    watch.observe(13, {"loss": float("nan"), "acc": float("nan")})
    bad = watch.non_finite()
    assert [(s.tag, s.since) for s in bad] == [("loss", 12), ("acc", 13)]
    assert np.isnan(bad[0].value)
    watch.observe(14, {"acc": 0.7})
    assert [s.tag for s in watch.non_finite()] == ["loss"]
    before = watch.generation
    watch.clear()
    assert watch.non_finite() == []
    watch.observe(15, {"loss": float("nan")}, generation=before)  # computed before the clear
    assert watch.non_finite() == []


@pytest.mark.parametrize("on_nan,max_rollbacks,message", [
    ("skip", 3, "Invalid value for argument `on_nan`. Received: on_nan='skip'. Expected one of "
                "'stop', 'rollback', 'ignore'."),
    ("rollback", 0, "Invalid value for argument `max_rollbacks`. Received: max_rollbacks=0. "
                    "Expected an integer >= 1."),
])
def test_bad_policy_is_refused(tmp_path, on_nan, max_rollbacks, message):
    model = diverging_model()
    with pytest.raises(ValueError, match=re.escape(message)):
        make_supervisor(model, tmp_path, on_nan=on_nan, max_rollbacks=max_rollbacks)
    assert not model.graph.finalized


# ------------------------------------------------------------------------------ stop mode

def test_a_diverged_run_stops_with_its_good_checkpoints_kept(tmp_path, caplog):
    """Checkpoints every 5 steps, 3 kept. The loss summary is +inf from step 16: the save at
    step 20 is refused, the run stops, and 5, 10, 15 are still there, all finite."""
    model = diverging_model()
    sv = make_supervisor(model, tmp_path)
    recorder = Recorder()
    sv.add_listener(recorder)
    with caplog.at_level(logging.ERROR, logger=LOGGER), \
            pytest.raises(finite.NonFiniteError) as raised:
        with sv.managed_session() as sess:
            while not sv.should_stop():
                if train_step(model, sess, sv) % 5 == 0:
                    sv.save_checkpoint(sess)
    error = raised.value
    newest = os.path.join(str(tmp_path), "model.ckpt-15")
    assert error.step == 20 and error.newest_good == newest
    assert str(error) == (
        f"Training diverged at step 20: summary 'loss' is +inf since step {LOSS_INF_STEP}. "
        "This checkpoint was not written and the run stopped. Nothing was saved for this step "
        f"and no checkpoint was removed: the newest good checkpoint is {newest}. Lower the "
        "learning rate (or clip the gradients), then resume from that checkpoint: re-run the "
        "cell, or `%supervise resume`.")
    assert tf.train.latest_checkpoint(str(tmp_path)) == newest
    assert listed_steps(tmp_path) == file_steps(tmp_path) == [5, 10, 15]
    assert_every_checkpoint_finite(tmp_path)
    assert [e.step for e in recorder.of(events.CheckpointSaved)] == [5, 10, 15]
    sv.flush_events(DEADLINE)
    stopped = recorder.of(events.Stopped)[-1]
    assert stopped.reason == events.ERROR and stopped.exception is error
    assert str(error) in caplog.text  # the logger says it too
    assert not glob.glob(os.path.join(str(tmp_path), "*tempstate*"))


@pytest.mark.parametrize("sharded", [False, True], ids=["plain", "sharded"])
def test_without_summaries_the_variables_are_named(tmp_path, sharded):
    """Only the guard sees the bad variable: the refused save writes nothing, whether the
    check ran before the write (plain Saver) or beside it (sharded: the merge is refused)."""
    model = diverging_model(summaries=False)
    sv = make_supervisor(model, tmp_path, sharded=sharded)
    with pytest.raises(finite.NonFiniteError) as raised:
        with sv.managed_session() as sess:
            while not sv.should_stop():
                if train_step(model, sess, sv) % 5 == 0:
                    sv.save_checkpoint(sess)
    # w is finite at step 30 (2^122) and infinite from step 32 on.
    assert raised.value.step == 35
    assert "variable 'w' holds NaN or infinite values" in str(raised.value)
    assert listed_steps(tmp_path) == file_steps(tmp_path) == [20, 25, 30]
    assert_every_checkpoint_finite(tmp_path)
    assert not leftovers(tmp_path)


@pytest.mark.parametrize("sharded", [False, True], ids=["plain", "sharded"])
def test_the_final_checkpoint_is_checked_too(tmp_path, sharded):
    """A clean end (the block returns) after the divergence writes no final checkpoint."""
    model = diverging_model(summaries=False)
    sv = make_supervisor(model, tmp_path, sharded=sharded)
    with pytest.raises(finite.NonFiniteError) as raised:
        with sv.managed_session() as sess:
            for _ in range(10):
                train_step(model, sess, sv)
            sv.save_checkpoint(sess)
            for _ in range(30):
                train_step(model, sess, sv)
    assert raised.value.step == 40
    assert "The final checkpoint was not written" in str(raised.value)
    assert listed_steps(tmp_path) == file_steps(tmp_path) == [10]
    assert not leftovers(tmp_path)


def test_the_periodic_service_refuses_and_stops_the_run(tmp_path):
    """The checkpoint service (every 50 ms) meets the divergence: the run stops by itself."""
    model = diverging_model()
    sv = make_supervisor(model, tmp_path, save_model_secs=0.05, save_summaries_secs=0.05)
    recorder = Recorder()
    sv.add_listener(recorder)
    deadline = time.monotonic() + DEADLINE
    with pytest.raises(finite.NonFiniteError) as raised:
        with sv.managed_session() as sess:
            while not recorder.of(events.CheckpointSaved):  # the one at start, of step 0
                assert time.monotonic() < deadline, "no checkpoint at start"
                sv.flush_events(DEADLINE)
            while not sv.should_stop():
                assert time.monotonic() < deadline, "the run did not stop"
                sess.run(model.step_after)
    error = raised.value
    assert error.newest_good == tf.train.latest_checkpoint(str(tmp_path))
    assert f"the newest good checkpoint is {error.newest_good}." in str(error)
    assert_every_checkpoint_finite(tmp_path)
    sv.flush_events(DEADLINE)
    saved = [e.step for e in recorder.of(events.CheckpointSaved)]
    assert saved and max(saved) < W_INF_STEP + 1 and error.step > max(saved)


def test_save_checkpoint_from_another_thread_is_refused_and_stops_the_run(tmp_path):
    """The Save button's path: a save asked from another thread while the model is NaN."""
    model = diverging_model(summaries=False)
    sv = make_supervisor(model, tmp_path)
    outcome = {}
    with pytest.raises(finite.NonFiniteError):
        with sv.managed_session() as sess:
            sv.save_checkpoint(sess)
            for _ in range(40):
                train_step(model, sess, sv)

            def save():
                try:
                    sv.save_checkpoint(sess)
                except finite.NonFiniteError as e:
                    outcome["error"] = e
            saver = threading.Thread(target=save)
            saver.start()
            saver.join(DEADLINE)
            assert sv.should_stop()
    assert outcome["error"].step == 40
    assert listed_steps(tmp_path) == [0]


# -------------------------------------------------------------------------- rollback mode

def bad_batch_body(model, sv, sess, poison_at, poison_times, stop_at, steps_seen):
    """Trains with a checkpoint every 10 steps; the batch of step ``poison_at`` is bad (NaN)
    the first ``poison_times`` times that step is trained. Returns the steps whose save wrote
    nothing (a rollback is then made at the next should_stop())."""
    refused = []
    poisoned = 0
    deadline = time.monotonic() + DEADLINE
    while not sv.should_stop():
        assert time.monotonic() < deadline, "the run did not end"
        next_step = sv.read_global_step(sess) + 1
        feed = None
        if next_step == poison_at and poisoned < poison_times:
            poisoned += 1
            feed = {model.bad: np.nan}
        step = train_step(model, sess, sv, feed)
        steps_seen.append(step)
        if step % 10 == 0:
            try:
                if sv.save_checkpoint(sess) is None:
                    refused.append(step)
            except finite.NonFiniteError:
                refused.append(step)  # no rollback left: the run stops
                raise
        if step >= stop_at:
            sv.request_stop()
    return refused


def test_rollback_restores_the_newest_good_checkpoint_and_goes_on(tmp_path, caplog):
    model = diverging_model(lr=0.01)
    sv = make_supervisor(model, tmp_path, on_nan=finite.ROLLBACK)
    recorder = Recorder()
    sv.add_listener(recorder)
    steps = []
    with caplog.at_level(logging.WARNING, logger=LOGGER), sv.managed_session() as sess:
        refused = bad_batch_body(model, sv, sess, poison_at=25, poison_times=1, stop_at=50,
                                 steps_seen=steps)
        final_w = sess.run(model.w)
    assert refused == [30]
    newest = os.path.join(str(tmp_path), "model.ckpt-20")
    # It went on from step 20: steps 21..30 were trained twice, and it ended at 50.
    assert steps == list(range(1, 31)) + list(range(21, 51))
    assert np.all(np.isfinite(final_w))
    assert listed_steps(tmp_path) == [30, 40, 50]
    assert_every_checkpoint_finite(tmp_path)
    sv.flush_events(DEADLINE)
    (rolled,) = recorder.of(events.RolledBack)
    assert (rolled.step, rolled.restored_step, rolled.path, rolled.count, rolled.limit) == (
        30, 20, newest, 1, 3)
    assert "summary 'loss' is NaN since step 25" in rolled.problem
    assert recorder.of(events.Stopped)[-1].reason == events.REQUESTED
    assert any("Rolled back to " + newest in r.getMessage() for r in caplog.records)
    # In the event file, as a restart after the restored step (TensorBoard drops the bad points).
    starts = [(e.step, e.session_log.msg) for e in session_logs(tmp_path)
              if e.session_log.status == v1.SessionLog.START]
    assert len(starts) == 2 and starts[1][0] == 21 and "rollback 1 of 3" in starts[1][1]


def test_rollback_stops_after_max_rollbacks(tmp_path):
    """The bad batch comes back every time step 25 is trained: 2 rollbacks, then a stop."""
    model = diverging_model(lr=0.01)
    sv = make_supervisor(model, tmp_path, on_nan=finite.ROLLBACK, max_rollbacks=2)
    recorder = Recorder()
    sv.add_listener(recorder)
    steps = []
    with pytest.raises(finite.NonFiniteError) as raised:
        with sv.managed_session() as sess:
            bad_batch_body(model, sv, sess, poison_at=25, poison_times=100, stop_at=50,
                           steps_seen=steps)
    error = raised.value
    newest = os.path.join(str(tmp_path), "model.ckpt-20")
    assert error.step == 30 and error.newest_good == newest
    assert str(error).startswith(
        "Training diverged at step 30 again after 2 rollbacks to the newest good checkpoint: "
        "summary 'loss' is NaN since step 25")
    assert steps == list(range(1, 31)) * 1 + list(range(21, 31)) * 2
    assert listed_steps(tmp_path) == [10, 20]
    assert_every_checkpoint_finite(tmp_path)
    sv.flush_events(DEADLINE)
    assert [e.count for e in recorder.of(events.RolledBack)] == [1, 2]


def test_a_rollback_does_not_write_the_restored_step_again(tmp_path):
    """Stopped right after a rollback, at the restored step: the final checkpoint is not
    written, since the newest one holds that step (the rollback says so: step 20 was saved
    by the Saver itself, which the Supervisor does not see); its files are not touched."""
    model = diverging_model(lr=0.01)
    sv = make_supervisor(model, tmp_path, on_nan=finite.ROLLBACK)
    recorder = Recorder()
    sv.add_listener(recorder)
    index = os.path.join(str(tmp_path), "model.ckpt-20.index")
    with sv.managed_session() as sess:
        for _ in range(30):
            bad = sv.read_global_step(sess) + 1 == 25
            step = train_step(model, sess, sv, {model.bad: np.nan} if bad else None)
            if step == 20:
                sv.saver.save(sess, sv.save_path, global_step=step)
            elif step % 10 == 0:
                sv.save_checkpoint(sess)
        written = os.stat(index).st_mtime_ns
        assert not sv.should_stop()  # rolls back, at the training thread's step boundary
        assert sv.read_global_step(sess) == 20
        sv.request_stop()
    sv.flush_events(DEADLINE)
    assert [(e.step, e.restored_step) for e in recorder.of(events.RolledBack)] == [(30, 20)]
    assert [e.step for e in recorder.of(events.CheckpointSaved)] == [10]
    assert os.stat(index).st_mtime_ns == written
    assert listed_steps(tmp_path) == [10, 20]


# ----------------------------------------------------------------- a run that never diverges

@pytest.mark.parametrize("on_nan", [finite.STOP, finite.ROLLBACK, finite.IGNORE])
def test_a_healthy_run_writes_the_same_checkpoints_in_every_mode(tmp_path, on_nan):
    """'ignore' is the code path of before the check; the others write exactly the same."""
    model = diverging_model(lr=0.01)
    sv = make_supervisor(model, tmp_path, keep=3, on_nan=on_nan)
    recorder = Recorder()
    sv.add_listener(recorder)
    with sv.managed_session() as sess:
        sv.save_checkpoint(sess)
        for _ in range(47):
            if train_step(model, sess, sv) % 10 == 0:
                sv.save_checkpoint(sess)
    sv.flush_events(DEADLINE)
    assert [e.step for e in recorder.of(events.CheckpointSaved)] == [0, 10, 20, 30, 40, 47]
    assert listed_steps(tmp_path) == file_steps(tmp_path) == [30, 40, 47]
    checked = bool(model.graph.get_collection("jupyter_supervisor_finite_flags"))
    assert checked == (on_nan != finite.IGNORE)


def test_ignore_saves_the_diverged_model_as_tensorflow_does(tmp_path):
    model = diverging_model(summaries=False)
    sv = make_supervisor(model, tmp_path, on_nan=finite.IGNORE)
    with sv.managed_session() as sess:
        for _ in range(40):
            if train_step(model, sess, sv) % 10 == 0:
                sv.save_checkpoint(sess)
    assert listed_steps(tmp_path) == [20, 30, 40]
    reader = tf.train.load_checkpoint(os.path.join(str(tmp_path), "model.ckpt-40"))
    assert not np.all(np.isfinite(reader.get_tensor("w")))


@pytest.mark.parametrize("sharded", [False, True], ids=["plain", "sharded"])
def test_the_guard_checks_exactly_what_the_saver_writes(tmp_path, sharded):
    """guard_saver: a save of a NaN model writes nothing under the checkpoint's name and
    leaves the state file alone, in the Saver's own session run (no window between a check
    and the write). A plain Saver writes under the final name: the check goes before the
    write. A sharded one merges its parts under it: the check gates the merge and starts with
    the write (once the tensors are read), so it costs the save no time."""
    model = diverging_model(summaries=False)
    with model.graph.as_default():
        v1.get_variable("best_loss", initializer=np.inf, trainable=False)
        saver = v1.train.Saver(sharded=sharded)
        assert saver_guard.guard_saver(saver, model.graph, ["w"]) == {"w"}
        assert saver_guard.guard_saver(saver, model.graph, ["w"]) == {"w"}  # not guarded twice
        guards = guard_ops(model.graph)
        poison = v1.assign(model.w, [np.nan, 1.0, 1.0])
        init = v1.global_variables_initializer()
    assert len(guards) == 1
    gated = [op for op in model.graph.get_operations()
             if guards[0] in op.control_inputs]
    assert [op.type for op in gated] == ["MergeV2Checkpoints" if sharded else "SaveV2"]
    checks = {op.type for op in _upstream(guards[0]) | {guards[0]}} & {"Assert", "CheckNumerics"}
    if sharded:  # beside the write: the check waits for what the write waits for, no more
        save = next(op for op in model.graph.get_operations() if op.type == "SaveV2")
        assert save not in _upstream(guards[0]) and guards[0] not in _upstream(save)
        assert checks == {"CheckNumerics"}  # one core, gently (see saver_guard._one_by_one)
    else:
        assert checks == {"Assert"}  # before the write: the fast reduction
    prefix = os.path.join(str(tmp_path), "model.ckpt")
    with v1.Session(graph=model.graph) as sess:
        sess.run(init)
        saver.save(sess, prefix, global_step=1)  # best_loss is +inf, and not checked
        assert np.isinf(tf.train.load_checkpoint(prefix + "-1").get_tensor("best_loss"))
        state = (tmp_path / "checkpoint").read_bytes()
        sess.run(poison)
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            saver.save(sess, prefix, global_step=2)
    assert finite.is_guard_failure(raised.value)
    assert file_steps(tmp_path) == [1] and (tmp_path / "checkpoint").read_bytes() == state
    finite.remove_refused_save(prefix + "-2")
    assert not [name for name in os.listdir(tmp_path) if "-2" in name]


def test_every_shard_of_a_sharded_saver_is_guarded(tmp_path):
    """Variables on two devices: one SaveV2 per device, both gating the one merge; a NaN in
    either is refused (a guard named after one SaveV2 must not pass for the other's)."""
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/cpu:0"):
            first = v1.get_variable("a", initializer=[1.0, 2.0])
        with tf.device("/cpu:1"):
            second = v1.get_variable("b", initializer=[3.0])
        saver = v1.train.Saver(sharded=True)
        assert saver_guard.guard_saver(saver, graph, ["a", "b"]) == {"a", "b"}
        poison = {v: v1.assign(v, tf.fill(tf.shape(v), np.nan)) for v in (first, second)}
        init = v1.global_variables_initializer()
    assert len([op for op in graph.get_operations() if op.type == "SaveV2"]) == 2
    assert len(guard_ops(graph)) == 2
    prefix = os.path.join(str(tmp_path), "model.ckpt")
    for step, bad in enumerate((first, second)):
        with v1.Session(graph=graph, config=v1.ConfigProto(device_count={"CPU": 2})) as sess:
            sess.run(init)
            saver.save(sess, prefix, global_step=10 + step)  # finite: written
            sess.run(poison[bad])
            with pytest.raises(tf.errors.InvalidArgumentError) as raised:
                saver.save(sess, prefix, global_step=20 + step)
        assert finite.is_guard_failure(raised.value), bad.name
        finite.remove_refused_save(f"{prefix}-{20 + step}")
    assert file_steps(tmp_path) == [10, 11] and not leftovers(tmp_path)


def guard_ops(graph):
    """The ops guard_saver made to gate a Saver's write or merge, each once."""
    gates = [op for op in graph.get_operations() if op.type in ("SaveV2", "MergeV2Checkpoints")]
    return list({guard.name: guard for gate in gates for guard in gate.control_inputs
                 if guard.name.startswith("jupyter_supervisor_finite_guard/")}.values())


def _upstream(op):
    """Every op ``op`` waits for (inputs and control inputs, transitively)."""
    seen, todo = set(), [op]
    while todo:
        after = todo.pop()
        for before in [t.op for t in after.inputs] + list(after.control_inputs):
            if before not in seen:
                seen.add(before)
                todo.append(before)
    return seen


def test_the_supervisors_saver_is_sharded_where_that_writes_the_same_files():
    """Its default Saver (and the magic's) is sharded, so that its guard checks beside the
    write; with variables placed on a cluster's tasks it stays plain (a sharded Saver would
    have every task write its own part on its own machine)."""
    model = diverging_model(summaries=False)
    with model.graph.as_default():
        local = Supervisor(graph=model.graph, logdir=None)
    assert local.saver.saver_def.sharded
    assert saver_guard.sharded_where_plain_writes(model.graph.get_collection("variables"))
    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0"):
            placed = v1.get_variable("w", initializer=1.0)
    assert not saver_guard.sharded_where_plain_writes([placed])


# ---------------------------------------------------------------------- through %%supervise



@pytest.fixture
def diverging(ip):
    """The diverging model (w scalar, lr 8.5) on a graph of its own, bound in the shell."""
    from jupyter_supervisor.notebook import run as run_module  # pylint: disable=import-outside-toplevel
    with tf.Graph().as_default() as graph:
        gs = v1.train.get_or_create_global_step()
        w = v1.get_variable("w", initializer=5.0)
        loss = tf.square(w - 1.0)
        v1.summary.scalar("loss", loss)
        train_op = v1.train.GradientDescentOptimizer(DIVERGING_LR).minimize(loss, global_step=gs)
        ip.user_ns.update(train_op=train_op, tf=tf)
        yield graph
        late = run_module.stop_all(timeout=DEADLINE)
        assert not late, f"runs did not stop: {late}"


# The body waits (on the Coordinator's event, with a timeout) for the checkpoint written at
# start, so that there is a good checkpoint before the divergence, then trains.
BODY = """\
while tf.train.latest_checkpoint(LOGDIR) is None and not sv.coord.wait_for_stop(0.01):
    pass
while not sv.should_stop():
    sess.run(train_op)
"""


def test_magic_stops_a_diverged_run_and_names_the_newest_good_checkpoint(ip, diverging,
                                                                          tmp_path):
    import jupyter_supervisor  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.notebook.magics import RunFailedError  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.view import text  # pylint: disable=import-outside-toplevel
    logdir = str(tmp_path / "diverged")
    ip.user_ns["LOGDIR"] = logdir
    with pytest.raises(RunFailedError) as raised:
        ip.run_cell_magic("supervise", f"--logdir {logdir} --save-model-secs 0.05 "
                                       "--save-summaries-secs 0.05 --wait", BODY)
    run = raised.value.run
    assert run is jupyter_supervisor.get_run("diverged") and run.status == "failed"
    assert isinstance(run.exception, finite.NonFiniteError)
    newest = tf.train.latest_checkpoint(logdir)
    assert newest and run.exception.newest_good == newest
    line = run.error_line
    assert re.fullmatch(
        r"NonFiniteError: Training diverged at step \d+: .*(NaN|inf).*\. This "
        r"checkpoint was not written and the run stopped\. Nothing was saved for this step and "
        r"no checkpoint was removed: the newest good checkpoint is " + re.escape(newest)
        + r"\. Lower the learning rate \(or clip the gradients\), then resume from that "
        r"checkpoint: re-run the cell, or `%supervise resume`\.", line), line
    assert_every_checkpoint_finite(logdir)
    # The panel shows it as the run's error, with the good checkpoint named.
    text = text.text_summary(run)
    assert "error:" in text and newest in text.split("error:", 1)[1]
    assert f"Checkpoint: step {run.exception.newest_good.rsplit('-', 1)[1]} at " in text


def test_magic_rollback_restores_then_stops_after_max_rollbacks(ip, diverging, tmp_path):
    from jupyter_supervisor.notebook.magics import RunFailedError  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.view import text  # pylint: disable=import-outside-toplevel
    logdir = str(tmp_path / "rolling")
    ip.user_ns["LOGDIR"] = logdir
    with pytest.raises(RunFailedError) as raised:
        ip.run_cell_magic("supervise", f"--logdir {logdir} --save-model-secs 0.05 "
                                       "--save-summaries-secs 0.05 --on-nan rollback "
                                       "--max-rollbacks 2 --wait", BODY)
    run = raised.value.run
    assert run.status == "failed" and isinstance(run.exception, finite.NonFiniteError)
    assert " again after 2 rollbacks to the newest good checkpoint: " in run.error_line
    snap = run.history.snapshot()
    assert [r.count for r in snap.rollbacks] == [1, 2]
    for rollback in snap.rollbacks:  # (a checkpoint written while training may hold a step
        # or two more than its name says, as with TensorFlow's Supervisor)
        stored = tf.train.load_checkpoint(rollback.path).get_tensor("global_step")
        assert rollback.restored_step == int(stored)
    assert "Rolled back 2 times (at most 2); last: not finite at step" in text.text_summary(run)
    assert_every_checkpoint_finite(logdir)
    messages = [e.session_log.msg for e in session_logs(logdir)
                if e.session_log.status == v1.SessionLog.START and e.session_log.msg]
    assert len(messages) == 2 and all("Rolled back to " in m for m in messages)


def test_magic_help_documents_the_three_modes(ip):
    from jupyter_supervisor.notebook.magics import SuperviseMagics  # pylint: disable=import-outside-toplevel
    doc = SuperviseMagics.supervise_cell.__doc__
    assert "--on-nan ACTION" in doc and "--max-rollbacks N" in doc
    for mode in ("'stop'", "'rollback'", "'ignore'"):
        assert mode in doc


# ------------------------------------------------------------------- history and panel (no TF)

def test_history_shows_a_rollback_as_a_restart_from_the_checkpoint():
    from jupyter_supervisor.view import history, text  # pylint: disable=import-outside-toplevel
    h = history.RunHistory(clock=lambda: 0.0)
    h.on_event(events.SessionReady(0, None, True, 0.0))
    for step in range(0, 60, 10):
        h.on_event(events.SummaryWritten(step, {"loss": 1.0 if step < 40 else float("nan")}, 0.0))
    h.on_event(events.RolledBack(50, 30, "/x/model.ckpt-30", "summary 'loss' is NaN since step 40",
                                 1, 3, 0.0))
    snap = h.snapshot()
    assert snap.step == 30
    assert list(snap.scalars["loss"].steps) == [0, 10, 20, 30]  # the diverged ones dropped
    assert [(r.step, r.restored_step, r.count) for r in snap.rollbacks] == [(50, 30, 1)]
    assert text.rollbacks_text(snap.rollbacks) == (
        "Rolled back once (at most 3); last: not finite at step 50 (summary 'loss' is NaN "
        "since step 40), restored model.ckpt-30 (step 30).")
    h.on_event(events.SessionReady(30, "/x/model.ckpt-30", True, 0.0))
    assert h.snapshot().rollbacks == ()  # counted per session, as the Supervisor counts them


def test_a_non_trainable_variable_may_hold_inf(tmp_path):
    """Only the trainable variables are checked: a "best loss so far" starting at +inf (not
    trainable) is saved as it is."""
    model = diverging_model(lr=0.01, summaries=False)
    with model.graph.as_default():
        v1.get_variable("best_loss", initializer=np.inf, trainable=False)
    sv = make_supervisor(model, tmp_path)
    with sv.managed_session() as sess:
        for _ in range(10):
            train_step(model, sess, sv)
        assert sv.save_checkpoint(sess).endswith("model.ckpt-10")
    reader = tf.train.load_checkpoint(os.path.join(str(tmp_path), "model.ckpt-10"))
    assert np.isinf(reader.get_tensor("best_loss"))


# ------------------------------------------------------------------------------ the policy

def test_policy_rolls_back_while_rollbacks_are_left_then_stops():
    """finite.Policy decides, counts and words what a refused checkpoint leads to; the
    backends only restore what it names (their rollbacks are tested above and in
    test_eager_finite.py)."""
    hub = events.EventHub()
    records = []
    hub.add_listener(records.append)
    policy = finite.Policy(finite.ROLLBACK, max_rollbacks=2)
    for count in (1, 2):
        rollback = policy.refused(10 * count, "summary 'loss' is NaN", "ckpt-5", final=False)
        assert policy.pending == rollback and policy.take() == rollback
        assert policy.pending is None and policy.take() is None
        policy.rolled_back(rollback, 5, None, hub)
        assert policy.rollbacks == count
    with pytest.raises(finite.NonFiniteError, match="again after 2 rollbacks") as raised:
        policy.refused(30, "summary 'loss' is NaN", "ckpt-5", final=False)
    assert (raised.value.step, raised.value.newest_good) == (30, "ckpt-5")
    assert hub.flush(10)
    assert [(r.step, r.restored_step, r.count) for r in records] == [(10, 5, 1), (20, 5, 2)]


@pytest.mark.parametrize("on_nan, final, newest", [(finite.STOP, False, "ckpt-5"),
                                                   (finite.ROLLBACK, True, "ckpt-5"),
                                                   (finite.ROLLBACK, False, None)])
def test_policy_stops_when_it_cannot_roll_back(on_nan, final, newest):
    policy = finite.Policy(on_nan)
    with pytest.raises(finite.NonFiniteError, match="Training diverged at step 7"):
        policy.refused(7, "variable 'w' holds NaN or infinite values", newest, final=final)
    assert policy.pending is None and policy.rollbacks == 0
