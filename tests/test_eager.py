"""The eager backend at library level: real small Keras models, real files, real threads."""
import logging
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf
import keras

from eager_models import BATCHES, data, make_model
from jupyter_supervisor import events
from jupyter_supervisor.config import RunConfig
from jupyter_supervisor.checkpoints import checkpoint_paths
from jupyter_supervisor.names import checkpoint_step
from jupyter_supervisor.eager import EagerSupervisor
from jupyter_supervisor.eager.snapshot import Snapshot
from jupyter_supervisor.eager.writer import CheckpointWriter
from jupyter_supervisor.eager.keras_callback import _TrainFunction
from jupyter_supervisor.checkpoints import CheckpointMismatchError, CheckpointWriteError
from jupyter_supervisor.lockfile import LogdirLockedError

from helpers import FakeClock, killed_where_it_paused, wait_for

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)

# Seconds between checkpoints that makes every step boundary save.
EVERY_STEP = 1e-9


class Recorder:
    """A listener keeping every record."""

    def __init__(self, sv):
        self.records = []
        sv.add_listener(self.records.append)

    def of(self, kind):
        return [r for r in self.records if isinstance(r, kind)]


class Probe(keras.callbacks.Callback):
    """Records, after sv.callback, what each batch end sees; optional action at a batch."""

    def __init__(self, action=None):
        super().__init__()
        self.seen = []       # (epoch, batch, optimizer iterations)
        self.action = action
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append((self.epoch, batch, int(self.model.optimizer.iterations)))
        if self.action is not None:
            self.action(len(self.seen))


def first_moment(model):
    """The Adam first moment of the first kernel, a copy."""
    opt = model.optimizer
    return np.array(opt._momentums[0].numpy())  # pylint: disable=protected-access


def ckpt_value(path, suffix):
    reader = tf.train.load_checkpoint(path)
    keys = [k for k in reader.get_variable_to_shape_map() if k.endswith(suffix)]
    assert len(keys) == 1, (suffix, keys)
    return reader.get_tensor(keys[0])


def request_stop_from_thread(sv):
    thread = threading.Thread(target=sv.request_stop)
    thread.start()
    thread.join()


# ------------------------------------------------------------------------------------- fit

