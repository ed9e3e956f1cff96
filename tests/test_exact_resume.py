"""Exact resume: a run crashed at step N and resumed on a fresh model (what a kernel restart
gives) ends with the same weights and optimizer state, bit for bit, as an uninterrupted run of
the same seeds. The crash is an exception raised at a batch's end; the checkpoint is written at
every step boundary, so the resume continues from the boundary before it."""
import contextlib
import threading

import numpy as np
import pytest
import tensorflow as tf
import keras
from tensorflow.python.framework import config as tf_config

from eager_models import data
from helpers import FakeClock, before_each_write, training_waits_for_a_write
from jupyter_supervisor.checkpoints import CheckpointMismatchError

pytestmark = pytest.mark.internals

EVERY_STEP = 1e-9


@pytest.fixture(scope="module", autouse=True)
def deterministic_ops():
    tf.config.experimental.enable_op_determinism()
    yield
    tf_config.disable_op_determinism()  # the other test modules run as a user's code does


class Script(keras.callbacks.Callback):
    """At the end of the ``at``-th batch its fit trains, calls ``then[at]()``."""

    def __init__(self, then):
        super().__init__()
        self.then = then
        self.count = 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1
        if self.count in self.then:
            self.then[self.count]()


class Crash(Script):
    """Raises at the end of the ``at``-th batch trained in this fit."""

    def __init__(self, at):
        super().__init__({at: self.crash})

    def crash(self):
        raise RuntimeError(f"crash at batch {self.count}")


def plain(seed=0):
    keras.utils.set_random_seed(seed)
    return [keras.layers.Dense(16, activation="relu")]


def dropout(seed=0):
    keras.utils.set_random_seed(seed)
    return [keras.layers.Dense(16, activation="relu"), keras.layers.Dropout(0.3),
            keras.layers.GaussianNoise(0.2)]


def augmented(seed=0):
    """A random augmentation layer (Keras' RandomFlip draws from its SeedGenerator)."""
    keras.utils.set_random_seed(seed)
    return [keras.layers.Reshape((2, 2, 1)), keras.layers.RandomFlip(),
            keras.layers.Flatten(), keras.layers.Dense(16, activation="relu")]


def build(layers, steps_per_execution=1):
    model = keras.Sequential([keras.Input((4,)), *layers(), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse", steps_per_execution=steps_per_execution)
    return model


def state(model):
    return [v.numpy() for v in model.variables] + \
        [v.numpy() for v in model.optimizer.variables]


def assert_same(a, b):
    assert len(a) == len(b)
    for i, (u, v) in enumerate(zip(a, b)):
        assert np.array_equal(u, v), (i, np.max(np.abs(u - v)))


def _crashing(crash_at):
    """The crash the body raises at batch ``crash_at``, or no error at all without one."""
    return (pytest.raises(RuntimeError, match="crash at batch") if crash_at
            else contextlib.nullcontext())


def supervised_fit(backends, logdir, make, fit_kwargs, crash_at=None, more=()):
    """One session: a fresh model fit under the eager backend (raising at batch ``crash_at``),
    with the callbacks ``more`` too; returns the model."""
    model = make()
    sv = backends(logdir, save_model_secs=EVERY_STEP)
    callbacks = [sv.callback, *more] + ([Crash(crash_at)] if crash_at else [])
    with _crashing(crash_at):
        with sv.session():
            model.fit(**fit_kwargs, verbose=0, callbacks=callbacks)
    sv.close()
    return model


def check_exact(tmp_path, backends, make, fit_kwargs, crash_at):
    """An uninterrupted run equals one crashed at batch ``crash_at`` and resumed."""
    whole = supervised_fit(backends, tmp_path / "whole", make, fit_kwargs)
    supervised_fit(backends, tmp_path / "crashed", make, fit_kwargs, crash_at)
    resumed = supervised_fit(backends, tmp_path / "crashed", make, fit_kwargs)
    assert int(resumed.optimizer.iterations) == int(whole.optimizer.iterations)
    assert_same(state(resumed), state(whole))
    return whole, resumed


def arrays(**kwargs):
    x, y = data()
    return {"x": x, "y": y, "batch_size": 8, "shuffle": False, **kwargs}


# 8 batches an epoch: batch 12 is mid-epoch (the second's 4th), batch 16 the end of epoch 2.
@pytest.mark.parametrize("crash_at", [12, 16])
def test_dropout_and_noise_resume_exactly(tmp_path, backends, crash_at):
    check_exact(tmp_path, backends, lambda: build(dropout), arrays(epochs=3), crash_at)


def test_the_seed_generators_are_checkpointed(tmp_path, backends):
    """Without their state in the checkpoint, the resumed masks would be the first steps'."""
    make = lambda: build(dropout)  # noqa: E731
    supervised_fit(backends, tmp_path, make, arrays(epochs=1), crash_at=5)
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path)))
    keys = [k for k in reader.get_variable_to_shape_map() if "random_state" in k]
    assert len(keys) == 2, keys
    # Each SeedGenerator counts its draws: 4 steps trained and saved, one draw a step.
    assert sorted(int(reader.get_tensor(k)[1]) for k in keys) == [4, 4]


