"""A diverged eager run never checkpoints a non-finite model (issue 15), with real Keras models.

The same promises as the graph Supervisor (test_finite.py): ``on_nan="stop"`` refuses the save
and names the newest good checkpoint; ``"rollback"`` restores it (model, optimizer, global step)
at the step boundary where the save was due and goes on, at most ``max_rollbacks`` times; a run
that never diverges writes exactly the checkpoints it always wrote. A bad batch (a NaN input) at
a known step makes the divergence exact; the body saves at fixed steps where the step matters.
"""
import glob
import os
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader

from eager_models import data, make_model
from jupyter_supervisor import events, finite
from jupyter_supervisor.checkpoints import checkpoint_paths
from jupyter_supervisor.names import checkpoint_step
from jupyter_supervisor.eager.snapshot import Snapshot
from jupyter_supervisor.eager.writer import CheckpointWriter, Refusal

from helpers import Recorder, wait_for

DEADLINE = 60.0   # seconds; never reached when passing
EVERY_STEP = 1e-9  # save_model_secs that makes every step boundary save


def loop_setup():
    """A seeded linear model trained by SGD on one fixed batch; ``train_step(bad)`` with
    ``bad=True`` feeds a NaN input (its gradient makes the weights NaN)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.01)
    x, y = data()

    @tf.function
    def train_step(scale):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x * scale) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        return loss
    return model, opt, lambda bad=False: train_step(tf.constant(np.nan if bad else 1.0))


def bad_batch_body(sv, train_step, poison_at, poison_times, stop_at):
    """Trains with a checkpoint every 10 steps (sv.save_now() in the body); the batch of step
    ``poison_at`` is bad the first ``poison_times`` times that step is trained. Returns the
    steps trained in order and the steps whose save wrote nothing."""
    steps, refused, poisoned = [], [], 0
    while not sv.should_stop():
        assert len(steps) < 1000, "the run did not end"
        bad = sv.read_step() + 1 == poison_at and poisoned < poison_times
        poisoned += bad
        step = sv.step(loss=train_step(bad))
        steps.append(step)
        if step % 10 == 0:
            try:
                if sv.save_now() is None:
                    refused.append(step)
            except finite.NonFiniteError:
                refused.append(step)
                raise
            finally:
                steps.append(("saved", step))
        if sv.read_step() >= stop_at:
            sv.request_stop()
    return [s for s in steps if not isinstance(s, tuple)], refused


def assert_every_checkpoint_finite(logdir):
    paths = sorted(p[:-len(".index")] for p in glob.glob(os.path.join(str(logdir),
                                                                       "model.ckpt-*.index")))
    assert paths, "no checkpoint at all"
    for path in paths:
        reader = tf.train.load_checkpoint(path)
        for key, dtype in reader.get_variable_to_dtype_map().items():
            if dtype.is_floating:
                assert np.all(np.isfinite(reader.get_tensor(key))), (path, key)


def file_steps(logdir):
    return sorted(checkpoint_step(p[:-len(".index")])
                  for p in glob.glob(os.path.join(str(logdir), "model.ckpt-*.index")))


def start_logs(logdir):
    found = []
    for path in glob.glob(os.path.join(str(logdir), "events.out.tfevents.*")):
        found.extend(e for e in event_file_loader.LegacyEventFileLoader(path).Load()
                     if e.WhichOneof("what") == "session_log"
                     and e.session_log.status == tf.compat.v1.SessionLog.START)
    return sorted(((e.step, e.session_log.msg) for e in found), key=lambda s: s[0])


# ------------------------------------------------------------------------------ custom loops

def test_a_verdict_is_the_same_whichever_thread_decides_it():
    """Refusal: the writer thread learns the verdict from its guarded write; the
    training thread, when it asks first (the write still running), checks the same copies
    itself. Both give the same answer; a write refused while the check finds every variable
    finite is an error of the check, not a pass."""
    weights = tf.Variable(tf.ones([10]), name="dense/kernel")
    check = finite.VariableCheck.eager([weights, tf.Variable(0)])
    assert Refusal(5, check).decide().variables == []
    passed = Refusal(5, check)
    passed.written(True)
    assert not passed.decide().refused
    weights.assign(tf.fill([10], np.nan))
    assert Refusal(6, check).decide().variables == ["dense/kernel"]  # asked first
    refused = Refusal(6, check)
    refused.written(False)
    assert refused.decide().variables == ["dense/kernel"] and refused.error is None
    weights.assign(tf.ones([10]))
    odd = Refusal(7, check)
    odd.written(False)
    assert odd.decide().refused
    assert "refused as not finite, but no checked variable" in str(odd.error)


def test_while_the_write_runs_its_verdict_is_not_known(tmp_path, monkeypatch):
    """CheckpointWriter: while a checked save's write runs, its verdict is pending but not
    known, so the training thread's step boundaries go on without checking the copies
    themselves (a fused check on every core); once the write ended it is known, and taking it
    runs a check only to name what a refused write held. (The write is held back: the real
    one, started once an event is set.)"""
    weights = tf.Variable(tf.ones([10]), name="dense/kernel")
    writer = CheckpointWriter({"w": weights}, str(tmp_path), "ckpt", keep=2,
                                     existing=[], checked=[weights])
    release = threading.Event()
    write_function = Snapshot.write_function

    def held(self, checked):
        write, check = write_function(self, checked)

        def held_write(path):
            assert release.wait(DEADLINE)
            return write(path)
        return held_write, check

    monkeypatch.setattr(Snapshot, "write_function", held)
    runs = []
    run = finite.VariableCheck.run
    monkeypatch.setattr(finite.VariableCheck, "run",
                        lambda self, *sess: runs.append(self.names) or run(self, *sess))
    writer.save(1)
    assert writer.verdict_pending and not writer.verdict_known
    release.set()
    assert writer.wait(DEADLINE)
    assert writer.verdict_known
    assert not writer.verdict().refused and runs == []
    assert not writer.verdict_pending and not writer.verdict_known

    weights.assign(tf.fill([10], np.nan))
    writer.save(2)
    assert writer.wait(DEADLINE)
    assert writer.verdict_known
    assert writer.verdict().variables == ["dense/kernel"] and runs == [["dense/kernel"]]
    assert [checkpoint_step(p) for p in writer.kept] == [1]


def test_rollback_restores_the_newest_good_checkpoint_and_goes_on(tmp_path, backends):
    model, opt, train_step = loop_setup()
    sv = backends(tmp_path, save_model_secs=0, keep=3, on_nan=finite.ROLLBACK)
    recorder = Recorder()
    sv.add_listener(recorder)
    with sv.session():
        sv.track(model=model, optimizer=opt)
        steps, refused = bad_batch_body(sv, train_step, poison_at=25, poison_times=1,
                                        stop_at=50)
    assert refused == [30]
    # It went on from step 20: steps 21..30 were trained twice, and it ended at 50.
    assert steps == list(range(1, 31)) + list(range(21, 51))
    assert sv.read_step() == 50 == int(opt.iterations)  # the optimizer was restored too
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [50, 40, 30]
    assert file_steps(tmp_path) == [30, 40, 50]
    assert_every_checkpoint_finite(tmp_path)
    assert sv.flush_events(DEADLINE)
    (rolled,) = recorder.of(events.RolledBack)
    newest = os.path.join(str(tmp_path), "model.ckpt-20")
    assert (rolled.step, rolled.restored_step, rolled.path, rolled.count, rolled.limit) == (
        30, 20, newest, 1, 3)
    assert "summary 'loss' is NaN" in rolled.problem
    assert recorder.of(events.Stopped)[-1].reason == events.REQUESTED
    # In the event file, as a restart after the restored step (TensorBoard drops the bad points).
    starts = start_logs(tmp_path)
    assert len(starts) == 2 and starts[1][0] == 21 and "rollback 1 of 3" in starts[1][1]


def test_a_rollback_keeps_the_learning_rate_training_had_set(tmp_path, backends, caplog):
    """A rate lowered since the checkpoint (by a callback, by the code) is a decision about the
    run, not its state: a rollback to that checkpoint keeps it, and says so."""
    model, opt, train_step = loop_setup()
    sv = backends(tmp_path, save_model_secs=0, on_nan=finite.ROLLBACK)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"), sv.session():
        sv.track(model=model, optimizer=opt)
        for _ in range(10):
            sv.step(loss=train_step())
        assert sv.save_now() is not None                     # step 10, at the rate 0.01
        opt.learning_rate.assign(0.005)
        sv.step(loss=train_step(bad=True))
        assert sv.save_now() is None                         # refused, rolled back to 10
        assert sv.read_step() == 10
    assert float(opt.learning_rate.numpy()) == pytest.approx(0.005)
    newest = os.path.join(str(tmp_path), "model.ckpt-10")
    assert [r.getMessage() for r in caplog.records if "learning rate" in r.getMessage()] == [
        f"The checkpoint {newest} holds the learning rate 0.01 for 'optimizer'; the run keeps "
        "0.005, the rate it had."]


def test_rollback_stops_after_max_rollbacks(tmp_path, backends):
    """The bad batch comes back every time step 25 is trained: 2 rollbacks, then a stop."""
    model, opt, train_step = loop_setup()
    sv = backends(tmp_path, save_model_secs=0, keep=3, on_nan=finite.ROLLBACK, max_rollbacks=2)
    recorder = Recorder()
    sv.add_listener(recorder)
    trained = []
    with pytest.raises(finite.NonFiniteError) as raised:
        with sv.session():
            sv.track(model=model, optimizer=opt)
            trained.append(bad_batch_body(sv, train_step, poison_at=25, poison_times=100,
                                          stop_at=50))
    error = raised.value
    newest = os.path.join(str(tmp_path), "model.ckpt-20")
    assert error.step == 30 and error.newest_good == newest
    assert str(error).startswith(
        "Training diverged at step 30 again after 2 rollbacks to the newest good checkpoint: "
        "summary 'loss' is NaN")
    assert "the newest good checkpoint is " + newest in str(error)
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [20, 10]
    assert file_steps(tmp_path) == [10, 20]
    assert_every_checkpoint_finite(tmp_path)
    assert sv.flush_events(DEADLINE)
    assert [(r.step, r.restored_step, r.count) for r in recorder.of(events.RolledBack)] == [
        (30, 20, 1), (30, 20, 2)]
    assert recorder.of(events.Stopped)[-1].exception is error


def test_a_save_asked_from_another_thread_rolls_back_at_the_next_step(tmp_path, backends):
    """The Save button's path: the training thread serves it at a boundary and rolls back
    there; the caller gets None (nothing was saved)."""
    model, opt, train_step = loop_setup()
    sv = backends(tmp_path, save_model_secs=0, on_nan=finite.ROLLBACK)
    answers, steps, asker = [], [], None
    with sv.session():
        sv.track(model=model, optimizer=opt)
        while not sv.should_stop():
            steps.append(sv.step(loss=train_step()))
            if asker is None and steps[-1] == 10:
                sv.save_now()
                model.layers[0].kernel.assign(tf.fill([4, 1], np.inf))  # diverged, quietly
                asker = threading.Thread(target=lambda: answers.append(sv.save_now(DEADLINE)))
                asker.start()
                # The next boundary serves the save: the thread is then done.
                steps.append(sv.step(loss=train_step()))
                asker.join(DEADLINE)
            if steps[-1] == 15:
                sv.request_stop()
    assert answers == [None]
    # The boundary after step 11 rolled back to step 10, and training went on from there.
    assert steps == list(range(1, 11)) + [10] + list(range(11, 16))
    assert sv.read_step() == 15 == int(opt.iterations)
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [15, 10]
    assert_every_checkpoint_finite(tmp_path)


def quiet_body(sv, train_step, poison_at, stop_at, settle=False):
    """Trains without reporting a loss, so that only the check of the weights can see the
    divergence; the batch of step ``poison_at`` is bad once. Returns the steps trained. With
    ``settle``, each step waits until the write of its save ended, so that the next boundary
    finds its verdict known (else it takes the verdict with its own save, the write running
    or not)."""
    steps, poisoned = [], False
    while not sv.should_stop():
        assert len(steps) < 1000, "the run did not end"
        bad = sv.read_step() + 1 == poison_at and not poisoned
        poisoned = poisoned or bad
        train_step(bad)
        steps.append(sv.step())
        if settle:
            writer = sv._checkpointer.writer  # pylint: disable=protected-access
            wait_for(lambda: not writer.verdict_pending or writer.verdict_known, DEADLINE)
        if steps[-1] >= stop_at:
            sv.request_stop()
    return steps


def weights_problem(model):
    """How the message names a Dense layer's weights (Keras numbers its layers per process)."""
    kernel, bias = (w.path for w in model.trainable_weights)
    return f"variables {kernel!r}, {bias!r} hold NaN or infinite values"