def test_fit_checkpoints_periodically_and_at_the_end(tmp_path, backends):
    x, y = data()
    model = make_model()
    sv = backends(tmp_path, save_model_secs=EVERY_STEP, keep=3)
    rec = Recorder(sv)
    with sv.session() as names:
        assert names == {"sv": sv}
        model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[sv.callback])
    assert sv.flush_events(30)
    total = 2 * BATCHES
    assert sv.read_step() == total == int(model.optimizer.iterations)
    paths = checkpoint_paths(str(tmp_path))
    assert [checkpoint_step(p) for p in paths] == [total, total - 1, total - 2]  # retention keep=3
    saved = [r.step for r in rec.of(events.CheckpointSaved)]
    assert saved == list(range(1, total + 1))
    assert isinstance(rec.records[-1], events.Stopped)
    assert rec.records[-1].reason == events.REQUESTED and rec.records[-1].step == total
    ready = rec.of(events.SessionReady)
    assert len(ready) == 1 and ready[0].restored_from is None
    progress = rec.of(events.Progress)
    assert progress and progress[0].epochs == 2 and progress[0].batches == BATCHES
    assert (progress[-1].step, progress[-1].epoch, progress[-1].batch) == (
        total, 1, BATCHES)                        # where fit really ended, at its last step
    points = [r for r in rec.of(events.SummaryWritten) if "loss" in r.scalars]
    assert points[-1].step == total               # the last step is on the curve
    epoch_summaries = [r for r in rec.of(events.SummaryWritten) if "epoch_loss" in r.scalars]
    assert [r.step for r in epoch_summaries] == [BATCHES, 2 * BATCHES]

    # Readable without this package, into a fresh model and optimizer.
    fresh = make_model(seed=1)
    fresh.optimizer.build(fresh.trainable_variables)
    tf.train.Checkpoint(model=fresh, optimizer=fresh.optimizer).restore(
        tf.train.latest_checkpoint(str(tmp_path))).assert_existing_objects_matched()
    assert int(fresh.optimizer.iterations) == total
    for a, b in zip(fresh.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.slow
def test_fit_resumes_after_sigkill_mid_epoch(tmp_path, backends, wait_for):
    logdir = str(tmp_path)
    child = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "eager_scripts", "fit_forever.py"), logdir],
        env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def mid_epoch_checkpoint():
            if child.poll() is not None:
                raise AssertionError(child.stderr.read().decode()[-3000:])
            return [p for p in checkpoint_paths(logdir)
                    if checkpoint_step(p) > BATCHES and checkpoint_step(p) % BATCHES not in (0, 1)]
        wait_for(mid_epoch_checkpoint, timeout=120, interval=0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        child.stderr.close()
    newest = checkpoint_paths(logdir)[0]
    step = checkpoint_step(newest)
    epoch = int(ckpt_value(newest, "jupyter_supervisor/epoch/.ATTRIBUTES/VARIABLE_VALUE"))
    batch = int(ckpt_value(newest, "jupyter_supervisor/batch/.ATTRIBUTES/VARIABLE_VALUE"))
    iterations = int(ckpt_value(newest, "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"))
    assert iterations == step and (epoch, batch) == divmod(step, BATCHES)

    x, y = data()
    model = make_model()
    sv = backends(logdir)
    restored = {}

    class AtBegin(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            restored["iterations"] = int(self.model.optimizer.iterations)
            restored["moment"] = first_moment(self.model)

    stop_after = 3
    probe = Probe(action=lambda n: n == batch + stop_after and request_stop_from_thread(sv))
    with sv.session():
        history = model.fit(x, y, batch_size=8, epochs=100_000, shuffle=False, verbose=0,
                            callbacks=[sv.callback, AtBegin(), probe])
    assert sv.restored_from == newest
    assert restored["iterations"] == iterations
    reader = tf.train.load_checkpoint(newest)
    # Adam's variables: iterations, learning rate (saved under their own names), then a
    # momentum and a velocity per trainable variable.
    moment = reader.get_tensor("optimizer/_variables/2/.ATTRIBUTES/VARIABLE_VALUE")
    assert moment.shape == (4, 8) and np.abs(moment).sum() > 0
    np.testing.assert_array_equal(restored["moment"], moment)
    # The first `batch` batches of the epoch were skipped, untrained; training went on there.
    skipped, after = probe.seen[:batch], probe.seen[batch:]
    assert [(e, b) for e, b, _ in skipped] == [(epoch, b) for b in range(batch)]
    assert all(it == iterations for _, _, it in skipped)
    assert after[0] == (epoch, batch, iterations + 1)
    # Stop requested after `stop_after` trained batches: no further batch is trained (the
    # call that sees the stop, if the epoch goes on, trains nothing).
    counts = [it for _, _, it in after]
    assert counts[:stop_after] == list(range(iterations + 1, iterations + stop_after + 1))
    assert counts[stop_after:] in ([], [iterations + stop_after])
    assert sv.read_step() == iterations + stop_after == int(model.optimizer.iterations)
    assert checkpoint_step(checkpoint_paths(logdir)[0]) == sv.read_step()
    # History holds the epochs before the checkpoint and those ended since; the half epoch the
    # stop cut is not one.
    assert len(history.history["loss"]) == epoch + (batch + stop_after - 1) // BATCHES
    assert not isinstance(model.train_function, _TrainFunction)
    assert model._initial_epoch is None  # pylint: disable=protected-access

    # No batch was trained twice or left out: the same weights as an uninterrupted run of as
    # many steps over the same (unshuffled) batches.
    reference = make_model()
    total = sv.read_step()

    class StopAt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations) >= total:
                self.model.stop_training = True

    reference.fit(x, y, batch_size=8, epochs=100_000, shuffle=False, verbose=0,
                  callbacks=[StopAt()])
    assert int(reference.optimizer.iterations) == total
    for a, b in zip(reference.weights, model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_stop_from_another_thread_ends_fit_at_the_next_batch(tmp_path, backends):
    x, y = data()
    model = make_model()
    sv = backends(tmp_path, save_model_secs=3600)
    rec = Recorder(sv)
    probe = Probe(action=lambda n: n == 5 and request_stop_from_thread(sv))
    with sv.session():
        model.fit(x, y, batch_size=8, epochs=50, verbose=0, callbacks=[sv.callback, probe])
    # Stop requested after batch 5: the next call trains nothing and fit ends.
    assert [it for _, _, it in probe.seen] == [1, 2, 3, 4, 5, 5]
    assert sv.read_step() == 5 == int(model.optimizer.iterations)
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [5]
    assert sv.flush_events(30)
    assert [r.step for r in rec.of(events.CheckpointSaved)] == [5]
    assert rec.records[-1].reason == events.REQUESTED
    # The checkpoint says: epoch 0, 5 batches done.
    path = checkpoint_paths(str(tmp_path))[0]
    assert int(ckpt_value(path, "jupyter_supervisor/batch/.ATTRIBUTES/VARIABLE_VALUE")) == 5


def test_second_fit_after_a_stop_raises_stop_body_and_ends_cleanly(tmp_path, backends):
    x, y = data()
    model = make_model()
    sv = backends(tmp_path, save_model_secs=3600)
    probe = Probe(action=lambda n: n == 2 and request_stop_from_thread(sv))
    after = []
    with sv.session():
        model.fit(x, y, batch_size=8, epochs=5, verbose=0, callbacks=[sv.callback, probe])
        model.fit(x, y, batch_size=8, epochs=5, verbose=0, callbacks=[sv.callback])
        after.append("ran")  # pragma: no cover  (StopBody ends the body)
    assert after == [] and sv.read_step() == 2
    assert checkpoint_step(checkpoint_paths(str(tmp_path))[0]) == 2


def test_fit_max_steps_stops_exactly(tmp_path, backends):
    x, y = data()
    model = make_model()
    sv = backends(tmp_path, max_steps=11, save_model_secs=3600)
    with sv.session():
        model.fit(x, y, batch_size=8, epochs=50, verbose=0, callbacks=[sv.callback])
    assert sv.read_step() == 11 == int(model.optimizer.iterations)
    assert checkpoint_step(checkpoint_paths(str(tmp_path))[0]) == 11
    # Resumed at max_steps: nothing to train, fit does not start.
    sv2 = backends(tmp_path, max_steps=11)
    model2 = make_model()
    with sv2.session():
        model2.fit(x, y, batch_size=8, epochs=50, verbose=0, callbacks=[sv2.callback])
    assert sv2.read_step() == 11 == int(model2.optimizer.iterations)


def test_fit_with_steps_per_execution_resumes_exactly(tmp_path, backends):
    x, y = data()

    def make():
        model = make_model()
        model.compile(keras.optimizers.Adam(0.01), "mse", steps_per_execution=2)
        return model

    sv = backends(tmp_path)
    model = make()
    stop = Probe(action=lambda n: n == 5 and request_stop_from_thread(sv))  # 5 calls: 10 steps
    with sv.session():
        model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0,
                  callbacks=[sv.callback, stop])
    assert sv.read_step() == 10 == int(model.optimizer.iterations)
    sv2 = backends(tmp_path)
    resumed = make()
    with sv2.session():
        resumed.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0,
                    callbacks=[sv2.callback])
    reference = make()
    reference.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    assert sv2.read_step() == 3 * BATCHES == int(resumed.optimizer.iterations)
    for a, b in zip(reference.weights, resumed.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_fit_on_a_dataset_of_unknown_length_resumes_exactly(tmp_path, backends):
    x, y = data()

    def dataset():  # filter() hides the length from Keras
        return tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(8)

    assert dataset().cardinality() == tf.data.UNKNOWN_CARDINALITY
    sv = backends(tmp_path)
    model = make_model()
    # Stopped after the last batch of the second epoch (the limit the callback documents: the
    # checkpoint says epoch 1, batch 8, as the length was not known).
    stop = Probe(action=lambda n: n == 2 * BATCHES and request_stop_from_thread(sv))
    with sv.session():
        model.fit(dataset(), epochs=4, shuffle=False, verbose=0,
                  callbacks=[sv.callback, stop])
    newest = checkpoint_paths(str(tmp_path))[0]
    assert checkpoint_step(newest) == sv.read_step() == 2 * BATCHES
    assert [int(ckpt_value(newest, f"jupyter_supervisor/{name}/.ATTRIBUTES/VARIABLE_VALUE"))
            for name in ("epoch", "batch")] == [1, BATCHES]
    sv2 = backends(tmp_path)
    resumed = make_model()
    with sv2.session():
        history = resumed.fit(dataset(), epochs=4, shuffle=False, verbose=0,
                              callbacks=[sv2.callback])
    # The stop cut epoch 1 before its end (its data's end was not known yet): the resume skips
    # its batches and ends it, then epochs 2 and 3 train; History holds all four.
    assert len(history.history["loss"]) == 4 and sv2.read_step() == 4 * BATCHES
    reference = make_model()
    reference.fit(dataset(), epochs=4, shuffle=False, verbose=0)
    for a, b in zip(reference.weights, resumed.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_finished_fit_resumes_to_nothing_and_later_fit_continues(tmp_path, backends):
    x, y = data()
    sv = backends(tmp_path)
    model = make_model()
    with sv.session():
        trained = model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[sv.callback])
    sv2 = backends(tmp_path)
    model2 = make_model()
    with sv2.session():
        first = model2.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[sv2.callback])
        second = model2.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[sv2.callback])
    # Nothing trained in the first fit; its History is the one of the run that trained it.
    assert first.history == trained.history and first.epoch == [0, 1]
    assert len(second.history["loss"]) == 1
    assert sv2.read_step() == 3 * BATCHES == int(model2.optimizer.iterations)


