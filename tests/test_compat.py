"""A test per entry of ``compat``, against the installed libraries: each uses the private API
as the package does, so an upgrade that removes or changes one fails here, naming the entry,
before it fails somewhere in a run."""
import types

import numpy as np
import pytest
import tensorflow as tf

from jupyter_supervisor import compat

pytestmark = pytest.mark.internals

v1 = tf.compat.v1


@pytest.fixture
def graph():
    with tf.Graph().as_default() as g:
        yield g


def test_unfinalize(graph):
    v1.Variable(1.0)
    graph.finalize()
    compat.unfinalize(graph)
    assert not graph.finalized
    v1.Variable(2.0)  # ops can be added again


def test_session_manager_steps(graph):
    v = v1.Variable(3.0)
    manager = v1.train.SessionManager(ready_op=v1.report_uninitialized_variables())
    try_local_init, model_ready = compat.session_manager_steps(manager)
    with v1.Session(graph=graph) as sess:
        assert try_local_init(sess)[0] is True
        ready, not_ready = model_ready(sess)
        assert not ready and "Variable" in not_ready  # says what is not ready
        sess.run(v.initializer)
        assert model_ready(sess)[0] is True
    assert compat.session_manager_steps(object()) is None


def test_saver_var_list_and_saveables_by_key(graph):
    a, b = v1.Variable(1.0, name="a"), v1.Variable(2.0, name="b")
    saver = v1.train.Saver([a])
    listed = compat.saver_var_list(saver)
    assert [v.name for v in listed] == ["a:0"]
    assert compat.saver_var_list(None) is None
    assert sorted(compat.saveables_by_key([a, b])) == ["a", "b"]


def test_stop_event_is_set_is_the_coordinators_event():
    coord = v1.train.Coordinator()
    is_set = compat.stop_event_is_set(coord)
    assert is_set is not coord.should_stop  # the Event's own method, not the fallback
    assert not is_set()
    coord.request_stop()
    assert is_set()


def test_add_control_input(graph):
    first = v1.no_op(name="first")
    second = v1.no_op(name="second")
    compat.add_control_input(second, first)
    assert first in second.control_inputs


def test_checkpoint_tensors():
    variable = tf.Variable([1.0, 2.0])
    checkpoint = tf.train.Checkpoint(v=variable)
    serialized, registered = compat.checkpoint_tensors(checkpoint)
    assert registered == {}
    assert list(serialized[variable]) == ["v/.ATTRIBUTES/VARIABLE_VALUE"]
    assert list(serialized[None]) == ["_CHECKPOINTABLE_OBJECT_GRAPH"]   # the object graph


def test_call_flat_calls_a_traced_function_with_its_inputs_as_given():
    variables = [tf.Variable([1.0, 2.0]), tf.Variable(3, dtype=tf.int64)]
    function = tf.function(
        lambda a, b: [tf.raw_ops.ReadVariableOp(resource=a, dtype=tf.float32),
                      tf.raw_ops.ReadVariableOp(resource=b, dtype=tf.int64) + 1],
        input_signature=[tf.TensorSpec([], tf.resource)] * 2).get_concrete_function()
    first, second = compat.call_flat(function, [v.handle for v in variables])
    assert first.numpy().tolist() == [1.0, 2.0] and int(second) == 4


def test_is_trackable():
    import keras  # pylint: disable=C0415
    for value in (tf.Variable(1.0), tf.Module(), keras.optimizers.SGD(), keras.Variable(1.0),
                  tf.train.Checkpoint(), iter(tf.data.Dataset.range(2)),
                  tf.function(lambda: 1)):  # trackable, holding nothing (eager/eager_supervisor)
        assert compat.is_trackable(value), value
    for value in (3, tf.constant(1.0), types.SimpleNamespace(), lambda: 1):
        assert not compat.is_trackable(value), value


def test_serializes_to_tensors_tells_a_keras_variable():
    import keras  # pylint: disable=C0415
    assert "_serialize_to_tensors" in vars(tf.__internal__.tracking.Trackable)
    variable = keras.Variable([1.0, 2.0])
    assert isinstance(variable.value, tf.Variable)  # what eager/variables relies on too
    assert compat.serializes_to_tensors(variable) and compat.serializes_to_tensors(tf.Module())
    assert not compat.serializes_to_tensors(types.SimpleNamespace(value=variable.value))


def test_saves_own_tensors():
    iterator = iter(tf.data.Dataset.range(3))
    assert compat.saves_own_tensors(iterator)
    assert not compat.saves_own_tensors(tf.Module())