def leftovers(logdir):
    """What a refused or cut-short save may have left: temporary files and directories."""
    return [n for n in os.listdir(str(logdir)) if "_temp" in n or "tempstate" in n]


@pytest.mark.parametrize("async_save", [True, False], ids=["in the writer thread", "before it"])
def test_weights_that_diverge_quietly_are_never_saved(tmp_path, async_save):
    """No loss reported; every step saves. With a snapshot, the writer thread checks the
    snapshot before it writes it: the step-25 save is refused (nothing under its name,
    retention untouched) and the training thread, which did not wait for the check, stops at
    the next boundary naming step 25. Saving synchronously, the check runs before the write;
    the stop is the same."""
    from jupyter_supervisor.config import RunConfig  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.eager import EagerSupervisor  # pylint: disable=import-outside-toplevel
    model, opt, train_step = loop_setup()
    sv = EagerSupervisor(RunConfig(logdir=str(tmp_path), save_model_secs=EVERY_STEP, keep=3,
                                   save_summaries_secs=0), async_save=async_save)
    recorder = Recorder()
    sv.add_listener(recorder)
    try:
        with pytest.raises(finite.NonFiniteError) as raised:
            with sv.session():
                sv.track(model=model, optimizer=opt)
                quiet_body(sv, train_step, poison_at=25, stop_at=50)
    finally:
        sv.close()
    error = raised.value
    newest = os.path.join(str(tmp_path), "model.ckpt-24")
    assert (error.step, error.newest_good) == (25, newest)
    assert str(error).startswith(
        f"Training diverged at step 25: {weights_problem(model)}. This checkpoint was not "
        "written")
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [24, 23, 22]
    assert file_steps(tmp_path) == [22, 23, 24]
    assert_every_checkpoint_finite(tmp_path)
    assert not leftovers(tmp_path)
    assert sv.flush_events(DEADLINE)
    assert max(r.step for r in recorder.of(events.CheckpointSaved)) == 24
    assert recorder.of(events.Stopped)[-1].exception is error