@pytest.mark.parametrize("crash_at", [7, 8])
def test_initial_epoch_resumes_exactly(tmp_path, backends, crash_at):
    """initial_epoch=1: the first run starts at epoch 1; re-running the same fit continues from
    the checkpoint (mid-epoch, or at the end of its first trained epoch)."""
    whole, resumed = check_exact(tmp_path, backends, lambda: build(dropout),
                                 arrays(epochs=3, initial_epoch=1), crash_at)
    assert int(whole.optimizer.iterations) == 16


def test_random_augmentation_resumes_exactly(tmp_path, backends):
    check_exact(tmp_path, backends, lambda: build(augmented), arrays(epochs=2), 11)


def test_steps_per_execution_resumes_exactly(tmp_path, backends):
    # Batch ends (and boundaries) every 2 batches: the 6th is mid-epoch 2, after its 4th batch.
    check_exact(tmp_path, backends, lambda: build(dropout, steps_per_execution=2),
                arrays(epochs=2), 6)


def test_tf_data_resumes_exactly(tmp_path, backends):
    x, y = data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    check_exact(tmp_path, backends, lambda: build(dropout), {"x": dataset, "epochs": 2}, 11)


def _shuffled(x, y, generated=False):
    """A seeded shuffle reshuffled each epoch, of tensors or (Python state) of a generator."""
    rows = tf.data.Dataset.from_tensor_slices((x, y)) if not generated else \
        tf.data.Dataset.from_generator(lambda: zip(x, y), output_signature=(
            tf.TensorSpec((4,), tf.float32), tf.TensorSpec((1,), tf.float32)))
    return rows.shuffle(64, seed=2).batch(8)


def _reused_warnings(caplog):
    return [r.getMessage() for r in caplog.records if "already iterated" in r.getMessage()]


@pytest.mark.slow
@pytest.mark.parametrize("before, anew", [(0, False), (1, False), (1, True)],
                         ids=["first fit", "after another fit", "after another fit, anew"])
def test_a_dataset_reused_in_the_process_resumes_exactly(tmp_path, backends, caplog, before,
                                                         anew):
    """The crashed fit's dataset object, given to the resume in the same process (a notebook
    that builds it in an earlier cell than fit's, resumed without a restart): its shuffle's
    seed counter is past the interrupted epoch's order, so fit iterates a copy built anew, and
    the resume is the uninterrupted run. "after another fit": the dataset had served another
    run (another logdir) for an epoch first, so the run's orders start later in the counter,
    for the uninterrupted run as for the crashed one (its checkpoints record where); "anew":
    resumed on a dataset built anew, as a new kernel does. Then a new run fits the same object
    for an epoch: it draws the orders it draws after the uninterrupted run. The callbacks'
    decisions (ReduceLROnPlateau's rate and EarlyStopping's count) are the uninterrupted
    run's too."""
    x, y = data()

    def make():
        return build(dropout)

    decided = {}

    def run(name, dataset, crash_at=None):
        decided[name] = (keras.callbacks.ReduceLROnPlateau("loss", factor=0.5, patience=0,
                                                           min_delta=10.0),
                         keras.callbacks.EarlyStopping("loss", patience=5, min_delta=10.0))
        return supervised_fit(backends, tmp_path / name, make, {"x": dataset, "epochs": 2},
                              crash_at, decided[name])

    def decisions(name):
        plateau, stopping = decided[name]
        return (plateau.best, plateau.wait, stopping.best, stopping.wait, stopping.stopped_epoch)

    keras.utils.set_random_seed(0)  # what each build sets: the shuffles' seeds pair with it
    whole_data, reused = _shuffled(x, y), _shuffled(x, y)
    for name, dataset in (("whole-before", whole_data), ("crashed-before", reused)):
        for _ in range(before):
            supervised_fit(backends, tmp_path / name, make, {"x": dataset, "epochs": 1})
    whole = run("whole", whole_data)
    run("crashed", reused, crash_at=12)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        again = run("crashed", _shuffled(x, y) if anew else reused)
    assert _reused_warnings(caplog) == []
    assert int(again.optimizer.iterations) == int(whole.optimizer.iterations)
    assert_same(state(again), state(whole))
    assert float(whole.optimizer.learning_rate) < 0.01   # the plateau decayed it
    assert decisions("crashed") == decisions("whole")
    if not anew:
        after_whole = supervised_fit(backends, tmp_path / "whole-next", make,
                                     {"x": whole_data, "epochs": 1})
        after_again = supervised_fit(backends, tmp_path / "crashed-next", make,
                                     {"x": reused, "epochs": 1})
        assert_same(state(after_again), state(after_whole))


