"""Every use of another library's private API, in one place.

TensorFlow, Keras and ipykernel offer no public way to do these things; each is a small
function here, saying what it reaches into, why, and the versions it was checked against, so
that an upgrade means reading this file (and ``tests/test_compat.py``, which has a test per
entry that fails loudly, naming the entry, when what it reaches into is gone).

Checked against: TensorFlow 2.16-2.21, Keras 3.15, ipykernel 6.29-7.4, IPython 8-9,
matplotlib 3.7-3.11 and matplotlib-inline 0.1-0.2 (the data position's entries: TensorFlow
2.21, Keras 3.15.1).

The libraries are imported when an entry is used, so that this module serves the
TensorFlow-free layers (``%load_ext``, ``view/``) too.
"""
import sys
from typing import Callable, List, Optional, Tuple


class CompatError(RuntimeError):
    """A private API this package relies on is not in the installed library any more."""


def _missing(what: str, library: str) -> CompatError:
    return CompatError(
        f"{what} is not in the installed {library}: jupyter_supervisor relies on it (see "
        "jupyter_supervisor/compat.py). Install a version it was checked against (the file "
        "says which), or report the versions you have.")


# ---------------------------------------------------------------------------- TensorFlow (graph)

def unfinalize(graph) -> None:
    """``Graph._unsafe_unfinalize()``: a run finalizes the user's default graph while it trains
    (as TF's Supervisor does); afterwards the notebook must be able to add ops to it again."""
    method = getattr(graph, "_unsafe_unfinalize", None)
    if method is None:
        raise _missing("tf.Graph._unsafe_unfinalize", "TensorFlow")
    method()


def session_manager_steps(manager) -> Optional[tuple]:
    """``(try_run_local_init_op(sess), model_ready(sess))`` of a ``SessionManager``: the two
    halves of one ``wait_for_session`` try, so that a waiting worker can say what is not ready
    and be stopped between tries (``wait_for_session`` gives neither). None for a session
    manager without them (a user's own kind)."""
    local_init = getattr(manager, "_try_run_local_init_op", None)
    ready = getattr(manager, "_model_ready", None)
    if local_init is None or ready is None:
        return None
    return local_init, ready


def saver_var_list(saver):
    """``Saver._var_list``: what a Saver restores, to name the variables a checkpoint has no
    value for before ``restore`` fails with TensorFlow's own message (None: every global
    variable and saveable object)."""
    if saver is None:
        return None
    if not hasattr(saver, "_var_list"):
        raise _missing("tf.compat.v1.train.Saver._var_list", "TensorFlow")
    return saver._var_list  # pylint: disable=protected-access


def saveables_by_key(var_list) -> dict:
    """``saveable_object_util.op_list_to_dict``: {checkpoint key: variable or saveable}, the
    keys a Saver of ``var_list`` writes (the Saver's own mapping)."""
    from tensorflow.python.training.saving import saveable_object_util  # pylint: disable=import-outside-toplevel
    return saveable_object_util.op_list_to_dict(var_list)


def stop_event_is_set(coord) -> Callable[[], bool]:
    """The C method behind ``Coordinator.should_stop`` (``_stop_event.is_set``): it runs at
    every step of a graph loop, a Python call fewer. Falls back to ``should_stop``."""
    event = getattr(coord, "_stop_event", None)
    return getattr(event, "is_set", coord.should_stop)


def add_control_input(op, control) -> None:
    """``Operation._add_control_input``: makes ``op`` (a checkpoint's merge, already built by
    the Saver or ``Checkpoint.write``) wait for ``control`` (the finiteness check), which no
    public API can add after the fact."""
    method = getattr(op, "_add_control_input", None)
    if method is None:
        raise _missing("tf.Operation._add_control_input", "TensorFlow")
    method(control)


# ---------------------------------------------------------------------------- TensorFlow (eager)

def checkpoint_tensors(checkpoint) -> Tuple[dict, dict]:
    """``Checkpoint._saver._gather_serialized_tensors``: what ``checkpoint.write`` saves, as
    ``({trackable: {checkpoint key: tensor}}, {name: a registered saver})``, the serialized
    object graph under the trackable None. A snapshot writes its copies under these keys, with
    this object graph, so that its checkpoint is the one ``write`` makes."""
    saver = getattr(checkpoint, "_saver", None)
    gather = getattr(saver, "_gather_serialized_tensors", None)
    if gather is None:
        raise _missing("tf.train.Checkpoint._saver._gather_serialized_tensors", "TensorFlow")
    serialized, _, registered, _ = gather(None)
    return serialized, registered