def quiet_rollback(tmp_path, backends, stop_at, settle=False):
    """``quiet_body`` with on_nan="rollback" and a save at every step, poisoned at step 25;
    returns (sv, model, optimizer, the steps trained, the recorder of its events)."""
    model, opt, train_step = loop_setup()
    sv = backends(tmp_path, save_model_secs=EVERY_STEP, keep=3, on_nan=finite.ROLLBACK)
    recorder = Recorder()
    sv.add_listener(recorder)
    with sv.session():
        sv.track(model=model, optimizer=opt)
        steps = quiet_body(sv, train_step, poison_at=25, stop_at=stop_at, settle=settle)
    return sv, model, opt, steps, recorder


@pytest.mark.parametrize("settle", [False, True], ids=["write running", "write ended"])
def test_quiet_weights_roll_back_at_the_next_step(tmp_path, backends, settle):
    """The writer thread's check refuses the step-25 save; its verdict reaches the training
    thread at the next boundary (step 26: one step later, always, since every step saves and a
    save takes the verdict of the one before first), which rolls back to 24, and does not
    write step 24 again: the same, whether that write had ended by then or not."""
    sv, model, opt, steps, recorder = quiet_rollback(tmp_path, backends, stop_at=30,
                                                     settle=settle)
    # The boundary of step 26 rolled back: sv.step() returned 24 there; step 26 was discarded.
    assert steps == list(range(1, 26)) + [24] + list(range(25, 31))
    assert sv.read_step() == 30 == int(opt.iterations)
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [30, 29, 28]
    assert_every_checkpoint_finite(tmp_path)
    assert not leftovers(tmp_path)
    assert sv.flush_events(DEADLINE)
    (rolled,) = recorder.of(events.RolledBack)
    assert (rolled.step, rolled.restored_step, rolled.count) == (25, 24, 1)
    assert rolled.problem == weights_problem(model)
    # Every step saved once; the restored step 24 is not written again after the rollback.
    assert [r.step for r in recorder.of(events.CheckpointSaved)] == list(range(1, 31))