@pytest.mark.slow
def test_a_reused_dataset_that_cannot_be_copied_says_its_resume_is_not_exact(
        tmp_path, backends, caplog):
    """A pipeline with Python state (from_generator) cannot be copied anew, nor one whose
    validation_data shares its shuffle (resumed inside its first epoch: validation would go on
    iterating the dataset itself): each resume given the crashed fit's object says so, and the
    first differs from the uninterrupted run indeed."""
    x, y = data()

    def make():
        return build(dropout)

    keras.utils.set_random_seed(0)
    whole = supervised_fit(backends, tmp_path / "whole", make,
                           {"x": _shuffled(x, y, generated=True), "epochs": 2})
    reused = _shuffled(x, y, generated=True)
    supervised_fit(backends, tmp_path / "generated", make, {"x": reused, "epochs": 2}, 12)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        again = supervised_fit(backends, tmp_path / "generated", make,
                               {"x": reused, "epochs": 2})
    assert _reused_warnings(caplog) == [
        "This fit resumes at epoch 2 (after its batch 3), and its tf.data input is a dataset "
        "this kernel already iterated (an earlier fit drew from it). A dataset draws the seeds "
        "of each new iterator of its shuffle from a counter that only a newly built dataset "
        "starts again, and this one's is past the order the interrupted epoch had; a copy of "
        "it built anew cannot be used: it holds state outside its graph (from_generator, "
        "py_function) or a stateful op (a random op or a variable in a map function). So "
        "this epoch's order is another, and the run differs from an uninterrupted one. For an "
        "exact resume, build the dataset in the cell that calls fit (a resume runs that cell "
        "again), or run the cell that builds it again before resuming."]
    assert not all(np.array_equal(u, v) for u, v in zip(state(again), state(whole)))

    caplog.clear()
    split = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=2).batch(8)
    fit = {"x": split.take(6), "validation_data": split.skip(6), "epochs": 2}
    supervised_fit(backends, tmp_path / "split", make, fit, 4)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        supervised_fit(backends, tmp_path / "split", make, fit)
    assert [m.split(": ", 1)[1].split(". So")[0] for m in _reused_warnings(caplog)] == [
        "its validation_data shares its shuffle, and validation iterates the dataset"]

    # A shuffle below repeat() draws seeds at each pass of one iterator: the count of the
    # iterators an earlier fit made (one) does not say how far its counter went.
    caplog.clear()
    passes = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=2).batch(8).repeat()
    fit = {"x": passes, "epochs": 2, "steps_per_epoch": 5}
    supervised_fit(backends, tmp_path / "earlier", make, fit)
    supervised_fit(backends, tmp_path / "passes", make, fit, 7)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        supervised_fit(backends, tmp_path / "passes", make, fit)
    assert sum("shuffles before a repeat()" in r.getMessage() for r in caplog.records) == 1


def test_custom_loop_with_a_random_generator_resumes_exactly(tmp_path, backends):
    """A loop drawing its noise from a tf.random.Generator it tracks."""
    x, y = data()

    def run(logdir, crash_at=None):
        model = build(plain)
        generator = tf.random.Generator.from_seed(7)
        sv = backends(logdir, save_model_secs=EVERY_STEP, max_steps=12)
        with _crashing(crash_at):
            with sv.session():
                sv.track(model=model, optimizer=model.optimizer, noise=generator)
                while not sv.should_stop():
                    i = sv.read_step() % 8
                    xb = x[i * 8:(i + 1) * 8] + generator.normal((8, 4), stddev=0.1)
                    with tf.GradientTape() as tape:
                        loss = tf.reduce_mean((model(xb) - y[i * 8:(i + 1) * 8]) ** 2)
                    grads = tape.gradient(loss, model.trainable_variables)
                    model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
                    if sv.read_step() + 1 == crash_at:
                        raise RuntimeError("crash at batch")
                    sv.step(loss=loss)
        sv.close()
        return model, generator

    whole, whole_gen = run(tmp_path / "whole")
    run(tmp_path / "crashed", crash_at=7)
    resumed, resumed_gen = run(tmp_path / "crashed")
    assert_same(state(resumed), state(whole))
    assert np.array_equal(resumed_gen.state.numpy(), whole_gen.state.numpy())


def test_fit_initial_epoch_before_the_checkpoint_is_not_a_contradiction(tmp_path, backends):
    """A checkpoint at epoch 2 of this fit wins over initial_epoch=1 (where its first run
    started): the re-run continues at epoch 2."""
    supervised_fit(backends, tmp_path, lambda: build(plain), arrays(epochs=2, initial_epoch=1))
    again = supervised_fit(backends, tmp_path, lambda: build(plain),
                           arrays(epochs=4, initial_epoch=1))
    assert int(again.optimizer.iterations) == 24


