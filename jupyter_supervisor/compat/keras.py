"""Keras' private API: fit's frames, its epoch iterator and data adapters, callbacks' counters.

See ``compat/__init__.py`` for what this package is; ``PROBES`` (at the end) checks once
whether the running Keras has what each feature needs. Every entry was checked on Keras 3.7,
3.10, 3.11 and 3.15 (``_FIT``: ``tests/test_compat.py`` on each; ``keras_seed_set`` reads what
Keras records from 3.10 on).
"""
import sys
from typing import Callable, List, Optional, Tuple

from .registry import Probe, constants_used, local_names, missing as _missing, names_used


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


def is_fit_validation(evaluate_kwargs: dict) -> bool:
    """True for the keyword arguments of the ``model.evaluate`` call that ``fit`` makes for its
    validation: it passes ``_use_cached_eval_dataset=True`` (evaluate then iterates the
    validation data fit adapted once), which a user's own call does not."""
    return bool(evaluate_kwargs.get("_use_cached_eval_dataset"))


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
    back (``eager/callback_state``). Only the classes this Keras has, with those names."""
    import keras  # pylint: disable=import-outside-toplevel
    wanted = {"ModelCheckpoint": ("_batches_seen_since_last_saving", "_last_batch_seen"),
              "TensorBoard": ("_global_train_batch", "_global_test_batch"),
              "SwapEMAWeights": ("_ema_weights_in_model",)}
    # A class that is not there, or no longer uses those names, keeps only its public state
    # (versions: "callback counters" is off, said at the run's start).
    return {getattr(keras.callbacks, name): names for name, names in wanted.items()
            if hasattr(keras.callbacks, name)
            and names_used(getattr(keras.callbacks, name), *names)}


def learning_rate_name() -> str:
    """The name under which a Keras optimizer tracks its learning rate, its attribute
    ``BaseOptimizer._learning_rate``: in its object graph, and in a checkpoint's, a variable of
    that name when the rate is a number, none when it is a schedule (which holds no variable;
    the optimizer's other variables are then numbered one lower)."""
    return "_learning_rate"


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
    NumPy's and TensorFlow's global generators): its ``global_random_seed`` attribute (Keras
    3.10 on; an older Keras records none, and False leaves the answer to TensorFlow's global
    seed, which ``set_random_seed`` sets too)."""
    from keras.src.backend.common import global_state  # pylint: disable=C0415
    from keras.src.utils import rng_utils  # pylint: disable=import-outside-toplevel
    name = getattr(rng_utils, "GLOBAL_RANDOM_SEED", None)
    return name is not None and global_state.get_global_attribute(name) is not None




# ---------------------------------------------------------------------------- probes

def _trainer():
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer  # pylint: disable=C0415
    return TensorFlowTrainer


def _epoch_iterator():
    from keras.src.backend.tensorflow.trainer import TFEpochIterator  # pylint: disable=C0415
    return TFEpochIterator


def _adapters():
    from keras.src.trainers import data_adapters  # pylint: disable=import-outside-toplevel
    return data_adapters


def _callbacks():
    import keras  # pylint: disable=import-outside-toplevel
    return keras.callbacks


_FIT = "3.7-3.15"
PROBES = (
    Probe("fit", "keras", "the arguments and locals of Trainer.fit (x, initial_epoch, "
          "callbacks) and Trainer._initial_epoch", _FIT,
          lambda: local_names(_trainer().fit, "x", "initial_epoch", "validation_data",
                              arguments=True)
          and local_names(_trainer().fit, "callbacks", "epoch_iterator")
          and names_used(_trainer(), "_initial_epoch")),
    Probe("fit", "keras", "fit's validation as evaluate(_use_cached_eval_dataset=True)", _FIT,
          lambda: constants_used(_trainer().fit, "_use_cached_eval_dataset")
          and constants_used(_trainer().evaluate, "_use_cached_eval_dataset")),
    Probe("data order", "keras", "TFEpochIterator's _enumerate_iterator, _get_iterator, "
          "_current_iterator, _steps_seen and _distributed_dataset", _FIT,
          lambda: names_used(_epoch_iterator(), "data_adapter", "_enumerate_iterator",
                             "_get_iterator", "_current_iterator", "_steps_seen",
                             "steps_per_epoch", "_distributed_dataset")),
    Probe("data order", "keras", "the data adapters' _num_samples, _shuffle, _dataset, "
          "shuffle and generator", _FIT,
          lambda: names_used(_adapters().ArrayDataAdapter, "_num_samples", "_shuffle")
          and names_used(_adapters().TFDatasetAdapter, "_dataset")
          and names_used(_adapters().PyDatasetAdapter, "shuffle")
          and names_used(_adapters().GeneratorDataAdapter, "generator")),
    Probe("callback counters", "keras", "ModelCheckpoint's _batches_seen_since_last_saving "
          "and _last_batch_seen", _FIT,
          lambda: names_used(_callbacks().ModelCheckpoint, "_batches_seen_since_last_saving",
                             "_last_batch_seen")),
    Probe("callback counters", "keras", "TensorBoard's _global_train_batch and "
          "_global_test_batch", _FIT,
          lambda: names_used(_callbacks().TensorBoard, "_global_train_batch",
                             "_global_test_batch")),
    Probe("callback counters", "keras", "SwapEMAWeights' _ema_weights_in_model", _FIT,
          lambda: names_used(_callbacks().SwapEMAWeights, "_ema_weights_in_model")),
    Probe("build before restore", "keras", "Trainer._symbolic_build(data_batch=...), "
          "_compile_metrics and _compile_loss", _FIT,
          lambda: local_names(_trainer()._symbolic_build, "data_batch", arguments=True)
          and names_used(_trainer(), "_compile_metrics", "_compile_loss")
          and names_used(_epoch_iterator(), "_distributed_dataset")),
)

