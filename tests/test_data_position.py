"""The data position's parts that need no kernel (the resumes themselves are in
test_data_resume.py): which tf.data pipelines a resume replays by making iterators, checked
against TensorFlow itself for every transformation the list names; a checkpoint written before
the input was recorded; a Keras whose fit keeps no epoch iterator where it is read."""
import pytest
import tensorflow as tf
import keras

from eager_models import at_batch, crash, data
from jupyter_supervisor import compat
from jupyter_supervisor.eager import data_position
from jupyter_supervisor.eager.variables import STATE_NAME

pytestmark = pytest.mark.internals

EVERY_STEP = 1e-9


def _range():
    return tf.data.Dataset.range(12)


# Each transformation, above a seeded shuffle reshuffled at each iteration (or beside it).
PIPELINES = {
    "map": lambda d: d.map(lambda v: v + 1),
    "parallel map": lambda d: d.map(lambda v: v + 1, num_parallel_calls=2),
    "batch": lambda d: d.batch(3),
    "parallel batch": lambda d: d.batch(3, num_parallel_calls=2),
    "padded_batch": lambda d: d.padded_batch(3),
    "ragged_batch": lambda d: d.ragged_batch(3),
    "prefetch": lambda d: d.prefetch(2),
    "filter": lambda d: d.filter(lambda v: v % 2 == 0),
    "take": lambda d: d.take(5),
    "skip": lambda d: d.skip(2),
    "shard": lambda d: d.shard(2, 0),
    "unbatch": lambda d: d.batch(3).unbatch(),
    "rebatch": lambda d: d.batch(4).rebatch(2),
    "with_options": lambda d: d.with_options(tf.data.Options()),
    "zip": lambda d: tf.data.Dataset.zip((_range(), d)),
    "enumerate": lambda d: d.enumerate(),
    "interleave": lambda d: d.interleave(tf.data.Dataset.from_tensors, cycle_length=2),
    "parallel interleave": lambda d: d.interleave(tf.data.Dataset.from_tensors,
                                                  cycle_length=2, num_parallel_calls=2),
    "flat_map": lambda d: d.flat_map(tf.data.Dataset.from_tensors),
    "window": lambda d: d.window(3).flat_map(lambda w: w),
    "group_by_window": lambda d: d.group_by_window(lambda v: v % 2, lambda k, w: w.batch(2),
                                                   2).unbatch(),
    "scan": lambda d: d.scan(tf.constant(0, tf.int64), lambda s, v: (s + v, s + v)),
    "take_while": lambda d: d.take_while(lambda v: v < 100),
    "ignore_errors": lambda d: d.ignore_errors(),
    "unique": lambda d: d.unique(),
    "assert_cardinality": lambda d: d.apply(tf.data.experimental.assert_cardinality(12)),
    "sample_from_datasets": lambda d: tf.data.Dataset.sample_from_datasets(
        [d, _range()], seed=3),
    "choose_from_datasets": lambda d: tf.data.Dataset.choose_from_datasets(
        [d, _range()], tf.data.Dataset.range(2).repeat(12)),
    "concatenate after": lambda d: d.concatenate(_range()),
    # Not replayable by making iterators: each draws its shuffle's seeds while it runs.
    "repeat": lambda d: d.repeat(2),
    "cache": lambda d: d.cache(),
    "concatenate before": lambda d: _range().concatenate(d),
}
NOT_REPLAYABLE = ("repeat", "cache", "concatenate before")


def _values(dataset):
    return [tf.nest.map_structure(lambda t: t.numpy().tolist(), element)
            for element in dataset]


@pytest.mark.parametrize("name", list(PIPELINES))
def test_making_iterators_replays_the_pipelines_it_is_said_to(name):
    """The third pass over a pipeline equals one over a new pipeline of which two iterators
    were made and dropped unread, exactly when ``random_nodes`` finds no reshuffling shuffle
    below a transformation outside its list."""
    def pipeline():
        return PIPELINES[name](_range().shuffle(12, seed=1))

    used = pipeline()
    third = [_values(used) for _ in range(3)][2]
    replayed = pipeline()
    iter(replayed)
    iter(replayed)
    exact = _values(replayed) == third
    below = [below for kind, _, again, below in compat.random_nodes(replayed)
             if kind == "shuffle" and again]
    assert below, compat.random_nodes(replayed)
    assert exact == (name not in NOT_REPLAYABLE)
    assert any(below) == (name in NOT_REPLAYABLE)


def test_unseeded_and_fixed_random_transformations_are_told_apart():
    tf.random.set_seed(None)
    unseeded = tf.data.Dataset.range(4).shuffle(4)
    fixed = tf.data.Dataset.range(4).shuffle(4, seed=2, reshuffle_each_iteration=False)
    picked = tf.data.Dataset.sample_from_datasets([unseeded, fixed], seed=None)
    assert sorted(compat.random_nodes(picked)) == [
        ("random", False, False, False), ("shuffle", False, True, False),
        ("shuffle", True, False, False)]


# ------------------------------------------------------------------------------ fits

def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    return model


def _dataset():
    x, y = data()
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=1).batch(8)


def _fit(backends, logdir, crash_at=None):
    model = _model()
    sv = backends(logdir, save_model_secs=EVERY_STEP)
    callbacks = [sv.callback] + ([at_batch(crash_at, crash)] if crash_at else [])
    try:
        with sv.session():
            model.fit(_dataset(), epochs=2, verbose=0, callbacks=callbacks)
    except RuntimeError as e:
        if crash_at is None:
            raise
        assert str(e) == "crash"
    sv.close()
    return model


def test_a_checkpoint_without_the_input_record_restores_and_says_so(tmp_path, backends,
                                                                     caplog):
    """One written before the input's position was saved (epoch 2, batch 3 of a tf.data
    fit): the resume goes on, skipping 3 batches of a new iterator, and says it may differ."""
    model = _model()
    model.optimizer.build(model.trainable_variables)
    old = tf.Module(name=STATE_NAME)
    for name, value in (("step", 11), ("fit", 0), ("epoch", 1), ("batch", 3)):
        setattr(old, name, tf.Variable(value, dtype=tf.int64,
                                       name="global_step" if name == "step" else name))
    tf.train.Checkpoint(model=model, optimizer=model.optimizer, jupyter_supervisor=old) \
        .save(str(tmp_path / "model.ckpt"))
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        resumed = _fit(backends, tmp_path)
    assert int(resumed.optimizer.iterations) == 8 - 3
    notes = [r.getMessage() for r in caplog.records]
    assert notes[0] == data_position.NO_POSITION % (tmp_path / "model.ckpt-1", 2,
                                                    "a tf.data.Dataset", 3)
    # The checkpoint holds no training state either (callback_state): the epoch's means too.
    assert [n.split(" (")[0] for n in notes[1:]] == ["The running means of epoch 2"]


def test_a_keras_without_the_epoch_iterator_says_it_cannot_keep_the_position(
        tmp_path, backends, caplog, monkeypatch):
    """Another Keras whose fit keeps no ``epoch_iterator`` (``compat.fit_epoch_iterator``
    reads None): the resume skips the epoch's batches of a new iterator, and says so."""
    _fit(backends, tmp_path, crash_at=12)
    monkeypatch.setattr(compat, "fit_epoch_iterator", lambda model: None)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        _fit(backends, tmp_path)
    # What the package said (TensorFlow 2.16 adds a retracing warning of its own).
    assert [r.getMessage() for r in caplog.records if r.name == "jupyter_supervisor"] == [
        data_position.UNREADABLE_FIT % (2, 3, 3)]