def test_save_now_from_another_thread_during_fit(tmp_path, backends, wait_for):
    x, y = data()
    model = make_model()
    sv = backends(tmp_path, save_model_secs=3600)
    result = {}

    def save_then_stop(n):
        if n == 3:
            def other():
                result["path"] = sv.save_now(timeout=30)
                sv.request_stop()
            result["thread"] = threading.Thread(target=other)
            result["thread"].start()

    with sv.session():
        model.fit(x, y, batch_size=8, epochs=1000, verbose=0,
                  callbacks=[sv.callback, Probe(action=save_then_stop)])
    result["thread"].join(30)
    assert result["path"] is not None and os.path.exists(result["path"] + ".index")
    assert 3 <= checkpoint_step(result["path"]) <= sv.read_step()
    # Outside a loop (the body has not started one) save_now saves at once.
    sv2 = backends(tmp_path / "b")
    with sv2.session():
        sv2.track(w=tf.Variable(1.0))
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("p", sv2.save_now(timeout=30)))
        t.start()
        t.join(30)
    assert checkpoint_step(out["p"]) == 0


def test_fit_without_the_callback_is_told(tmp_path, backends, caplog):
    x, y = data()
    model = make_model()
    sv = backends(tmp_path)
    with caplog.at_level(logging.WARNING, logger="jupyter_supervisor"):
        with sv.session():
            model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert checkpoint_paths(str(tmp_path)) == []
    # Told once, as a note (the run prints its notes into its output), not also logged.
    assert [note for note in sv.notes() if "sv.callback" in note and
            "nothing was checkpointed" in note]
    assert "nothing was checkpointed" not in caplog.text
    assert checkpoint_paths(str(tmp_path)) == []