def test_checkpoint_object_graph(tmp_path):
    from google.protobuf import message  # pylint: disable=C0415
    path = tf.train.Checkpoint(v=tf.Variable([1.0])).write(str(tmp_path / "c"))
    graph = compat.checkpoint_object_graph(
        tf.train.load_checkpoint(path).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    [child] = [c for c in graph.nodes[0].children if c.local_name == "v"]
    assert [(a.name, a.checkpoint_key) for a in graph.nodes[child.node_id].attributes] == [
        ("VARIABLE_VALUE", "v/.ATTRIBUTES/VARIABLE_VALUE")]
    with pytest.raises(message.DecodeError):
        compat.checkpoint_object_graph(b"\xff not a graph")


def test_save_parts_is_where_tensorflows_sharded_saves_write_their_parts(tmp_path):
    """A v1 sharded Saver whose merge is refused leaves its parts at ``save_parts``; a traced
    TF2 Checkpoint.write holds the same suffixes (its parts are merged before it returns)."""
    import os  # pylint: disable=C0415
    path = str(tmp_path / "model.ckpt-7")
    parts = compat.save_parts(path)
    assert parts == (path + "_temp/part", path + "_temp", path + ".part")
    assert compat.save_parts("s3://bucket/m-7").prefix == "s3://bucket/m-7.part"
    with tf.Graph().as_default() as graph:
        variable = v1.Variable([1.0, 2.0])
        saver = v1.train.Saver(sharded=True)
        merge = next(op for op in graph.get_operations() if op.type == "MergeV2Checkpoints")
        compat.add_control_input(merge, v1.Assert(tf.reduce_all(variable < 0), ["no"]))
        with v1.Session() as sess:
            sess.run(variable.initializer)
            with pytest.raises(tf.errors.InvalidArgumentError):
                saver.save(sess, path)
    assert os.listdir(parts.directory) and all(
        os.path.join(parts.directory, name).startswith(parts.prefix + "-")
        for name in os.listdir(parts.directory))
    checkpoint = tf.train.Checkpoint(v=tf.Variable([1.0]))
    write = tf.function(checkpoint.write).get_concrete_function(tf.TensorSpec([], tf.string))
    strings = {tf.make_ndarray(op.get_attr("value")).item() for op in
               write.graph.get_operations()
               if op.type == "Const" and op.get_attr("dtype") == tf.string}
    suffix = compat.save_parts("p")
    assert {suffix.prefix[1:].encode(), suffix.s3_prefix[1:].encode()} <= strings


def test_update_checkpoint_state(tmp_path):
    logdir = str(tmp_path)
    compat.update_checkpoint_state(logdir, f"{logdir}/m-2", [f"{logdir}/m-1", f"{logdir}/m-2"])
    state = tf.train.get_checkpoint_state(logdir)
    assert state.model_checkpoint_path.endswith("m-2")
    text = (tmp_path / "checkpoint").read_text()
    assert 'model_checkpoint_path: "m-2"' in text  # relative, as CheckpointManager writes


def test_event_file_writer_writes_events_as_they_are(tmp_path):
    """In eager mode (where TF1's FileWriter refuses), a SessionLog and a summary, read back
    in order from the one file whose name ends in the suffix."""
    log = v1.SessionLog
    summary = v1.Summary(value=[v1.Summary.Value(tag="loss", simple_value=0.5)])
    writer = compat.event_file_writer(str(tmp_path), ".jsv-test")
    writer.add_event(v1.Event(step=3, wall_time=1.0, session_log=log(status=log.START)))
    writer.add_event(v1.Event(step=4, wall_time=2.0, summary=summary))
    writer.close()
    [name] = [p.name for p in tmp_path.iterdir()]
    assert name.startswith("events.out.tfevents.") and name.endswith(".jsv-test")
    read = [e for e in v1.train.summary_iterator(str(tmp_path / name)) if e.step]
    assert [(e.step, e.WhichOneof("what")) for e in read] == [(3, "session_log"), (4, "summary")]
    assert read[0].session_log.status == log.START and read[1].summary == summary


def test_report_error_to_cluster_exists():
    # Its effect needs a multi-worker cluster: tests/test_tf_replicas.py runs one.
    from tensorflow.python.eager import context  # pylint: disable=C0415
    assert callable(getattr(context.context(), "report_error_to_cluster", None))


def test_global_seed():
    before = compat.global_seed()
    try:
        tf.random.set_seed(1234)
        assert compat.global_seed() == 1234
    finally:
        tf.random.set_seed(before)
    assert compat.global_seed() == before


def _tiny_model():
    import keras  # pylint: disable=C0415
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def test_set_initial_epoch_makes_fit_start_there():
    model = _tiny_model()
    x, y = np.zeros((4, 2), "float32"), np.zeros((4, 1), "float32")
    compat.set_initial_epoch(model, 2)
    history = model.fit(x, y, epochs=3, verbose=0)
    assert history.epoch == [2]
    compat.set_initial_epoch(model, None)
    assert model.fit(x, y, epochs=2, verbose=0).epoch == [0, 1]


def test_is_fit_validation_tells_fits_evaluate_from_a_users():
    model = _tiny_model()
    x, y = np.zeros((4, 2), "float32"), np.zeros((4, 1), "float32")
    original, calls = model.evaluate, []

    def evaluate(*args, **kwargs):  # as eager/keras_callback wraps it
        calls.append(compat.is_fit_validation(kwargs))
        return original(*args, **kwargs)

    model.evaluate = evaluate
    model.fit(x, y, epochs=2, validation_data=(x, y), verbose=0)
    model.evaluate(x, y, verbose=0)
    assert calls == [True, True, False]


def test_constants_used_sees_keyword_names_and_keys_also_nested():
    from jupyter_supervisor.compat.registry import constants_used  # pylint: disable=C0415

    def function(call, kwargs):
        return call(_flag=True), kwargs.pop("key", None), [call(other=1) for _ in range(1)]

    assert constants_used(function, "_flag", "key", "other")
    assert not constants_used(function, "_flag", "absent")


def test_fit_argument_reads_the_running_fit():
    import keras  # pylint: disable=C0415
    model = _tiny_model()
    seen = {}

    class Probe(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen["shuffle"] = compat.fit_argument(self.model, "shuffle")
            seen["x"] = compat.fit_argument(self.model, "x")

    x, y = np.zeros((4, 2), "float32"), np.zeros((4, 1), "float32")
    model.fit(x, y, epochs=1, verbose=0, shuffle=False, callbacks=[Probe()])
    assert seen["shuffle"] is False and seen["x"] is x
    assert compat.fit_argument(model, "shuffle") is None  # outside fit


def _in_fit(model, x, probe, **fit):
    """Calls ``probe(epoch_iterator)`` at each callback hook it names, inside ``model.fit``."""
    import keras  # pylint: disable=C0415

    class Probe(keras.callbacks.Callback):
        pass

    for hook in probe:
        setattr(Probe, hook, lambda self, *a, hook=hook, **k: probe[hook](
            compat.fit_epoch_iterator(self.model)))
    model.fit(x, verbose=0, callbacks=[Probe()], **fit)


def test_the_epoch_iterator_counts_makes_and_draws_fit_iterators():
    """fit_epoch_iterator, count_iterators, make_iterators, count_drawn, current_iterator and
    the adapter entries, as the data position uses them."""
    model = _tiny_model()
    x = np.zeros((8, 2), "float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).shuffle(8, seed=1).batch(2)
    made, seen = [], {}

    def begin(epochs):
        seen["kind"] = compat.input_kind(epochs.data_adapter)
        seen["dataset"] = compat.adapter_dataset(epochs.data_adapter)
        compat.count_iterators(epochs, lambda: made.append(1))
        compat.make_iterators(epochs, 2)  # not counted

    def epoch_end(epochs):
        seen.setdefault("current", []).append(compat.current_iterator(epochs))

    _in_fit(model, dataset, {"on_train_begin": begin, "on_epoch_end": epoch_end}, epochs=2)
    assert seen["kind"] == "tf.data" and seen["dataset"] is dataset
    assert len(made) == 4  # each epoch's, and one made when its data ran through
    assert all(current is not None for current in seen["current"])
    assert compat.fit_epoch_iterator(model) is None  # outside fit

    steps = []

    def first_batch(epochs):
        if not steps:
            compat.count_drawn(epochs, 3)  # after fit made the epoch's iterator
            steps.append(epochs._steps_seen)  # pylint: disable=protected-access

    _in_fit(model, dataset.repeat(), {
        "on_train_batch_begin": first_batch,
        "on_epoch_end": lambda epochs: steps.append(epochs._steps_seen)},  # pylint: disable=W0212
        epochs=1, steps_per_epoch=2)
    assert steps == [1 + 3, 2 + 3]


def test_the_epoch_dataset_is_read_and_replaced():
    model = _tiny_model()
    x = np.zeros((8, 2), "float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(2)
    other = tf.data.Dataset.from_tensor_slices((x[:4], x[:4, :1])).batch(2)
    seen = {}

    def begin(epochs):
        seen["dataset"] = compat.epoch_dataset(epochs)
        compat.set_epoch_dataset(epochs, other)
        seen["iterated"] = type(epochs)._get_iterator(epochs)  # pylint: disable=W0212

    _in_fit(model, dataset, {"on_train_begin": begin}, epochs=1)
    assert seen["dataset"] is dataset  # the default strategy distributes it as it is
    assert seen["iterated"] is other


def _orders(dataset, iterators):
    return [[int(v) for v in dataset] for _ in range(iterators)]


@pytest.mark.parametrize("make", [
    lambda: tf.data.Dataset.range(12).cache().shuffle(12, seed=1).map(
        lambda v: v * 2, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2),
    lambda: tf.data.Dataset.range(12).shuffle(12, seed=2).shuffle(6, seed=3).take(9),
    lambda: tf.data.Dataset.range(6).shuffle(6, seed=2).repeat(2),
    lambda: tf.data.Dataset.random(seed=4, rerandomize_each_iteration=True).take(5).map(
        lambda v: v % 100),
    lambda: tf.data.Dataset.range(12).shuffle(12, seed=5).with_options(tf.data.Options()),
], ids=["cache-shuffle-map-prefetch", "two shuffles", "shuffle-repeat", "random", "options"])
def test_a_rebuilt_dataset_draws_the_orders_of_one_built_anew(make):
    expected = _orders(make(), 5)
    used = make()
    assert _orders(used, 3) == expected[:3]
    assert _orders(compat.rebuilt_dataset(used, 10**6), 4) == expected[:4]
    assert _orders(used, 1) == expected[3:4]   # the used one's counter is left where it was


def test_a_dataset_with_state_or_over_the_limit_is_not_rebuilt():
    def rows():
        yield from range(6)

    made = tf.data.Dataset.from_generator(rows, output_signature=tf.TensorSpec((), tf.int64))
    with pytest.raises(ValueError, match=r"^it holds state outside its graph"):
        compat.rebuilt_dataset(made.shuffle(6, seed=1), 10**6)
    noisy = tf.data.Dataset.range(6).map(lambda v: v + tf.random.uniform([], 0, 3, tf.int64))
    with pytest.raises(ValueError, match=r"a stateful op"):
        compat.rebuilt_dataset(noisy.shuffle(6, seed=1), 10**6)
    arrays = tf.data.Dataset.from_tensor_slices(np.zeros((1000, 1000), "float32"))
    with pytest.raises(ValueError, match=r"^its graph holds 4 MB .*more than the 1 MB"):
        compat.rebuilt_dataset(arrays.shuffle(10, seed=1), 10**6)


def test_the_adapters_of_arrays_generators_and_py_datasets():
    import keras  # pylint: disable=C0415
    from keras.src.trainers.data_adapters import get_data_adapter  # pylint: disable=C0415
    x = np.zeros((10, 2), "float32")
    arrays = get_data_adapter(x, x, batch_size=4, shuffle=True)
    assert compat.input_kind(arrays) == "arrays" and compat.array_samples(arrays) == 10
    assert compat.shuffles_arrays(arrays)

    drawn = []

    def batches():
        for i in range(5):
            drawn.append(i)
            yield x[:2], x[:2]

    generator = get_data_adapter(batches())
    assert compat.input_kind(generator) == "generator"
    compat.drain_generator(generator)
    assert drawn == [0, 1, 2, 3, 4]

    class Two(keras.utils.PyDataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return x[:2], x[:2]

    py_dataset = get_data_adapter(Two(), shuffle=True)
    assert compat.input_kind(py_dataset) == "PyDataset"
    assert compat.py_dataset_shuffles(py_dataset)
    import random  # pylint: disable=C0415
    random.seed(5)
    random.shuffle(list(range(3)))  # what the adapter's pass over 3 shuffled batches draws
    after = random.random()
    random.seed(5)
    compat.shuffle_batch_indices(3)
    assert random.random() == after


def test_keras_seed_set():
    import keras  # pylint: disable=C0415
    from keras.src.backend.common import global_state  # pylint: disable=C0415
    from keras.src.utils import rng_utils  # pylint: disable=C0415
    if not hasattr(rng_utils, "GLOBAL_RANDOM_SEED"):  # Keras before 3.10 records no seed:
        before = compat.global_seed()                 # TensorFlow's global seed tells
        try:
            keras.utils.set_random_seed(3)
            assert not compat.keras_seed_set() and compat.global_seed() == 3
        finally:
            tf.random.set_seed(before)
        return
    before = global_state.get_global_attribute("global_random_seed")
    try:
        global_state.set_global_attribute("global_random_seed", None)
        assert not compat.keras_seed_set()
        keras.utils.set_random_seed(3)
        assert compat.keras_seed_set()
    finally:
        global_state.set_global_attribute("global_random_seed", before)


def test_random_nodes_reads_seeds_reshuffling_and_what_is_above():
    """The attributes read; which transformations count as one pass is checked against
    TensorFlow in test_data_position.py."""
    shuffled = tf.data.Dataset.range(4).shuffle(4, seed=2)
    assert compat.random_nodes(shuffled.batch(2)) == [("shuffle", True, True, False)]
    assert compat.random_nodes(shuffled.repeat(2)) == [("shuffle", True, True, True)]
    assert compat.random_nodes(shuffled.repeat(1)) == [("shuffle", True, True, False)]
    fixed = tf.data.Dataset.range(4).shuffle(4, seed=2, reshuffle_each_iteration=False)
    assert compat.random_nodes(fixed) == [("shuffle", True, False, False)]
    assert compat.random_nodes(tf.data.Dataset.random(seed=1, rerandomize_each_iteration=True)) \
        == [("random", True, True, False)]


def test_reshuffling_nodes_are_the_shared_dataset_objects():
    shuffled = tf.data.Dataset.range(8).shuffle(8, seed=2)
    (train,), (validation,) = (compat.reshuffling_nodes(shuffled.take(6).batch(2)),
                               compat.reshuffling_nodes(shuffled.skip(6)))
    assert train is validation is shuffled
    fixed = tf.data.Dataset.range(8).shuffle(8, seed=2, reshuffle_each_iteration=False)
    assert compat.reshuffling_nodes(fixed.take(6)) == []


def test_fit_callbacks_and_data_spec_read_the_running_fit():
    import keras  # pylint: disable=C0415
    model = _tiny_model()
    seen = {}

    class Probe(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen["callbacks"] = compat.fit_callbacks(self.model)
            seen["spec"] = compat.fit_data_spec(self.model)

    probe = Probe()
    x, y = np.zeros((4, 2), "float32"), np.zeros((4, 1), "float32")
    model.fit(x, y, epochs=1, verbose=0, callbacks=[probe])
    assert isinstance(seen["callbacks"], keras.callbacks.CallbackList), \
        "fit's local `callbacks` is no longer the CallbackList it calls"
    assert probe in seen["callbacks"].callbacks
    assert seen["spec"][0].shape.as_list()[-1] == 2
    assert compat.fit_callbacks(model) is None and compat.fit_data_spec(model) is None


def test_learning_rate_name_is_a_variable_for_a_number_and_absent_for_a_schedule(tmp_path):
    import keras  # pylint: disable=C0415
    name = compat.learning_rate_name()
    number = keras.optimizers.Adam(0.01)
    schedule = keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9))
    for optimizer in (number, schedule):
        optimizer.build([keras.Variable([1.0])])
    child = tf.train.TrackableView(number).children(number).get(name)
    assert isinstance(getattr(child, "value", None), tf.Variable)
    assert float(child.numpy()) == pytest.approx(0.01)
    assert name not in tf.train.TrackableView(schedule).children(schedule)
    path = tf.train.Checkpoint(optimizer=number).write(str(tmp_path / "c"))
    assert any(key.startswith(f"optimizer/{name}/") for key, _ in tf.train.list_variables(path))


def test_callback_state_attributes_are_the_callbacks():
    import keras  # pylint: disable=C0415
    made = {keras.callbacks.ModelCheckpoint: lambda: keras.callbacks.ModelCheckpoint("m.keras"),
            keras.callbacks.TensorBoard: keras.callbacks.TensorBoard,
            keras.callbacks.SwapEMAWeights: keras.callbacks.SwapEMAWeights}
    for kind, names in compat.callback_state_attributes().items():
        callback = made[kind]()
        for name in names:
            assert hasattr(callback, name), f"keras {kind.__name__}.{name} is gone"


def test_symbolic_build_makes_a_subclassed_models_variables():
    import keras  # pylint: disable=C0415

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    model = Net()
    model.compile("adam", "mse", metrics=["mae"])
    assert compat.compiled_unbuilt(model)
    compat.symbolic_build(model, (keras.KerasTensor((None, 3)), keras.KerasTensor((None, 2))))
    assert model.built and len(model.weights) == 2 and model.optimizer.built
    assert not compat.compiled_unbuilt(model)


def test_parent_poller_module_and_its_os():
    from ipykernel import parentpoller  # pylint: disable=C0415
    app = types.SimpleNamespace(poller=parentpoller.ParentPollerUnix())
    module = compat.parent_poller_module(app)
    assert module is parentpoller and module.os is parentpoller.os
    exits = []
    wrapped = compat.PollerOs(types.SimpleNamespace(_exit=exits.append, getpid=lambda: 7),
                              before_exit=lambda: exits.append("before"))
    wrapped._exit(1)  # pylint: disable=protected-access
    assert exits == ["before", 1] and wrapped.getpid() == 7
    assert compat.parent_poller_module(types.SimpleNamespace(poller=None)) is None
    with pytest.raises(compat.CompatError, match="ParentPollerUnix"):
        compat.parent_poller_module(types.SimpleNamespace(poller=object()))


def test_ipython_and_matplotlib_entries():
    """The kernel's display publisher, IPython's post-execute callbacks, matplotlib-inline's
    flush and pyplot's figure managers, in a real InteractiveShell with the inline backend."""
    import matplotlib  # pylint: disable=C0415
    from IPython.core.interactiveshell import InteractiveShell  # pylint: disable=C0415
    from matplotlib_inline import backend_inline  # pylint: disable=C0415
    shell = InteractiveShell.instance()  # the suite's one shell (conftest's ``ip``)
    assert compat.kernel_display_publisher(types.SimpleNamespace(display_pub=None)) is None
    assert isinstance(compat.post_execute_callbacks(shell), list)
    assert compat.is_inline_flush(backend_inline.flush_figures)
    assert not compat.is_inline_flush(print)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=C0415
    figure = plt.figure()
    try:
        assert any(m.canvas.figure is figure for m in compat.pyplot_figure_managers().values())
    finally:
        plt.close(figure)
    assert not any(m.canvas.figure is figure for m in compat.pyplot_figure_managers().values())


def test_shutdown_request_tables():
    """ipykernel's Kernel dispatches shutdown_request from its handler tables, built from these
    message-type lists (a real kernel's restart is tested in test_preemption.py)."""
    from ipykernel.kernelbase import Kernel  # pylint: disable=C0415
    assert "shutdown_request" in Kernel.control_msg_types
    handler = object()
    kernel = types.SimpleNamespace(control_handlers={"shutdown_request": handler},
                                   shell_handlers={"execute_request": object()})
    tables = compat.shutdown_request_tables(kernel)
    assert list(tables) == ["control_handlers"]
    assert tables["control_handlers"]["shutdown_request"] is handler
    assert compat.shutdown_request_tables(object()) == {}


def test_session_closed_reads_a_session_s_close():
    with tf.Graph().as_default():
        sess = v1.Session()
        assert not compat.session_closed(sess)
        sess.close()
        assert compat.session_closed(sess)
    assert not compat.session_closed(object())


def test_session_interface_is_what_tf_sessions_derive_from():
    assert issubclass(v1.Session, compat.session_interface())
    assert issubclass(v1.InteractiveSession, compat.session_interface())


def test_meta_graph_def_holds_the_graph_and_the_saver():
    with tf.Graph().as_default() as graph:
        v1.Variable(1.0, name="w")
        saver = v1.train.Saver()
        meta = compat.meta_graph_def(graph, saver)
    assert any(node.name == "w" for node in meta.graph_def.node)
    assert meta.saver_def.filename_tensor_name == saver.saver_def.filename_tensor_name
    assert compat.meta_graph_def(graph, None).saver_def.filename_tensor_name == ""


def test_deprecations_silenced_is_a_context():
    with compat.deprecations_silenced():
        pass


def test_widget_display_data_of_ipywidgets_and_anywidget():
    import anywidget  # pylint: disable=C0415
    import ipywidgets  # pylint: disable=C0415

    class View(anywidget.AnyWidget):
        _esm = "export default { render() {} };"

    for widget in (ipywidgets.HTML("x"), View()):
        data = compat.widget_display_data(widget)
        view = data["application/vnd.jupyter.widget-view+json"]
        assert view["model_id"] == widget.model_id and "text/plain" in data
        data["text/plain"] = "changed"
        assert compat.widget_display_data(widget)["text/plain"] != "changed"
        widget.close()