def test_fit_initial_epoch_after_the_checkpoint_is_refused(tmp_path, backends):
    supervised_fit(backends, tmp_path, lambda: build(plain), arrays(epochs=2))
    with pytest.raises(ValueError, match=r"Received: initial_epoch=3\. Expected at most 2: the "
                       r"checkpoint .* is at epoch 2 .* Give the initial_epoch that fit had"):
        supervised_fit(backends, tmp_path, lambda: build(plain),
                       arrays(epochs=5, initial_epoch=3))


def test_a_checkpoint_without_seed_states_restores_with_a_warning(tmp_path, backends, caplog):
    """One written before the seed generators were saved: the resume goes on, and says that it
    is not exact."""
    from jupyter_supervisor.eager.checkpointer import _RunState  # pylint: disable=C0415
    old = build(dropout)
    old.optimizer.build(old.trainable_variables)
    tf.train.Checkpoint(model=old, optimizer=old.optimizer, jupyter_supervisor=_RunState({})) \
        .save(str(tmp_path / "model.ckpt"))
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        supervised_fit(backends, tmp_path, lambda: build(dropout), arrays(epochs=1))
    assert "holds no state for 2 random-layer seed generator(s)" in caplog.text
    assert "differs from an uninterrupted one" in caplog.text


@pytest.mark.parametrize("crash_at", [12, 16])
def test_shuffled_arrays_resume_exactly_with_a_global_seed(tmp_path, backends, crash_at):
    """With a global seed, Keras' array adapter shuffles every run of an epoch the same way:
    the resume skips exactly the batches the interrupted epoch trained."""
    check_exact(tmp_path, backends, lambda: build(dropout), arrays(epochs=3, shuffle=True),
                crash_at)


def test_shuffled_resume_without_a_seed_says_it_is_not_exact(tmp_path, backends, caplog):
    supervised_fit(backends, tmp_path, lambda: build(plain), arrays(epochs=2, shuffle=True),
                   crash_at=12)

    def unseeded():
        model = build(plain)
        tf.random.set_seed(None)  # a kernel whose notebook sets no seed
        return model

    tf_config.disable_op_determinism()  # it requires a seed
    try:
        with caplog.at_level("INFO", logger="jupyter_supervisor"):
            supervised_fit(backends, tmp_path, unseeded, arrays(epochs=2, shuffle=True))
    finally:
        tf.config.experimental.enable_op_determinism()
    warned = [r.getMessage() for r in caplog.records if "shuffled anew" in r.getMessage()]
    assert warned == [
        "This fit resumes inside epoch 2 (after its batch 3) with shuffle=True and no global "
        "random seed: the epoch is shuffled anew, so the batches trained now are not the "
        "samples the interrupted epoch had left (some are seen twice in this epoch, some not "
        "at all), and the run differs from an uninterrupted one. For an exact resume, set a "
        "seed before building the model (keras.utils.set_random_seed(0)): Keras then draws "
        "the same order for the epoch in every run."]
    # Seeded, or unshuffled, a resume says nothing of the kind.
    caplog.clear()
    supervised_fit(backends, tmp_path / "seeded", lambda: build(plain),
                   arrays(epochs=2, shuffle=True), crash_at=12)
    supervised_fit(backends, tmp_path / "seeded", lambda: build(plain),
                   arrays(epochs=2, shuffle=True))
    assert "shuffled anew" not in caplog.text


# ------------------------------------------------------------------ a changed model is explained

def fit_then(tmp_path, backends, first, then, match):
    """Fits ``first()`` in the logdir, then ``then()`` (a fresh kernel's changed model) must be
    refused with ``match``; the logdir is unchanged by the refusal."""
    def saved():
        return {p.name: p.read_bytes() for p in tmp_path.iterdir()
                if p.name.startswith(("model.ckpt", "checkpoint"))}

    supervised_fit(backends, tmp_path, first, arrays(epochs=1))
    before = saved()
    with pytest.raises(CheckpointMismatchError, match=match):
        supervised_fit(backends, tmp_path, then, arrays(epochs=1))
    assert saved() == before


def with_optimizer(optimizer):
    def make():
        model = keras.Sequential([keras.Input((4,)), *plain(), keras.layers.Dense(1)])
        model.compile(optimizer(), "mse")
        return model
    return make