def test_a_refusal_found_as_the_loop_ends_still_rolls_back(tmp_path, backends):
    """The loop stops right after the refused step-25 save: its verdict, taken as the session
    ends, is that of a periodic checkpoint, which rolls back (rollbacks are left); the run ends
    cleanly at the good step 24, with no final checkpoint of the bad model."""
    sv, model, opt, steps, recorder = quiet_rollback(tmp_path, backends, stop_at=25)
    assert steps == list(range(1, 26))
    assert sv.read_step() == 24 == int(opt.iterations)
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [24, 23, 22]
    assert not leftovers(tmp_path)
    assert sv.flush_events(DEADLINE)
    (rolled,) = recorder.of(events.RolledBack)
    assert (rolled.step, rolled.restored_step) == (25, 24)
    stopped = recorder.of(events.Stopped)[-1]
    assert (stopped.reason, stopped.exception) == (events.REQUESTED, None)


@pytest.mark.parametrize("on_nan", [finite.STOP, finite.ROLLBACK, finite.IGNORE])
def test_a_healthy_run_writes_the_same_checkpoints_in_every_mode(tmp_path, backends, on_nan):
    model, opt, train_step = loop_setup()
    sv = backends(tmp_path, save_model_secs=0, keep=3, on_nan=on_nan)
    recorder = Recorder()
    sv.add_listener(recorder)
    with sv.session():
        sv.track(model=model, optimizer=opt)
        while sv.read_step() < 47:
            if sv.step(loss=train_step()) % 10 == 0:
                sv.save_now()
    assert sv.flush_events(DEADLINE)
    assert [r.step for r in recorder.of(events.CheckpointSaved)] == [10, 20, 30, 40, 47]
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [47, 40, 30]
    assert file_steps(tmp_path) == [30, 40, 47]
    assert recorder.of(events.RolledBack) == []


