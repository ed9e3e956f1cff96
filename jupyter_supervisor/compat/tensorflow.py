"""TensorFlow's private API: the graph runtime, eager checkpoints, tf.data pipelines.

See ``compat/__init__.py`` for what this package is; ``PROBES`` (at the end) checks once
whether the running TensorFlow has what each feature needs. Every entry was checked on
TensorFlow 2.16, 2.17, 2.18, 2.19 and 2.21 (``_TF``: ``tests/test_compat.py`` on each).
"""
import sys
from typing import Callable, List, NamedTuple, Optional, Tuple

from .registry import Probe, missing as _missing, names_used


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


def session_closed(sess) -> bool:
    """``BaseSession._closed``: True once ``sess.close()`` ran (a session offers no public way to
    ask); False for a session without it (a user's wrapper), which is then used as open."""
    return bool(getattr(sess, "_closed", False))


def session_interface() -> type:
    """``tensorflow.python.client.session.SessionInterface``: the base class of what a graph
    body may take for a session (the bound ``sess`` derives from it, as TF's own wrappers do)."""
    from tensorflow.python.client import session  # pylint: disable=import-outside-toplevel
    return session.SessionInterface


def meta_graph_def(graph, saver):
    """``meta_graph.create_meta_graph_def``: the MetaGraphDef TF's Supervisor writes beside its
    event file (the graph with its shapes, and ``saver``'s SaverDef), without the collections
    that ``tf.compat.v1.train.export_meta_graph`` adds and warns about."""
    from tensorflow.python.framework import meta_graph  # pylint: disable=import-outside-toplevel
    return meta_graph.create_meta_graph_def(
        graph_def=graph.as_graph_def(add_shapes=True),
        saver_def=saver.saver_def if saver else None)


def deprecations_silenced():
    """``deprecation.silence()``: a context in which TensorFlow logs no deprecation warning (a
    Saver's ``recover_last_checkpoints`` calls a deprecated helper of its own)."""
    from tensorflow.python.util import deprecation  # pylint: disable=import-outside-toplevel
    return deprecation.silence()


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


def is_trackable(value) -> bool:
    """True for what a TF2 checkpoint can hold: an instance of TensorFlow's base ``Trackable``
    (a tf.Variable, a tf.Module, a Keras model, layer, optimizer or variable, a
    tf.train.Checkpoint), which TensorFlow names only as ``tf.__internal__.tracking.Trackable``
    (``tf.Module`` and ``tf.Variable``, the public ones, are subclasses: a Keras 3 model,
    layer, optimizer or variable is neither)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    try:
        base = tf.__internal__.tracking.Trackable
    except AttributeError as error:
        raise _missing("tf.__internal__.tracking.Trackable", "TensorFlow") from error
    return isinstance(value, base)


def serializes_to_tensors(obj) -> bool:
    """True when ``obj`` has ``_serialize_to_tensors``, the method through which a checkpoint
    asks a trackable for its tensors (``Trackable``'s, or its class's own): what tells a Keras 3
    variable, which a checkpoint saves through it and which holds a tf.Variable in ``value``,
    from another object that holds one there."""
    return hasattr(obj, "_serialize_to_tensors")


def saves_own_tensors(obj) -> bool:
    """True for a trackable whose class overrides ``Trackable._serialize_to_tensors`` (a
    dataset iterator, a lookup table): it saves tensors that are not variables."""
    from tensorflow.python.trackable import base  # pylint: disable=import-outside-toplevel
    base_method = getattr(base.Trackable, "_serialize_to_tensors", None)
    if base_method is None:
        raise _missing("Trackable._serialize_to_tensors", "TensorFlow")
    own = getattr(type(obj), "_serialize_to_tensors", None)
    return own is not None and own is not base_method


def checkpoint_object_graph(serialized: bytes):
    """The object graph a TF2 checkpoint stores (under ``_CHECKPOINTABLE_OBJECT_GRAPH``), parsed
    from ``serialized``: a ``TrackableObjectGraph`` proto (``tensorflow/core/protobuf/
    trackable_object_graph.proto``), each node with its children by name and its attributes'
    checkpoint keys. TensorFlow gives the message no public name, and its public reader of it
    (``tf.train.CheckpointView``) no attributes. Raises protobuf's DecodeError when
    ``serialized`` is not one."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2  # pylint: disable=C0415
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(serialized)
    return graph


def update_checkpoint_state(logdir: str, newest: str, kept) -> None:
    """Writes the ``checkpoint`` state file (atomically) naming ``newest`` and ``kept``, with
    relative paths, as ``CheckpointManager`` does (``update_checkpoint_state_internal``: the
    public ``update_checkpoint_state`` writes absolute paths)."""
    from tensorflow.python.checkpoint import checkpoint_management  # pylint: disable=import-outside-toplevel
    checkpoint_management.update_checkpoint_state_internal(
        save_dir=logdir, model_checkpoint_path=newest, all_model_checkpoint_paths=kept,
        save_relative_paths=True, all_model_checkpoint_timestamps=None)