# ------------------------------------------------------------------------------ custom loops

def custom_setup(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.01)
    x, y = data()

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        return loss
    return model, opt, train_step


def test_variables_created_after_a_save_are_in_the_next_one(tmp_path, backends):
    """The snapshot's write is traced once per object graph saved: a variable that joins a
    tracked object after a save (a layer built late) is in the next checkpoint,
    which restores it, and so is a variable under a new or a second name."""
    state = tf.Module()
    state.w = tf.Variable(1.0)
    sv = backends(tmp_path, save_model_secs=3600)
    with sv.session():
        sv.track(state=state)
        sv.step()
        first = sv.save_now()
        state.late = tf.Variable([5.0, 6.0])
        sv.step()
        second = sv.save_now()
        state.renamed = state.late  # the same objects, in the same order, one renamed
        del state.late
        sv.step()
        third = sv.save_now()
        state.alias = state.w  # a second name
        sv.step()
        newest = sv.save_now()
    keys = lambda path: {k for k, _ in tf.train.list_variables(path)}  # noqa: E731
    assert keys(second) - keys(first) == {"state/late/.ATTRIBUTES/VARIABLE_VALUE"}
    assert keys(third) ^ keys(second) == {"state/late/.ATTRIBUTES/VARIABLE_VALUE",
                                          "state/renamed/.ATTRIBUTES/VARIABLE_VALUE"}
    assert keys(newest) == keys(third)  # one object, saved once
    restored = tf.Module()
    restored.alias = tf.Variable(0.0)
    tf.train.Checkpoint(state=restored).read(newest).expect_partial()
    assert restored.alias.numpy() == 1.0

    again = tf.Module()
    again.w, again.renamed = tf.Variable(0.0), tf.Variable([0.0, 0.0])
    sv2 = backends(tmp_path, save_model_secs=3600)
    with sv2.session():
        assert sv2.track(state=again) == newest
    assert (again.w.numpy(), again.renamed.numpy().tolist()) == (1.0, [5.0, 6.0])


def test_slots_outside_the_object_graph_are_saved_synchronously(tmp_path):
    """A tf.compat.v1 optimizer keeps its slots outside the object graph (the saver asks it for
    them): a snapshot would miss them, or the ones created after its write was traced. Such a
    writer saves synchronously, says why, and every checkpoint holds every slot, exactly."""
    v, u = tf.Variable([1.0, 2.0], name="v"), tf.Variable([3.0], name="u")
    opt = tf.compat.v1.train.AdamOptimizer(0.1)

    def step(variable):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(variable * variable)
        opt.apply_gradients([(tape.gradient(loss, variable), variable)])

    writer = CheckpointWriter({"v": v, "u": u, "opt": opt}, str(tmp_path), "ckpt",
                                     keep=5, existing=[], checked=[v, u])
    step(v)
    writer.save(1)
    assert writer.wait(60) and writer.verdict() is not None
    assert "slot variables" in writer.sync_reason
    step(u)  # u's slots: no new edge in the object graph
    writer.save(2)
    assert writer.wait(60) and writer.verdict() is not None
    reader = tf.train.load_checkpoint(str(tmp_path / "ckpt-2"))
    slots = {name for name in reader.get_variable_to_shape_map() if "OPTIMIZER_SLOT" in name}
    assert len(slots) == 4  # m and v of each variable
    for variable in (v, u):
        for name in ("m", "v"):
            key = next(k for k in slots if k.startswith(variable.name.split(":")[0] + "/")
                       and k.endswith(f"/{name}/.ATTRIBUTES/VARIABLE_VALUE"))
            np.testing.assert_array_equal(reader.get_tensor(key),
                                          opt.get_slot(variable, name).numpy())