def test_dropped_optimizer_slots_are_named_and_refused(tmp_path, backends):
    fit_then(tmp_path, backends, with_optimizer(keras.optimizers.Adam),
             with_optimizer(keras.optimizers.SGD),
             r"holds optimizer state that the tracked optimizer has no place for: 8 value\(s\) "
             r"\(optimizer/_variables/2, .*\(SGD where it was Adam would drop Adam's moment "
             r"estimates\)\. Track the optimizer it was saved with")


def test_added_optimizer_slots_are_refused(tmp_path, backends):
    fit_then(tmp_path, backends, with_optimizer(keras.optimizers.SGD),
             with_optimizer(keras.optimizers.AdamW), r"it has no value for 8 variable\(s\)")


def test_a_precision_policy_change_is_named(tmp_path, backends):
    def mixed():
        keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            return build(plain)
        finally:
            keras.mixed_precision.set_global_policy("float32")

    fit_then(tmp_path, backends, mixed, lambda: build(plain),
             r"it was saved in mixed precision \(its optimizer was a LossScaleOptimizer\), and "
             r"the model now trains in full precision \(the dtype policy is 'float32'\)\. Set "
             r"the policy it was trained with")


def test_renamed_track_keys_are_reported_as_renamed(tmp_path, backends):
    def loop(sv, **objects):
        with sv.session():
            sv.track(**objects)
            sv.step()

    model = build(plain)
    loop(backends(tmp_path), model=model, optimizer=model.optimizer)
    again = build(plain)
    with pytest.raises(CheckpointMismatchError, match=(
            r"holds the tracked objects under other names: model \(now net\), optimizer "
            r"\(now opt\)\. Track them under the names they were saved with: "
            r"sv.track\(model=\.\.\., optimizer=\.\.\.\)")):
        loop(backends(tmp_path), net=again, opt=again.optimizer)


@pytest.mark.parametrize("value, shown", [
    (tf.function(lambda x: x), "<tensorflow.python.eager.polymorphic_function"),
    (lambda x: x, "<function "),
    (3, "3")])
def test_track_refuses_what_holds_no_variables(tmp_path, backends, value, shown):
    sv = backends(tmp_path)
    with sv.session():
        with pytest.raises(ValueError, match=(
                r"Invalid value for argument `fn`\. Received: fn=" + shown + r".*Expected a "
                r"trackable TensorFlow object that holds variables .*: a function or a number "
                r"holds no state to checkpoint")):
            sv.track(fn=value)


# ------------------------------------------------------- the training state beside the weights

@pytest.mark.parametrize("split", [False, True], ids=["one-thread-copy", "split-copy"])
def test_a_stop_while_a_periodic_write_runs_resumes_exactly(tmp_path, backends, monkeypatch,
                                                            split):
    """A stop inside epoch 2 while the periodic write of the step before still runs (held
    here until the training thread waits for it): the final checkpoint, copied once that write
    ended into the memory it read, is the state at the stop, and a fresh model resumed from it
    ends as the uninterrupted run: weights, every
    optimizer variable (the rates ReduceLROnPlateau set), the callbacks' decisions, on a
    tf.data pipeline shuffled anew each epoch. ``split``: every save's copy split across
    threads, as a model of many megabytes on several cores has it (``snapshot._copy``)."""
    from jupyter_supervisor.eager import snapshot as snapshots  # pylint: disable=C0415
    copiers = set()   # the threads that copied a part of a save's copy
    if split:
        copy_part = snapshots._copy_part  # pylint: disable=protected-access

        def recorded(part, errors):
            copiers.add(threading.current_thread())
            copy_part(part, errors)

        monkeypatch.setattr(snapshots, "_copy_part", recorded)
        monkeypatch.setattr(snapshots, "_cores", lambda: 3)
        monkeypatch.setattr(snapshots, "_PART_BYTES", 1)
    x, y = data()

    def inputs():
        """The fit's arguments, its dataset made anew (as a re-run cell makes it: the dataset
        object counts the orders its shuffle drew)."""
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=2).batch(8)
        return {"x": dataset, "epochs": 4, "verbose": 0}

    def callbacks():
        return [keras.callbacks.ReduceLROnPlateau("loss", factor=0.5, patience=0,
                                                  min_delta=10.0),
                keras.callbacks.EarlyStopping("loss", patience=5, min_delta=10.0)]

    def fit(logdir, **options):
        model, made = build(dropout), callbacks()
        sv = backends(logdir, **options)
        return model, made, sv

    whole, (plateau, stopping), sv = fit(tmp_path / "whole", save_model_secs=EVERY_STEP)
    with sv.session():
        whole.fit(**inputs(), callbacks=[sv.callback, plateau, stopping])

    stopped = tmp_path / "stopped"
    released = []   # whether the periodic write (of step 10) saw the training thread wait
    training = [threading.current_thread()]
    waiting = training_waits_for_a_write(monkeypatch, training)

    def held(path):
        if path.endswith("-10"):
            released.append(waiting.wait(60))

    before_each_write(monkeypatch, held)
    model, made, sv = fit(stopped, save_model_secs=1000)
    clock = FakeClock()
    sv._checkpointer.timer._clock = clock  # pylint: disable=protected-access

    def due():
        clock.now += 1000

    with sv.session():
        # Batch 10: a periodic save of step 10 (its write held); batch 11: a stop, whose final
        # checkpoint of step 11 waits for that write.
        model.fit(**inputs(), callbacks=[Script({10: due, 11: sv.request_stop}), sv.callback,
                                       *made])
    assert released == [True]
    assert tf.train.latest_checkpoint(str(stopped)).endswith("model.ckpt-11")
    assert len(copiers) > 3 or not split   # 3 a save, in threads that end with the copy

    resumed, (resumed_plateau, resumed_stopping), sv = fit(stopped, save_model_secs=EVERY_STEP)
    with sv.session():
        resumed.fit(**inputs(), callbacks=[sv.callback, resumed_plateau, resumed_stopping])
    assert int(resumed.optimizer.iterations) == int(whole.optimizer.iterations) == 32
    assert_same(state(resumed), state(whole))
    assert float(whole.optimizer.learning_rate) < 0.01   # the plateau decayed it
    assert (resumed_plateau.best, resumed_plateau.wait, resumed_plateau.cooldown_counter) == \
        (plateau.best, plateau.wait, plateau.cooldown_counter)
    assert (resumed_stopping.best, resumed_stopping.wait, resumed_stopping.stopped_epoch) == \
        (stopping.best, stopping.wait, stopping.stopped_epoch)