def event_file_writer(logdir: str, suffix: str):
    """TensorFlow's ``EventFileWriter`` (``tensorflow/python/summary/writer``): a new event file
    in ``logdir`` whose name ends in ``suffix``, to which ``add_event`` queues ``Event`` protos
    as they are (written by a thread of its own; ``close``). The public writers cannot serve:
    TF1's ``tf.compat.v1.summary.FileWriter``, which wraps this one, refuses eager mode, and
    TF2's ``tf.summary`` writers write summaries only (no ``SessionLog``: a session's start and
    stop)."""
    from tensorflow.python.summary.writer import event_file_writer  # pylint: disable=C0415
    return event_file_writer.EventFileWriter(logdir, filename_suffix=suffix)


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


# ---------------------------------------------------------------------------- checkpoint files

class SaveParts(NamedTuple):
    """Where a sharded save of one checkpoint writes its parts (``save_parts``).

    Attributes:
      prefix: the basename TensorFlow gives ``ShardedFilename`` for them (the parts are
        ``<prefix>-00000-of-00001``...): ``<directory>/part``, or ``s3_prefix`` on s3://.
      directory: ``<path>_temp``, which holds them until the merge deletes it.
      s3_prefix: ``<path>.part``: on s3:// the parts lie beside the checkpoints, in no
        directory.
    """
    prefix: str
    directory: str
    s3_prefix: str


def save_parts(path: str) -> SaveParts:
    """Where a sharded save of the checkpoint ``path`` (every TF2 ``Checkpoint.write``, a
    sharded ``Saver``) writes its parts before it merges them under ``path``: a convention of
    TensorFlow's savers (``functional_saver`` and ``BaseSaverBuilder._AddShardedSaveOpsForV2``
    append ``_temp/part``, or ``.part`` on s3://) that no API names, which a snapshot's write
    follows and which tells the parts a save cut short or refused left. ``path`` may be a glob
    pattern of checkpoints: the fields are then patterns of theirs."""
    directory, s3_prefix = path + "_temp", path + ".part"
    return SaveParts(s3_prefix if path.startswith("s3://") else directory + "/part",
                     directory, s3_prefix)


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




# ---------------------------------------------------------------------------- probes

def _module(name: str):
    import importlib  # pylint: disable=import-outside-toplevel
    return importlib.import_module(name)


def _shuffle_dataset():
    return _module("tensorflow.python.data.ops.shuffle_op")._ShuffleDataset  # pylint: disable=W0212


_TF = "2.16-2.21"
PROBES = (
    Probe("background save", "tensorflow", "tf.train.Checkpoint._saver."
          "_gather_serialized_tensors, ConcreteFunction._call_flat and "
          "Trackable._serialize_to_tensors", _TF,
          lambda: names_used(_module("tensorflow.python.checkpoint.checkpoint").Checkpoint,
                             "_saver")
          and callable(_module("tensorflow.python.checkpoint.checkpoint").TrackableSaver
                       ._gather_serialized_tensors)
          and callable(_module("tensorflow.python.eager.polymorphic_function."
                               "concrete_function").ConcreteFunction._call_flat)
          and callable(_module("tensorflow.python.trackable.base").Trackable
                       ._serialize_to_tensors)),
    Probe("data order", "tensorflow", "tf.data's _as_serialized_graph, _inputs, the shuffle's "
          "_seed, _seed2 and _reshuffle_each_iteration, dataset_from_graph", _TF,
          lambda: callable(_module("tensorflow.python.data.ops.dataset_ops").DatasetV2
                           ._as_serialized_graph)
          and callable(_module("tensorflow.python.data.ops.dataset_ops").DatasetV2._inputs)
          and names_used(_shuffle_dataset(), "_seed", "_seed2", "_reshuffle_each_iteration")
          and callable(_module("tensorflow.python.ops.gen_experimental_dataset_ops")
                       .dataset_from_graph)
          and callable(_module("tensorflow.python.data.ops.dataset_ops").from_variant)
          and callable(_module("tensorflow.python.eager.context").global_seed)),
    Probe("graph reuse", "tensorflow", "tf.Graph._unsafe_unfinalize", _TF,
          lambda: callable(_module("tensorflow.python.framework.ops").Graph
                           ._unsafe_unfinalize)),
    Probe("graph NaN guard", "tensorflow", "tf.Operation._add_control_input", _TF,
          lambda: callable(_module("tensorflow.python.framework.ops").Operation
                           ._add_control_input)),
    Probe("graph restore check", "tensorflow", "Saver._var_list and "
          "saveable_object_util.op_list_to_dict", _TF,
          lambda: names_used(_module("tensorflow.python.training.saver").Saver, "_var_list")
          and callable(_module("tensorflow.python.training.saving.saveable_object_util")
                       .op_list_to_dict)),
    Probe("checkpoint state file", "tensorflow", "checkpoint_management."
          "update_checkpoint_state_internal", _TF,
          lambda: callable(_module("tensorflow.python.checkpoint.checkpoint_management")
                           .update_checkpoint_state_internal)),
)