def call_flat(function, args: list) -> list:
    """``ConcreteFunction._call_flat``: calls the traced ``function`` with ``args``, its inputs
    as one flat list of tensors, without binding them to its signature one by one in Python
    as its public call does (for the 2,400 variable handles of a snapshot's copy function, in
    the training thread at each save: 12 ms against 82 ms)."""
    method = getattr(function, "_call_flat", None)
    if method is None:
        raise _missing("ConcreteFunction._call_flat", "TensorFlow")
    return method(args, function.captured_inputs)


def saves_own_tensors(obj) -> bool:
    """True for a trackable whose class overrides ``Trackable._serialize_to_tensors`` (a
    dataset iterator, a lookup table): it saves tensors that are not variables."""
    from tensorflow.python.trackable import base  # pylint: disable=import-outside-toplevel
    base_method = getattr(base.Trackable, "_serialize_to_tensors", None)
    if base_method is None:
        raise _missing("Trackable._serialize_to_tensors", "TensorFlow")
    own = getattr(type(obj), "_serialize_to_tensors", None)
    return own is not None and own is not base_method


def update_checkpoint_state(logdir: str, newest: str, kept) -> None:
    """Writes the ``checkpoint`` state file (atomically) naming ``newest`` and ``kept``, with
    relative paths, as ``CheckpointManager`` does (``update_checkpoint_state_internal``: the
    public ``update_checkpoint_state`` writes absolute paths)."""
    from tensorflow.python.checkpoint import checkpoint_management  # pylint: disable=import-outside-toplevel
    checkpoint_management.update_checkpoint_state_internal(
        save_dir=logdir, model_checkpoint_path=newest, all_model_checkpoint_paths=kept,
        save_relative_paths=True, all_model_checkpoint_timestamps=None)