def val_data():
    """Validation data the model fits worse as it learns: its best epoch is the first."""
    x, y = data()
    return x[:16], y[:16] - 3.0


def fit_with(backends, logdir, make, callbacks, crash_at=None, **fit_kwargs):
    """One session of ``make()`` fit with ``callbacks()`` (made anew, as a fresh kernel's cells
    make them), crashed at batch ``crash_at``; returns (model, its History, the callbacks)."""
    model = make()
    made = callbacks()
    sv = backends(logdir, save_model_secs=EVERY_STEP)
    history = None
    with _crashing(crash_at):
        with sv.session():
            history = model.fit(**arrays(**fit_kwargs), verbose=0,
                                callbacks=[sv.callback, *made]
                                + ([Crash(crash_at)] if crash_at else []))
    sv.close()
    return model, history, made


def test_early_stopping_restores_the_best_weights_seen_before_the_crash(tmp_path, backends):
    """restore_best_weights=True: the best epoch (the first) is before the crash; its weights
    are in the checkpoint, and the resumed fit ends with them, as the uninterrupted one."""
    def callbacks():
        return [keras.callbacks.EarlyStopping(patience=3, restore_best_weights=True)]

    kwargs = {"epochs": 30, "validation_data": val_data()}
    make = lambda: build(dropout)  # noqa: E731
    whole, _, (stopping,) = fit_with(backends, tmp_path / "whole", make, callbacks, **kwargs)
    fit_with(backends, tmp_path / "crashed", make, callbacks, crash_at=20, **kwargs)
    resumed, _, (resumed_stopping,) = fit_with(backends, tmp_path / "crashed", make, callbacks,
                                               **kwargs)
    assert stopping.best_epoch == resumed_stopping.best_epoch < 2 < stopping.stopped_epoch
    assert_same(state(resumed), state(whole))


@pytest.mark.parametrize("append", [False, True])
def test_csv_logger_writes_the_uninterrupted_runs_rows(tmp_path, backends, append):
    """The rows of the epochs after the checkpoint are not written twice, and those before it
    are not lost (append=False empties the file when fit starts)."""
    def logger_in(folder):
        folder.mkdir(exist_ok=True)
        (folder / "log.csv").write_text("earlier run\n" if append else "")
        return lambda: [keras.callbacks.CSVLogger(str(folder / "log.csv"), append=append)]

    make = lambda: build(plain)  # noqa: E731
    fit_with(backends, tmp_path / "whole", make, logger_in(tmp_path / "w"), epochs=4)
    crashed = logger_in(tmp_path / "c")
    # Crashed in epoch 3, after the checkpoint of its batch 3 (its rows of epochs 1-2 written).
    fit_with(backends, tmp_path / "crashed", make, crashed, crash_at=20, epochs=4)
    fit_with(backends, tmp_path / "crashed", make,
             lambda: [keras.callbacks.CSVLogger(str(tmp_path / "c" / "log.csv"), append=append)],
             epochs=4)
    whole = (tmp_path / "w" / "log.csv").read_text()
    assert (tmp_path / "c" / "log.csv").read_text() == whole
    # The header (or, appended to, the earlier run's line: Keras writes no header then), and
    # the rows of the 4 epochs.
    assert len(whole.splitlines()) == 5