def test_the_final_checkpoint_never_rolls_back(tmp_path, backends):
    """A stop with a diverged model: the final checkpoint is refused, the good ones stay."""
    model, opt, train_step = loop_setup()
    sv = backends(tmp_path, save_model_secs=0, on_nan=finite.ROLLBACK)
    with pytest.raises(finite.NonFiniteError) as raised:
        with sv.session():
            sv.track(model=model, optimizer=opt)
            for step in range(1, 13):
                sv.step(loss=train_step(bad=step == 11))
                if step == 10:
                    sv.save_now()
    assert "The final checkpoint was not written" in str(raised.value)
    assert raised.value.step == 12
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [10]


# --------------------------------------------------------------------------------- Keras fit

def poisoned_dataset(bad_batch, batches=24, batch_size=8):
    """``batches`` batches of the seeded data, one dataset pass for the whole fit (fit with
    steps_per_epoch reads on across epochs), batch ``bad_batch`` (0-based) a NaN input."""
    x, y = data(n=batches * batch_size)
    x = x.copy()
    x[bad_batch * batch_size] = np.nan
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)


def test_fit_rolls_back_past_a_bad_batch_and_finishes(tmp_path, backends):
    model = make_model()
    sv = backends(tmp_path, save_model_secs=EVERY_STEP, keep=3, on_nan=finite.ROLLBACK)
    recorder = Recorder()
    sv.add_listener(recorder)
    with sv.session():
        history = model.fit(poisoned_dataset(bad_batch=10), epochs=3, steps_per_epoch=8,
                            verbose=0, callbacks=[sv.callback])
    assert sv.flush_events(DEADLINE)
    (rolled,) = recorder.of(events.RolledBack)
    # Batch 11 (step 11) made the model NaN; the checkpoint of step 10 came back, and the
    # data went on: 24 batches trained, one of them undone.
    assert (rolled.step, rolled.restored_step) == (11, 10)
    assert rolled.path == os.path.join(str(tmp_path), "model.ckpt-10")
    assert sv.read_step() == 23 == int(model.optimizer.iterations)
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    # The running mean restarted at the rollback: the epoch's loss is finite.
    assert np.isfinite(history.history["loss"]).all()
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [23, 22, 21]
    assert_every_checkpoint_finite(tmp_path)
    assert recorder.of(events.Stopped)[-1].exception is None