def report_error_to_cluster(message: str) -> None:
    """Tells the other workers of a multi-worker run, through the coordination service, that
    this one failed (``context.report_error_to_cluster``), which aborts their collectives."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    context.context().report_error_to_cluster(tf.errors.INTERNAL, message)


def global_seed() -> Optional[int]:
    """TensorFlow's global random seed (``tf.random.set_seed``, which Keras'
    ``set_random_seed`` sets), or None: ``context.global_seed()``."""
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    return context.global_seed()


# ---------------------------------------------------------------------------- Keras

def set_initial_epoch(model, epoch: Optional[int]) -> None:
    """``model._initial_epoch``: the epoch fit starts at, read by fit right after
    ``on_train_begin`` (how Keras' own ``BackupAndRestore`` resumes); None forgets it."""
    if not hasattr(model, "_initial_epoch"):
        raise _missing("keras.Model._initial_epoch", "Keras")
    model._initial_epoch = epoch  # pylint: disable=protected-access


def fit_argument(model, name: str):
    """The value of argument ``name`` of the ``model.fit`` call running now in this thread
    (Keras gives callbacks its ``params``, not its arguments: ``x``, ``shuffle``,
    ``initial_epoch``), found in the calling frames; None outside fit."""
    return _fit_local(model, name, argument=True)


def _fit_local(model, name: str, argument: bool):
    """The value of the local variable ``name`` (an ``argument`` of it, when asked) of the
    ``model.fit`` call running now in this thread, or None."""
    frame = sys._getframe(2)  # pylint: disable=protected-access
    try:
        while frame is not None:
            code = frame.f_code
            if code.co_name == "fit" and frame.f_locals.get("self") is model and (
                    not argument or name in code.co_varnames[:code.co_argcount]):
                return frame.f_locals.get(name)
            frame = frame.f_back
    finally:
        del frame
    return None


def fit_callbacks(model):
    """The ``CallbackList`` the ``model.fit`` call running now calls (its local ``callbacks``,
    once fit made it; Keras gives a callback none of its siblings), or None."""
    return _fit_local(model, "callbacks", argument=False)


def fit_data_spec(model):
    """The element spec of the data of ``model``'s running fit (``TFEpochIterator.
    _distributed_dataset``: the dataset fit draws its batches from), or None outside fit."""
    iterator = _fit_local(model, "epoch_iterator", argument=False)
    if iterator is None:
        return None
    if not hasattr(iterator, "_distributed_dataset"):
        raise _missing("keras TFEpochIterator._distributed_dataset", "Keras")
    return iterator._distributed_dataset.element_spec  # pylint: disable=protected-access


def compiled_unbuilt(model) -> bool:
    """True when ``model``'s compiled metrics or loss (``Trainer._compile_metrics``,
    ``_compile_loss``) have not made their variables yet (Keras makes them at the first step)."""
    for name in ("_compile_metrics", "_compile_loss"):
        if not hasattr(model, name):
            raise _missing(f"keras.Model.{name}", "Keras")
        part = getattr(model, name)
        if part is not None and not part.built:
            return True
    return False


def callback_state_attributes() -> dict:
    """{Keras callback class: the private attributes that hold what it counted}: the batches
    ``ModelCheckpoint`` saw since it saved (an integer ``save_freq``), ``TensorBoard``'s batch
    steps, whether ``SwapEMAWeights`` left the averages in the model. A resume gives them
    back (``eager/callback_state``)."""
    import keras  # pylint: disable=import-outside-toplevel
    return {keras.callbacks.ModelCheckpoint: ("_batches_seen_since_last_saving",
                                              "_last_batch_seen"),
            keras.callbacks.TensorBoard: ("_global_train_batch", "_global_test_batch"),
            keras.callbacks.SwapEMAWeights: ("_ema_weights_in_model",)}


def symbolic_build(model, data_batch) -> None:
    """``Trainer._symbolic_build(data_batch=...)``: makes the variables of ``model``, its
    compiled metrics and loss and its optimizer from symbolic inputs (``KerasTensor``s shaped
    as a batch), as Keras does before a fit under a distribution strategy (without one, it
    makes them while it traces the first training step)."""
    method = getattr(model, "_symbolic_build", None)
    if method is None:
        raise _missing("keras.Model._symbolic_build", "Keras")
    method(data_batch=data_batch)


# The data position of a fit (``eager/data_position.py``): where Keras' fit is in its input,
# which it keeps in its ``EpochIterator`` (``keras/src/trainers/epoch_iterator.py``, the
# TensorFlow trainer's ``TFEpochIterator``) and its data adapters. Reading them degrades to a
# resume that says it cannot keep the position (``fit_epoch_iterator`` returns None).

def fit_epoch_iterator(model):
    """The ``EpochIterator`` of the ``model.fit`` call running now (its local
    ``epoch_iterator``), or None when there is none with the attributes used below."""
    found = _fit_local(model, "epoch_iterator", argument=False)
    if found is None or not all(hasattr(found, a) for a in (
            "data_adapter", "_get_iterator", "_current_iterator", "_steps_seen",
            "steps_per_epoch")):
        return None
    return found


def count_iterators(epochs, made: Callable[[], None]) -> None:
    """Calls ``made()`` each time the epoch iterator ``epochs`` makes an iterator of its
    dataset: ``_enumerate_iterator`` calls ``iter(self._get_iterator())`` for each (at an
    epoch's start, and when one ran through its data). The wrapper is an attribute of that one
    object, which lives as long as its fit."""
    original = epochs._get_iterator  # pylint: disable=protected-access

    def counted():
        made()
        return original()

    epochs._get_iterator = counted  # pylint: disable=protected-access


def make_iterators(epochs, count: int) -> None:
    """Makes ``count`` iterators of what the epoch iterator ``epochs`` iterates, and drops them
    unread, without counting them."""
    dataset = type(epochs)._get_iterator(epochs)  # pylint: disable=protected-access
    for _ in range(count):
        iter(dataset)


def count_drawn(epochs, count: int) -> None:
    """Tells ``epochs`` that ``count`` more batches of its current iterator were drawn: it
    counts those it yields in ``_steps_seen``, and makes a new iterator once they reach the
    data's length."""
    epochs._steps_seen += count  # pylint: disable=protected-access


def current_iterator(epochs):
    """The iterator ``epochs`` draws its next epoch from when it keeps one across epochs
    (``steps_per_epoch`` given), or None: ``_current_iterator``."""
    return epochs._current_iterator  # pylint: disable=protected-access


def input_kind(adapter) -> str:
    """What Keras' data adapter ``adapter`` adapts: "arrays", "tf.data", "generator",
    "PyDataset", or "other"."""
    from keras.src.trainers import data_adapters  # pylint: disable=import-outside-toplevel
    for kind, name in (("arrays", "ArrayDataAdapter"), ("tf.data", "TFDatasetAdapter"),
                       ("generator", "GeneratorDataAdapter"),
                       ("PyDataset", "PyDatasetAdapter")):
        cls = getattr(data_adapters, name, None)
        if cls is not None and isinstance(adapter, cls):
            return kind
    return "other"


def array_samples(adapter) -> Optional[int]:
    """The samples of an ``ArrayDataAdapter`` (``_num_samples``), or None."""
    return getattr(adapter, "_num_samples", None)


def shuffles_arrays(adapter) -> bool:
    """True when an ``ArrayDataAdapter`` shuffles (fit's ``shuffle``: True or "batch"), with
    ``tf.random.shuffle`` in its dataset function: ``_shuffle``."""
    return bool(getattr(adapter, "_shuffle", False))


def adapter_dataset(adapter):
    """The ``tf.data.Dataset`` a ``TFDatasetAdapter`` iterates (before distribution):
    ``_dataset``."""
    return getattr(adapter, "_dataset", None)


def epoch_dataset(epochs):
    """What the epoch iterator ``epochs`` makes its iterators of: the adapter's dataset as
    distributed by fit's strategy (``_distributed_dataset``; the dataset itself under the
    default one), or None where it keeps none there."""
    return getattr(epochs, "_distributed_dataset", None)


def set_epoch_dataset(epochs, dataset) -> None:
    """Has the epoch iterator ``epochs`` make its iterators of ``dataset`` from now on."""
    epochs._distributed_dataset = dataset  # pylint: disable=protected-access


def rebuilt_dataset(dataset, limit: int):
    """``dataset`` as if built anew. A dataset's random transformations draw the seeds of each
    new iterator from a seed generator that the dataset holds (a counter); its serialized graph
    (``_as_serialized_graph``) holds a handle that names that live generator, so that a dataset
    read back from it goes on drawing from it. Here each such handle is renamed to one that
    names no generator (the name of ``DummySeedGenerator``'s): each transformation then makes
    its own from its seeds, as a newly built dataset does. Raises ValueError, saying why, when
    the pipeline cannot be serialized (state outside its graph, or a stateful op), or when its
    graph (which holds the arrays it was made from) is over ``limit`` bytes: reading it back
    takes a few times that much memory for a moment."""
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2, types_pb2
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.ops import gen_experimental_dataset_ops
    try:
        serialized = dataset._as_serialized_graph(  # pylint: disable=protected-access
            external_state_policy=tf.data.experimental.ExternalStatePolicy.FAIL)
    except tf.errors.FailedPreconditionError as error:
        raise ValueError(
            "it holds state outside its graph (from_generator, py_function) or a stateful op "
            "(a random op or a variable in a map function)") from error
    size = int(tf.strings.length(serialized))
    if size > limit:
        raise ValueError(f"its graph holds {size / 1e6:,.0f} MB (the arrays it was made from), "
                         f"more than the {limit / 1e6:,.0f} MB a copy may take")
    graph = graph_pb2.GraphDef.FromString(serialized.numpy())
    del serialized
    for node in graph.node:
        if node.op != "Const" or node.attr["value"].tensor.dtype != types_pb2.DT_RESOURCE:
            continue
        for handle in node.attr["value"].tensor.resource_handle_val:
            if "SeedGenerator" in handle.maybe_type_name:
                handle.name = "dummy_resource"
    variant = gen_experimental_dataset_ops.dataset_from_graph(graph.SerializeToString())
    return dataset_ops.from_variant(variant, dataset.element_spec)


def py_dataset_shuffles(adapter) -> bool:
    """True when a ``PyDatasetAdapter`` shuffles the order of the batches (fit's ``shuffle``):
    with ``random.shuffle`` of the batch indices at the start of each pass over them
    (``_finite_generator``; ``OrderedEnqueuer._run`` with workers)."""
    return bool(getattr(adapter, "shuffle", False))


def shuffle_batch_indices(num_batches: int) -> None:
    """The draws from Python's ``random`` that a shuffling ``PyDatasetAdapter`` makes when it
    starts a pass over ``num_batches`` batches."""
    import random  # pylint: disable=import-outside-toplevel
    random.shuffle(list(range(num_batches)))


def drain_generator(adapter) -> None:
    """Runs the Python generator of a ``GeneratorDataAdapter`` to its end (its ``generator()``
    chains the batches Keras peeked at to the rest of it), as fit's earlier iterators did."""
    for _ in adapter.generator():
        pass


def keras_seed_set() -> bool:
    """True when ``keras.utils.set_random_seed`` was called (it seeds Python's ``random``,
    NumPy's and TensorFlow's global generators): its ``global_random_seed`` attribute."""
    from keras.src.backend.common import global_state  # pylint: disable=C0415
    return global_state.get_global_attribute("global_random_seed") is not None


# ---------------------------------------------------------------------------- tf.data

# Transformations whose iterator makes its inputs' iterators once, when it is made: everything a
# new iterator of a pipeline of them draws, it draws then (``tests/test_data_position.py``
# checks each against TensorFlow). Not among them: ``repeat`` (makes its input's iterator again
# at each repetition), ``cache`` (reads its input once, then its cache), ``concatenate`` (makes
# the second input's iterator when the first ends).
_ONE_PASS = {"_ShuffleDataset", "_MapDataset", "_ParallelMapDataset", "_BatchDataset",
             "_ParallelBatchDataset", "_PaddedBatchDataset", "_PrefetchDataset", "_FilterDataset",
             "_TakeDataset", "_SkipDataset", "_ShardDataset", "_UnbatchDataset",
             "_OptionsDataset", "_ZipDataset", "_InterleaveDataset", "_ParallelInterleaveDataset",
             "_FlatMapDataset", "_RebatchDataset", "_IgnoreErrorsDataset", "_TakeWhileDataset",
             "_ScanDataset", "_WindowDataset", "_GroupByWindowDataset", "_UniqueDataset",
             "_DenseToRaggedDataset", "_DirectedInterleaveDataset", "_AssertCardinalityDataset",
             "_RestructuredDataset", "_VariantDataset"}


def random_nodes(dataset) -> List[Tuple[str, bool, bool, bool]]:
    """[(kind, seeded, reshuffles, below)] for the random transformations of ``dataset``'s
    pipeline, found through each dataset's ``_inputs()``: ``Dataset.shuffle`` ("shuffle") and
    ``Dataset.random`` ("random"; ``sample_from_datasets`` and ``list_files`` make them too).
    ``seeded``: it has a seed (its own, or one derived from the global seed; ``_seed`` and
    ``_seed2`` both 0 is TensorFlow's "none"). ``reshuffles``: it draws new seeds each time
    an iterator of it is made (``reshuffle_each_iteration``, ``rerandomize_each_iteration``,
    read from ``_reshuffle_each_iteration``, ``_rerandomize``). ``below``: it lies below a
    transformation not in ``_ONE_PASS``, so that an iterator of the pipeline also draws its
    seeds while it runs, or not at all. Datasets made inside a function (``interleave``'s) are
    not seen."""
    return [found for found, _ in _random_nodes(dataset)]


def reshuffling_nodes(dataset) -> List[object]:
    """The random transformations of ``dataset``'s pipeline (``random_nodes``) that draw new
    seeds for each iterator made of them, as the dataset objects themselves: two pipelines
    that share one (``take``/``skip`` of one shuffled dataset) draw from the same seeds."""
    return [node for (_, _, again, _), node in _random_nodes(dataset) if again]


def _random_nodes(dataset) -> List[Tuple[Tuple[str, bool, bool, bool], object]]:
    """[((kind, seeded, reshuffles, below), the dataset object)]: see ``random_nodes``."""
    found, stack, seen = [], [(dataset, False)], set()
    while stack:
        node, below = stack.pop()
        if (id(node), below) in seen:
            continue
        seen.add((id(node), below))
        name = type(node).__name__
        if name in ("_ShuffleDataset", "_RandomDataset"):
            seeds = [int(getattr(node, a, 0)) for a in ("_seed", "_seed2")]
            if name == "_ShuffleDataset":  # None is TensorFlow's default: True
                again = getattr(node, "_reshuffle_each_iteration", True) is not False
            else:
                again = bool(getattr(node, "_rerandomize", False))
            found.append((("shuffle" if name == "_ShuffleDataset" else "random",
                           any(seeds), again, below), node))
        inputs = getattr(node, "_inputs", None)
        if not callable(inputs):
            continue
        for position, parent in enumerate(inputs()):
            if name == "_RepeatDataset":
                deeper = int(getattr(node, "_count", -1)) != 1
            elif name == "_ConcatenateDataset":
                deeper = position > 0
            else:
                deeper = name not in _ONE_PASS
            stack.append((parent, below or deeper))
    return found


# ---------------------------------------------------------------------------- ipykernel

class PollerOs:
    """``os`` as ipykernel's parent poller sees it: its ``_exit`` calls ``before_exit`` first.

    The poller (``ParentPollerUnix``, a thread) ends the process with ``os._exit(1)`` once the
    server is gone and has no other hook, so its module's ``os`` is replaced while a run is
    live (``hook_parent_poller``). Every other name is the real ``os``."""

    def __init__(self, real, before_exit: Callable[[], None]):
        self.real = real
        self._before_exit = before_exit

    def __getattr__(self, name):
        return getattr(self.real, name)

    def _exit(self, status):
        try:
            self._before_exit()
        finally:
            self.real._exit(status)  # pylint: disable=protected-access


def parent_poller_module(app):
    """The module of ipykernel's ``ParentPollerUnix`` of the kernel ``app``, whose ``os`` a
    ``PollerOs`` replaces; None when the kernel has no such poller (Windows, a kernel started
    without a parent to watch). CompatError when its poller is of an unknown kind."""
    poller = getattr(app, "poller", None)
    if poller is None:
        return None
    if type(poller).__name__ != "ParentPollerUnix":
        raise _missing("ipykernel.parentpoller.ParentPollerUnix (the kernel's poller is a "
                       f"{type(poller).__qualname__})", "ipykernel")
    module = sys.modules[type(poller).__module__]
    if not hasattr(module, "os"):
        raise _missing("ipykernel.parentpoller's os", "ipykernel")
    return module



def shutdown_request_tables(kernel) -> dict:
    """{"shell_handlers" / "control_handlers": the dict} of the kernel's message-handler tables
    that hold a ``shutdown_request`` handler (ipykernel's ``Kernel``), which a run wraps to stop
    first: ipykernel has no hook for a shutdown request. {} when none has one."""
    found = {}
    for name in ("shell_handlers", "control_handlers"):
        handlers = getattr(kernel, name, None)
        if isinstance(handlers, dict) and "shutdown_request" in handlers:
            found[name] = handlers
    return found

def kernel_display_publisher(shell):
    """The kernel's display publisher (ipykernel's ``ZMQDisplayPublisher``, whose per-thread
    ``register_hook`` takes a run's displays), also while a cell has swapped another one in
    (``%%capture``): it stays among IPython's ``shell.configurables``. None where there is no
    such publisher (terminal IPython)."""
    candidates = [getattr(shell, "display_pub", None), *getattr(shell, "configurables", [])]
    return next((c for c in candidates if hasattr(c, "register_hook")
                 and hasattr(c, "publish")), None)


# ---------------------------------------------------------------------------- IPython, matplotlib

def post_execute_callbacks(shell) -> list:
    """The list of IPython's ``post_execute`` callbacks (``EventManager.callbacks``), which a
    run edits in place to wrap matplotlib-inline's flush; [] without a shell."""
    return getattr(getattr(shell, "events", None), "callbacks", {}).get("post_execute", [])


def is_inline_flush(callback) -> bool:
    """True for matplotlib-inline's ``flush_figures`` (which shows and closes every open pyplot
    figure after each cell), told by its module and name."""
    return getattr(callback, "__module__", "") == "matplotlib_inline.backend_inline" and \
        getattr(callback, "__name__", "") == "flush_figures"


def pyplot_figure_managers() -> dict:
    """pyplot's open figures, {number: manager} (``matplotlib._pylab_helpers.Gcf.figs``), which
    a flush of another cell must not show while a run's figures are among them."""
    from matplotlib import _pylab_helpers  # pylint: disable=import-outside-toplevel
    figs = getattr(getattr(_pylab_helpers, "Gcf", None), "figs", None)
    if figs is None:
        raise _missing("matplotlib._pylab_helpers.Gcf.figs", "matplotlib")
    return figs