def test_a_fit_a_callback_ended_is_over_when_run_again(tmp_path, backends, caplog):
    """EarlyStopping ended the fit before its epochs: re-running the cell trains nothing, and
    the model is the one the fit ended with (the best weights restored again)."""
    def callbacks():
        return [keras.callbacks.EarlyStopping(patience=3, restore_best_weights=True)]

    kwargs = {"epochs": 30, "validation_data": val_data()}
    ended, history, _ = fit_with(backends, tmp_path, lambda: build(plain), callbacks, **kwargs)
    assert len(history.epoch) < 30
    with caplog.at_level("INFO", logger="jupyter_supervisor"):
        again, history_again, _ = fit_with(backends, tmp_path, lambda: build(plain), callbacks,
                                           **kwargs)
    assert history_again.history == history.history
    assert_same(state(again), state(ended))
    assert f"This fit had ended at epoch {len(history.epoch)} of 30: a callback stopped it" \
        in caplog.text


def test_max_steps_at_an_epochs_last_batch_lets_that_epoch_end(tmp_path, backends):
    """--max-steps 16 with 8 batches an epoch: epoch 2's validation and epoch-end callbacks run
    (its batches are all trained); the checkpoint is at the start of epoch 3."""
    model = build(plain)
    sv = backends(tmp_path, max_steps=16)
    with sv.session():
        history = model.fit(**arrays(epochs=5, validation_data=val_data()), verbose=0,
                            callbacks=[sv.callback])
    assert history.epoch == [0, 1] and len(history.history["val_loss"]) == 2
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path)))
    assert [int(reader.get_tensor(f"jupyter_supervisor/{n}/.ATTRIBUTES/VARIABLE_VALUE"))
            for n in ("epoch", "batch")] == [2, 0]


# ------------------------------------------------------- what cannot be exact is said, once

class Mine(keras.callbacks.Callback):
    """A callback of the user's, whose state is what ``state`` says."""

    def __init__(self, state=None):
        super().__init__()
        self.state = state if state is not None else {"seen": 0}

    def on_epoch_end(self, epoch, logs=None):
        if isinstance(self.state, dict) and "seen" in self.state:
            self.state["seen"] += 1

    def get_state(self):
        return self.state

    def set_state(self, state):
        self.state = state


def test_a_callback_added_or_removed_since_the_checkpoint_is_said(tmp_path, backends, caplog):
    fit_with(backends, tmp_path, lambda: build(plain),
             lambda: [Mine(), keras.callbacks.ReduceLROnPlateau(monitor="loss")],
             crash_at=12, epochs=2)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        _, _, (early, mine) = fit_with(
            backends, tmp_path, lambda: build(plain),
            lambda: [keras.callbacks.EarlyStopping(monitor="loss"), Mine()], epochs=2)
    notes = [r.getMessage() for r in caplog.records]
    assert notes.count("EarlyStopping has no state in the checkpoint (it was not among the "
                       "callbacks of the fit that wrote it): it starts afresh.") == 1
    assert notes.count("The checkpoint holds the state of a ReduceLROnPlateau callback, which "
                       "this fit does not have: it is not used.") == 1
    assert mine.state == {"seen": 2}   # one epoch before the crash, one after


class Counting(keras.callbacks.Callback):
    """A callback of the user's that keeps a count but has no get_state/set_state."""

    def __init__(self):
        super().__init__()
        self.epochs_seen = 0

    def on_epoch_end(self, epoch, logs=None):
        self.epochs_seen += 1


def test_a_callback_whose_state_cannot_be_saved_is_said(tmp_path, backends, caplog):
    """A callback of the user's with attributes of its own and no get_state/set_state starts
    afresh on a resume: said once, naming them. A fresh start says nothing."""
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        fit_with(backends, tmp_path, lambda: build(plain), lambda: [Counting()],
                 crash_at=12, epochs=2)
    assert not [r for r in caplog.records if "Counting" in r.getMessage()]
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        _, _, (counting,) = fit_with(backends, tmp_path, lambda: build(plain),
                                     lambda: [Counting()], epochs=2)
    notes = [r.getMessage() for r in caplog.records if "Counting" in r.getMessage()]
    assert notes == ["Counting has attributes of its own (epochs_seen) but no get_state() and "
                     "set_state(), so none of them is saved: it starts afresh on this resume. "
                     "If they change during training, give it the two methods "
                     "(docs/resume.md) to resume it as an uninterrupted fit would."]
    assert counting.epochs_seen == 1   # the epoch after the crash only: as the note says