def test_fit_stop_mode_keeps_the_good_checkpoints(tmp_path, backends):
    model = make_model()
    sv = backends(tmp_path, save_model_secs=EVERY_STEP, keep=3)
    with pytest.raises(finite.NonFiniteError) as raised:
        with sv.session():
            model.fit(poisoned_dataset(bad_batch=10), epochs=3, steps_per_epoch=8, verbose=0,
                      callbacks=[sv.callback])
    newest = os.path.join(str(tmp_path), "model.ckpt-10")
    assert raised.value.step == 11 and raised.value.newest_good == newest
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [10, 9, 8]
    assert_every_checkpoint_finite(tmp_path)


def test_a_lower_learning_rate_set_for_the_resume_is_kept(tmp_path, backends, caplog):
    """The message's advice, followed: lower the learning rate and resume. A Keras optimizer's
    learning rate is a variable the checkpoint holds; the one set in the notebook wins."""
    model, opt, train_step = loop_setup()
    sv = backends(tmp_path, save_model_secs=0)
    with sv.session():
        sv.track(model=model, optimizer=opt)
        for _ in range(5):
            sv.step(loss=train_step())
    lower = keras.optimizers.SGD(0.001)
    sv2 = backends(tmp_path, save_model_secs=0)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"), sv2.session():
        assert sv2.track(model=model, optimizer=lower) == os.path.join(str(tmp_path),
                                                                        "model.ckpt-5")
        sv2.save_now()
    assert float(lower.learning_rate.numpy()) == pytest.approx(0.001)
    assert int(lower.iterations) == 5  # the rest of the optimizer's state is restored
    assert any(r.getMessage().startswith(
        "The learning rate of 'optimizer' is 0.001, the code's: the checkpoint's run had "
        "reached 0.01 from the 0.01 its code set, and the code (or an assignment) changed it "
        "since.") for r in caplog.records)
    # Saved with the next checkpoint (here of the same step): a later resume finds it.
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path)))
    key = next(k for k in reader.get_variable_to_shape_map() if "learning_rate" in k)
    assert reader.get_tensor(key) == pytest.approx(0.001)