def test_custom_loop_track_step_stop_and_resume(tmp_path, backends):
    model, opt, train_step = custom_setup()
    sv = backends(tmp_path, save_model_secs=3600)
    rec = Recorder(sv)
    with sv.session():
        assert sv.track(model=model, optimizer=opt) is None
        assert sv.read_step() == 0
        while not sv.should_stop():
            loss = train_step()
            if sv.step(loss=loss) == 7:
                request_stop_from_thread(sv)
    assert sv.read_step() == 7 == int(opt.iterations)
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [7]
    assert sv.flush_events(30)
    first = rec.of(events.SummaryWritten)[0]    # the first boundary's point, converted
    assert first.step == 1 and first.scalars["loss"] > 0
    assert rec.of(events.Progress)[0].step == 1

    model2, opt2, train_step2 = custom_setup(seed=1)
    sv2 = backends(tmp_path, max_steps=10, save_model_secs=3600)
    with sv2.session():
        assert sv2.track(model=model2, optimizer=opt2) == checkpoint_paths(str(tmp_path))[0]
        assert sv2.read_step() == 7 and int(opt2.iterations) == 7
        for a, b in zip(model.weights, model2.weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        sv2.track(model=model2, optimizer=opt2)  # the same objects again: nothing happens
        while not sv2.should_stop():
            sv2.step(loss=train_step2())
    assert sv2.read_step() == 10 == int(opt2.iterations)  # max_steps, exactly
    assert checkpoint_step(checkpoint_paths(str(tmp_path))[0]) == 10


def saving_every_10_s(tmp_path, backends):
    """(model, optimizer, train_step, sv, clock, recorder): a custom loop saving every 10 s of
    ``clock``, which the test moves."""
    model, opt, train_step = custom_setup()
    sv = backends(tmp_path, save_model_secs=10)
    clock = FakeClock()
    sv._checkpointer.timer._clock = clock  # pylint: disable=protected-access
    return model, opt, train_step, sv, clock, Recorder(sv)


def test_a_write_that_outlasts_the_interval_is_followed_by_one_interval_without_a_write(
        tmp_path, backends, monkeypatch):
    """A write that outlasts the save interval (a large model, a slow disk; here the real
    write, held back until an event is set; the interval is 10 s of a clock the test moves):
    the boundaries while it runs neither wait for it nor start another save, so training goes
    on, for at most one more interval; the next save is due one interval after the write
    ended, not at once (writes back to back would take a core from training all the time:
    bench/bench_save_interval.py at 400 MB every second), and the session's end says so.
    Before, the training thread waited for that write at the next due save, which made a
    150 MB model saved every second train slower under us than under Keras' callbacks."""
    release, started = threading.Event(), []
    write_function = Snapshot.write_function

    def held(self, checked):
        write, check = write_function(self, checked)

        def held_write(path):
            started.append(path)
            if len(started) == 1:
                assert release.wait(60), "the training thread waited for the write"
            return write(path)
        return held_write, check

    monkeypatch.setattr(Snapshot, "write_function", held)
    model, opt, train_step, sv, clock, rec = saving_every_10_s(tmp_path, backends)
    with sv.session():
        sv.track(model=model, optimizer=opt)  # the interval starts at 0
        clock.now = 10
        sv.step(loss=train_step())  # due: the write of step 1 starts, and is held
        writer = sv._checkpointer.writer  # pylint: disable=protected-access
        assert [checkpoint_step(p) for p in started] == [1] and writer.writing
        for now in range(20, 30):  # due again, for less than one more interval: no save, no wait
            clock.now = now
            sv.step(loss=train_step())
        assert [checkpoint_step(p) for p in started] == [1] and writer.writing
        release.set()   # the write ends at 29
        wait_for(lambda: not writer.writing, 60, what="the end of the write")
        clock.now = 38.5
        assert sv.step(loss=train_step()) == 12  # within an interval of the write's end
        assert [checkpoint_step(p) for p in started] == [1]
        clock.now = 39
        assert sv.step(loss=train_step()) == 13  # one interval after it: this boundary saves
        wait_for(lambda: len(started) == 2, 60, what="the second write")
    assert sv.flush_events(30)
    assert [r.step for r in rec.of(events.CheckpointSaved)] == [1, 13]  # 13: final too
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [13, 1]
    assert sv.read_step() == 13 == int(opt.iterations)
    [note] = [n for n in sv.notes() if "to write" in n]
    assert note == ("A checkpoint took up to 19 s to write, longer than --save-model-secs 10: "
                    "the next one was taken 10 s after that write ended, so checkpoints came "
                    "about every 29 s. Set --save-model-secs above a write's time for "
                    "checkpoints at the interval you set.")


def test_writes_within_the_interval_keep_it_and_say_nothing(tmp_path, backends):
    """Writes shorter than the interval: a save is due one interval after the one before
    started, and the session's end has no note about the writes' time."""
    model, opt, train_step, sv, clock, rec = saving_every_10_s(tmp_path, backends)
    with sv.session():
        sv.track(model=model, optimizer=opt)
        for step in range(1, 6):
            clock.now = 10 * step
            assert sv.step(loss=train_step()) == step
            sv._checkpointer.writer.wait()  # pylint: disable=protected-access
    assert sv.flush_events(30)
    assert [r.step for r in rec.of(events.CheckpointSaved)] == [1, 2, 3, 4, 5]
    assert not [n for n in sv.notes() if "to write" in n]


def test_an_interval_shorter_than_any_write_saves_at_every_step_and_says_nothing(
        tmp_path, backends):
    """The tutorials' way to save at every step (an interval far below a write's time): every
    boundary still saves, after the write before it ended, and no note tells the user about
    writes longer than the interval they set."""
    model, opt, train_step = custom_setup()
    sv = backends(tmp_path, save_model_secs=EVERY_STEP)
    rec = Recorder(sv)
    with sv.session():
        sv.track(model=model, optimizer=opt)
        for _ in range(4):
            sv.step(loss=train_step())
    assert sv.flush_events(30)
    assert [r.step for r in rec.of(events.CheckpointSaved)] == [1, 2, 3, 4]
    assert not [n for n in sv.notes() if "to write" in n]


def test_loop_that_never_looks_ends_at_a_step_boundary(tmp_path, backends):
    model, opt, train_step = custom_setup()
    sv = backends(tmp_path, save_model_secs=3600)
    done = []
    with sv.session():
        sv.track(model=model, optimizer=opt)
        for _ in range(10_000):
            train_step()
            if sv.step() == 4:
                request_stop_from_thread(sv)  # after the boundary of step 4: ends at 5
        done.append(True)  # pragma: no cover
    assert not done and sv.read_step() == 5 == int(opt.iterations)
    assert checkpoint_step(checkpoint_paths(str(tmp_path))[0]) == 5


def test_input_running_out_is_a_clean_stop_with_a_final_checkpoint(tmp_path, backends):
    w = tf.Variable(0.0)
    sv = backends(tmp_path, save_model_secs=3600)
    rec = Recorder(sv)
    batches = iter(tf.data.Dataset.range(3))
    with sv.session():
        sv.track(w=w)
        while not sv.should_stop():
            w.assign_add(tf.cast(batches.get_next(), tf.float32))
            sv.step()
    assert sv.flush_events(30)
    assert rec.records[-1].reason == events.OUT_OF_RANGE and rec.records[-1].exception is None
    assert checkpoint_step(checkpoint_paths(str(tmp_path))[0]) == 3
    assert {thread for thread in threading.enumerate() if sv.owns_thread(thread)} == set()


def test_a_tracked_dataset_iterator_resumes_its_position(tmp_path, backends):
    w = tf.Variable(0.0)
    batches = iter(tf.data.Dataset.range(100))
    sv = backends(tmp_path)
    with sv.session():
        sv.track(w=w, batches=batches)
        for _ in range(3):
            w.assign_add(tf.cast(batches.get_next(), tf.float32))
            sv.step()
    assert any("synchronously" in note for note in sv.notes())  # an iterator is no variable
    batches2 = iter(tf.data.Dataset.range(100))
    sv2 = backends(tmp_path)
    with sv2.session():
        sv2.track(w=tf.Variable(0.0), batches=batches2)
        assert int(batches2.get_next()) == 3


def test_init_fn_runs_when_there_is_no_checkpoint(tmp_path, backends):
    calls = []
    w = tf.Variable(0.0)
    sv = backends(tmp_path, init_fn=lambda: (calls.append(1), w.assign(5.0)))
    with sv.session():
        sv.track(w=w)
        sv.step()
    assert calls == [1]
    w2 = tf.Variable(0.0)
    sv2 = backends(tmp_path, init_fn=lambda: calls.append(2))
    with sv2.session():
        sv2.track(w=w2)
    assert calls == [1] and float(w2.numpy()) == 5.0


# ---------------------------------------------------------------------- files and failures

def test_corrupted_newest_checkpoint_falls_back_to_the_older(tmp_path, backends, caplog):
    w = tf.Variable(0.0)
    sv = backends(tmp_path, save_model_secs=EVERY_STEP)
    with sv.session():
        sv.track(w=w)
        for value in (1.0, 2.0):
            w.assign(value)
            sv.step()
    older, newest = checkpoint_paths(str(tmp_path))[1], checkpoint_paths(str(tmp_path))[0]
    data_file = [f for f in tf.io.gfile.glob(newest + ".data*")][0]
    with open(data_file, "r+b") as f:
        size = len(f.read())
        f.seek(0)
        f.write(b"\xff" * size)
    w2 = tf.Variable(0.0)
    sv2 = backends(tmp_path)
    with caplog.at_level(logging.WARNING, logger="jupyter_supervisor"):
        with sv2.session():
            assert sv2.track(w=w2) == older
    assert float(w2.numpy()) == 1.0 and sv2.read_step() == 1
    assert f"Cannot read checkpoint {newest}" in caplog.text
    assert f"Restored from {older}" in caplog.text


@pytest.mark.parametrize("how", ["cannot be read", "is missing"])
def test_damaged_state_file_restores_the_newest_checkpoint_file(tmp_path, backends, caplog,
                                                                 how):
    """A garbled or deleted state file: the newest checkpoint file is restored, said once
    (starting afresh would overwrite the checkpoints of the same steps)."""
    w = tf.Variable(0.0)
    sv = backends(tmp_path, save_model_secs=EVERY_STEP)
    with sv.session():
        sv.track(w=w)
        for value in (1.0, 2.0):
            w.assign(value)
            sv.step()
    state = os.path.join(str(tmp_path), "checkpoint")
    if how == "is missing":
        os.remove(state)
    else:
        with open(state, "w", encoding="utf-8") as f:
            f.write("not a checkpoint state {")
    w2 = tf.Variable(0.0)
    sv2 = backends(tmp_path)
    with caplog.at_level(logging.WARNING, logger="jupyter_supervisor"):
        with sv2.session():
            assert checkpoint_step(sv2.track(w=w2)) == 2
            sv2.step()
    assert caplog.text.count(f"The checkpoint state file {state} {how}") == 1
    assert float(w2.numpy()) == 2.0
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-3")  # rewritten


def _checkpoints_on_disk(logdir):
    """The <basename>-<step> checkpoints whose files are in ``logdir``, by name."""
    return sorted({name.split(".index")[0] for name in os.listdir(logdir)
                   if name.startswith("model.ckpt-") and name.endswith(".index")})


@pytest.mark.slow
def test_a_save_killed_before_it_was_listed_is_swept_by_the_next_run(tmp_path, backends):
    """A SIGKILL between a save's files and the state file update leaves a complete checkpoint
    that no restore uses and no retention deletes: the next run removes it, so a logdir holds
    at most ``keep`` checkpoints, all listed."""
    logdir, keep, orphan_step = str(tmp_path / "run"), 2, 15
    line, stderr = killed_where_it_paused(
        [sys.executable, os.path.join(HERE, "eager_scripts", "kill_before_listing.py"),
         logdir, str(keep), str(orphan_step)],
        {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    orphan = os.path.join(logdir, f"model.ckpt-{orphan_step}")
    assert line.split() == ["PAUSED", orphan], (line, stderr)
    listed = checkpoint_paths(logdir)
    assert [checkpoint_step(p) for p in listed] == [10, 5] and os.path.exists(orphan + ".index")
    assert len(_checkpoints_on_disk(logdir)) == keep + 1

    w = tf.Variable(0.0)
    sv = backends(logdir, keep=keep)
    with sv.session():
        assert sv.track(w=w) == listed[0]
        w.assign_add(1.0)
        sv.step()
    listed = checkpoint_paths(logdir)
    assert [checkpoint_step(p) for p in listed] == [11, 10]
    assert _checkpoints_on_disk(logdir) == sorted(os.path.basename(p) for p in listed)
    assert not any(name.startswith(f"model.ckpt-{orphan_step}") for name in os.listdir(logdir))


def test_a_second_backend_on_the_logdir_is_refused(tmp_path, backends):
    backends(tmp_path)
    with pytest.raises(LogdirLockedError, match="in use"):
        backends(tmp_path)


def test_event_files_hold_scalars_and_step_rate(tmp_path, backends, wait_for):
    from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=import-outside-toplevel
    model, opt, train_step = custom_setup()
    sv = backends(tmp_path, save_summaries_secs=0.01)
    rec = Recorder(sv)
    with sv.session():
        sv.track(model=model, optimizer=opt)
        while not sv.should_stop():
            sv.step(loss=train_step())
            if rec.of(events.StepRate) and rec.of(events.SummaryWritten) \
                    and sv.read_step() > 5:
                sv.request_stop()
    # A second session writes its own event file.
    sv2 = backends(tmp_path, save_summaries_secs=0.01)
    with sv2.session():
        sv2.track(model=model, optimizer=opt)
    files = sorted(tf.io.gfile.glob(os.path.join(str(tmp_path), "events.out.tfevents.*")))
    assert len(files) == 2
    acc = event_accumulator.EventAccumulator(files[0])
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "loss" in tags and "global_step/sec" in tags
    assert all(e.value > 0 for e in acc.Scalars("loss"))


def test_failed_write_stops_the_run_and_keeps_the_older_checkpoints(tmp_path, backends,
                                                                    monkeypatch):
    w = tf.Variable(0.0)
    sv = backends(tmp_path, save_model_secs=EVERY_STEP)
    with pytest.raises(CheckpointWriteError, match="No space left") as raised:
        with sv.session():
            sv.track(w=w)
            sv.step()
            sv.save_now()  # the first checkpoint is written before the disk "fills"

            fail_every_write(monkeypatch)
            for _ in range(1000):  # a bound, so that a write that never fails fails the test
                if sv.should_stop():
                    break
                sv.step()
    assert "model.ckpt-1" in str(raised.value)  # the newest intact one is named
    assert [checkpoint_step(p) for p in checkpoint_paths(str(tmp_path))] == [1]


def test_a_failed_write_of_a_step_saved_again_keeps_its_checkpoint(tmp_path, backends,
                                                                   monkeypatch):
    """The same step saved twice (Save clicked twice between steps): when the second write
    fails, the checkpoint the first wrote under that name stays, intact."""
    w = tf.Variable(3.0)
    sv = backends(tmp_path)
    with pytest.raises(CheckpointWriteError, match="No space left"):
        with sv.session():
            sv.track(w=w)
            sv.step()
            first = sv.save_now()
            files = sorted(tf.io.gfile.glob(first + ".*"))
            fail_every_write(monkeypatch)
            sv.save_now()
    assert sorted(tf.io.gfile.glob(first + ".*")) == files
    restored = tf.Variable(0.0)
    tf.train.Checkpoint(w=restored).read(first).expect_partial()
    assert restored.numpy() == 3.0


def fail_every_write(monkeypatch) -> None:
    """Makes every checkpoint write fail as on a full disk."""
    def full(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")
    # The snapshot's write is a traced function: it fails as a whole, as when SaveV2 inside
    # it finds the disk full.
    write_function = Snapshot.write_function
    monkeypatch.setattr(Snapshot, "write_function",
                        lambda *args: (full, write_function(*args)[1]))
    monkeypatch.setattr(tf.train.Checkpoint, "write", full)  # a synchronous save


# ------------------------------------------------------------------------------- bad input

def test_bad_track_arguments(tmp_path, backends):
    sv = backends(tmp_path)
    w = tf.Variable(1.0)
    with sv.session():
        with pytest.raises(ValueError, match=r"Received: objects=\{\} \(nothing\)"):
            sv.track()
        with pytest.raises(ValueError, match=r"Received: lr=0.1\. Expected a trackable"):
            sv.track(w=w, lr=0.1)
        sv.track(w=w)
        with pytest.raises(ValueError, match="the objects tracked first"):
            sv.track(w=tf.Variable(2.0))
        sv.step()


def test_track_after_step_and_save_now_after_the_session(tmp_path, backends):
    sv = backends(tmp_path)
    with sv.session():
        sv.step()
        with pytest.raises(RuntimeError, match="before the first sv.step"):
            sv.track(w=tf.Variable(1.0))
    with pytest.raises(RuntimeError, match="needs a running session"):
        sv.save_now()


def test_step_outside_a_run(tmp_path, backends):
    sv = backends(tmp_path)
    with pytest.raises(RuntimeError, match=r"sv.step\(\) was called outside a run"):
        sv.step()
    with sv.session():
        with pytest.raises(ValueError, match=r"Received: loss=\[1, 2\]"):
            sv.step(loss=[1, 2])
    with pytest.raises(RuntimeError, match="outside a run"):
        sv.step()


def test_checkpoint_of_another_model_is_refused_with_the_variables(tmp_path, backends):
    x, y = data()
    sv = backends(tmp_path)
    with sv.session():
        make_model().fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[sv.callback])
    other = make_model(units=16)
    sv2 = backends(tmp_path)
    with pytest.raises(CheckpointMismatchError, match=r"changed shape: .*kernel \(saved \[4, 8\], "
                       r"now \[4, 16\]\)"):
        with sv2.session():
            other.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[sv2.callback])
    deeper = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(8),
                               keras.layers.Dense(1)])
    deeper.compile("adam", "mse")
    sv3 = backends(tmp_path)
    with pytest.raises(CheckpointMismatchError, match=r"no value for \d+ variable"):
        with sv3.session():
            deeper.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[sv3.callback])