def test_a_checkpoint_without_the_training_state_is_said(tmp_path, backends, caplog):
    """Written before the training state was saved (here: with it emptied): the callbacks and
    the epoch's means start afresh, each said once; the code's learning rate is kept."""
    supervised_fit(backends, tmp_path, lambda: build(plain), arrays(epochs=2), crash_at=12)
    from jupyter_supervisor.eager.checkpointer import _RunState  # pylint: disable=C0415
    path = tf.train.latest_checkpoint(str(tmp_path))
    old = build(plain)
    old.optimizer.build(old.trainable_variables)
    root = tf.train.Checkpoint(model=old, optimizer=old.optimizer,
                               jupyter_supervisor=_RunState({}))
    root.read(path).expect_partial()
    root.jupyter_supervisor.training.assign("")
    old.optimizer.learning_rate.assign(0.02)   # one training had reached
    root.write(path)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        model, _, _ = fit_with(backends, tmp_path, lambda: build(plain),
                               lambda: [keras.callbacks.EarlyStopping(monitor="loss")], epochs=2)
    notes = [r.getMessage() for r in caplog.records]
    assert sum("holds no callbacks' state" in n for n in notes) == 1
    assert sum("The running means of epoch 2" in n for n in notes) == 1
    assert sum(n.startswith("The learning rate of 'optimizer' is 0.01, the code's: the "
                            "checkpoint holds 0.02 but not the rate its code set") for n in notes) == 1
    assert float(model.optimizer.learning_rate) == pytest.approx(0.01)


def test_the_learning_rate_training_reached_is_kept_across_kernels(tmp_path, backends, caplog):
    """A rate changed during training (as ReduceLROnPlateau does) is restored in a fresh kernel,
    also after a resume in the same kernel (which saves the code's rate of the first run)."""
    class Lower(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.optimizer.learning_rate.assign(0.001)

    model = build(plain)
    sv = backends(tmp_path)
    with sv.session():
        model.fit(**arrays(epochs=1), verbose=0, callbacks=[sv.callback, Lower()])
    sv = backends(tmp_path)
    with sv.session():                            # the same kernel: nothing to decide
        sv.track(model=model, optimizer=model.optimizer)
        sv.save_now()
    assert float(model.optimizer.learning_rate) == pytest.approx(0.001)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        fresh, _, _ = fit_with(backends, tmp_path, lambda: build(plain), lambda: [], epochs=2)
    assert float(fresh.optimizer.learning_rate) == pytest.approx(0.001)
    assert [r.getMessage() for r in caplog.records if "learning rate" in r.getMessage()] == [
        f"The learning rate of 'optimizer' is 0.001, restored from the checkpoint: training had "
        f"changed it from the 0.01 the code sets (a callback such as ReduceLROnPlateau, or an "
        f"assignment). To train at another rate, change it in the code. "
        f"({tf.train.latest_checkpoint(str(tmp_path)).rsplit('-', 1)[0]}-8)"]


def test_a_learning_rate_changed_between_a_number_and_a_schedule_is_refused(tmp_path, backends):
    def scheduled():
        model = keras.Sequential([keras.Input((4,)), *plain(), keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(
            keras.optimizers.schedules.ExponentialDecay(0.01, 8, 0.5)), "mse")
        return model

    fit_then(tmp_path, backends, lambda: build(plain), scheduled,
             r"was written by an optimizer whose learning rate was a number, and the tracked one "
             r"\(adam(_\d+)?\) has a schedule: Keras numbers an optimizer's variables after its "
             r"learning rate, so the saved moment estimates cannot be restored into it\. Give "
             r"the optimizer the kind of learning rate it was saved with \(a number\)")


def test_a_callbacks_state_that_is_not_plain_json_is_refused_before_training(tmp_path,
                                                                              backends):
    model = build(plain)
    sv = backends(tmp_path)
    with pytest.raises(ValueError, match=(
            r"Invalid value for argument `Mine\.get_state\(\)`\. Received: Mine\.get_state\(\)="
            r"\{'at': \(1, 2\)\}\. Expected a dict of plain JSON values .*: it is saved as JSON "
            r"with each checkpoint, and \(1, 2\) is none")):
        with sv.session():
            model.fit(**arrays(epochs=1), verbose=0, callbacks=[sv.callback, Mine({"at": (1, 2)})])
    assert int(model.optimizer.iterations) == 0


def test_backup_and_restore_beside_sv_callback_is_refused(tmp_path, backends):
    model = build(plain)
    sv = backends(tmp_path / "logdir")
    with pytest.raises(ValueError, match=(
            r"Invalid value for argument `callbacks`\. Received: callbacks=\['SupervisorCallback',"
            r" 'BackupAndRestore', 'History'\]\. Expected sv\.callback without keras\.callbacks\."
            r"BackupAndRestore: both restore the model")):
        with sv.session():
            model.fit(**arrays(epochs=1), verbose=0, callbacks=[
                sv.callback, keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))])