def test_graph_mode_checkpoint_is_named(tmp_path, backends):
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=1.0)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(v.initializer)
            saver.save(sess, os.path.join(str(tmp_path), "model.ckpt"), global_step=5)
    sv = backends(tmp_path)
    with pytest.raises(CheckpointMismatchError, match="graph-mode"):
        with sv.session():
            sv.track(v=tf.Variable(1.0))


def test_bad_config(tmp_path):
    with pytest.raises(TypeError, match="Expected a jupyter_supervisor.config.RunConfig"):
        EagerSupervisor({"logdir": str(tmp_path)})
    with pytest.raises(ValueError, match="init_fn=.*Expected a function taking no argument"):
        EagerSupervisor(RunConfig(logdir=str(tmp_path), init_fn=lambda sess: None))
    with pytest.raises(ValueError, match="Received: master='grpc://x:1'"):
        EagerSupervisor(RunConfig(logdir=str(tmp_path), master="grpc://x:1"))
    # TensorFlow finds checkpoints by glob pattern: it could not resume from there.
    with pytest.raises(ValueError, match=r"Received: logdir='.*lr\[0\.1\]'\. Expected a path "
                                         r"without \*, \?, \[ or \\"):
        EagerSupervisor(RunConfig(logdir=str(tmp_path / "lr[0.1]")))
    assert not (tmp_path / "lr[0.1]").exists()


def test_the_eager_backend_imports_nothing_of_the_notebook():
    # TensorFlow itself imports IPython when it is installed: what is checked is our code.
    import ast  # pylint: disable=import-outside-toplevel
    package = os.path.join(ROOT, "jupyter_supervisor")
    sources = [os.path.join(package, "eager", name)
               for name in os.listdir(os.path.join(package, "eager")) if name.endswith(".py")]
    sources += [os.path.join(package, name) for name in ("events.py", "lockfile.py",
                                                         "checkpoints.py", "backend.py",
                                                         "_validate.py")]
    for source in sources:
        with open(source, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                top = name.split(".")[0]
                assert top not in ("IPython", "ipywidgets", "ipykernel"), (source, name)
                assert not name.startswith(("notebook", "view")) or \
                    getattr(node, "level", 0) == 0, (source, name)
