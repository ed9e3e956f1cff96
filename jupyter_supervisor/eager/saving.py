"""The object-based checkpoints of an eager run: restore the newest readable one, write new ones
(asynchronously: a snapshot in the training thread, the files in a writer thread), keep the
``checkpoint`` state file and the retention of a ``tf.train.CheckpointManager``; a model that
is not finite is never put under a checkpoint's name (``CheckpointWriter``'s ``checked``).

What is written is a plain ``tf.train.Checkpoint`` of the tracked objects, named
``<logdir>/<basename>-<step>``, listed in ``<logdir>/checkpoint``: readable without this package
by ``tf.train.Checkpoint(**same_names).restore(tf.train.latest_checkpoint(logdir))``.

Why not TensorFlow's own ``CheckpointOptions(enable_async=True)``: its copy of Keras 3 variables
creates a ``tf.Variable`` inside a ``tf.function`` and fails from the second save on (TF 2.21,
Keras 3.15: "tf.function only supports singleton tf.Variables created on the first call").
``Snapshot`` does what that helper does, with copies made once outside any function: the
training thread assigns every variable to its host copy (that is all it waits for, there and
in its next step: a copy shares the variable's buffer, which TensorFlow copies before the step
updates it in place), and the writer thread saves the copies under the original objects'
names (the saver's object map, the mechanism TensorFlow's helper uses), with one call of a
``tf.function`` traced once, which also holds the finiteness check of the copies
(``Snapshot.write_function``).
"""
import contextlib
import glob
import itertools
import logging
import os
import threading
import time
import weakref
from typing import Callable, Dict, List, Optional, Tuple

import tensorflow as tf
from google.protobuf import message
from tensorflow.core.protobuf import trackable_object_graph_pb2
from tensorflow.python.checkpoint import checkpoint_management
from tensorflow.python.trackable import base as trackable_base
from tensorflow.python.util import object_identity

from .. import checkpoints, finite
from ..checkpoints import CheckpointMismatchError, CheckpointWriteError

logger = logging.getLogger("jupyter_supervisor")

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"

# The checkpoint name of the run's own state (global step, where fit is), beside the user's,
# and of its random-layer states in it: a checkpoint written before those were saved lacks
# them, and still restores (with a warning: that resume is not bit-exact).
STATE_NAME = "jupyter_supervisor"
RANDOM_STATE = "random_state"
_RANDOM_PREFIX = f"{STATE_NAME}/{RANDOM_STATE}/"

# What reading a damaged checkpoint raises (truncated or overwritten files): it falls back.
UNREADABLE = (tf.errors.OpError, IndexError, message.DecodeError)


def is_variable(obj) -> bool:
    """A tf.Variable, or a Keras 3 variable (which wraps one in ``.value``)."""
    return isinstance(obj, tf.Variable) or isinstance(getattr(obj, "value", None), tf.Variable) \
        and hasattr(obj, "_serialize_to_tensors")


def base_variable(obj) -> tf.Variable:
    """The tf.Variable of a tf.Variable or of a Keras 3 variable."""
    return obj if isinstance(obj, tf.Variable) else obj.value


def _has_own_tensors(obj) -> bool:
    """True for a trackable that is not a variable but saves tensors of its own (a dataset
    iterator, a lookup table): it cannot be snapshotted by copying variables."""
    own = getattr(type(obj), "_serialize_to_tensors", None)
    return own is not None and own is not trackable_base.Trackable._serialize_to_tensors  # pylint: disable=protected-access


def holds_state(obj) -> bool:
    """True when a checkpoint of ``obj`` would hold something: a variable, or tensors of its
    own (a dataset iterator) in it or below it. A tf.function holds neither."""
    if is_variable(obj) or _has_own_tensors(obj):
        return True
    return any(is_variable(o) or _has_own_tensors(o)
               for o in tf.train.TrackableView(obj).descendants())


def _has_slot_variables(obj) -> bool:
    """True for an optimizer whose slot variables a checkpoint saves although they are not in
    the object graph (``get_slot_names``, as TensorFlow's saver finds them): a snapshot of the
    graph's variables misses them."""
    get_slot_names = getattr(type(obj), "get_slot_names", None)
    return get_slot_names is not None and bool(obj.get_slot_names())


def variable_name(obj) -> str:
    """How a user knows a variable: a Keras variable's path, else its name."""
    return str(getattr(obj, "path", None) or getattr(obj, "name", None) or obj)


def live_variables(root) -> List[tuple]:
    """[(path in the object graph, variable)] of everything ``root`` saves, each variable once,
    by its first (breadth-first) path, as TensorFlow names it."""
    view = tf.train.TrackableView(root)
    seen = object_identity.ObjectIdentitySet([root])
    queue = [("", root)]
    found = []
    while queue:
        path, obj = queue.pop(0)
        for name, child in view.children(obj).items():
            if child in seen:
                continue
            seen.add(child)
            child_path = f"{path}/{name}" if path else name
            if is_variable(child):
                found.append((child_path, child))
            else:
                queue.append((child_path, child))
    return found


# ------------------------------------------------------------------------------------ restore

def object_graph(reader):
    """The object graph a TF2 checkpoint stores (raises when it cannot be read)."""
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(OBJECT_GRAPH_KEY))
    return graph


def misfit(reader, root, graph=None, unseeded: Optional[list] = None,
           dropped: Optional[list] = None) -> Optional[str]:
    """Why the checkpoint of ``reader`` cannot restore the variables of ``root`` (the objects it
    has no value for, those whose shape changed), or None when it fits. The model's own
    (trainable) variables are named first, then the optimizer's. The run's random-layer states
    that it lacks are appended to ``unseeded`` instead; the values it holds under a tracked
    optimizer that no variable of it takes (another optimizer's slots), to ``dropped``."""
    graph = graph if graph is not None else object_graph(reader)
    shapes = reader.get_variable_to_shape_map()
    view = tf.train.TrackableView(root)
    matched = object_identity.ObjectIdentityDictionary()  # variable -> checkpoint key
    seen = object_identity.ObjectIdentitySet()
    optimizers = []  # their node ids
    queue = [(0, root)]
    while queue:
        node_id, obj = queue.pop(0)
        if obj in seen:
            continue
        seen.add(obj)
        node = graph.nodes[node_id]
        if hasattr(obj, "apply_gradients"):
            optimizers.append(node_id)
        if is_variable(obj):
            keys = [a.checkpoint_key for a in node.attributes if a.name == "VARIABLE_VALUE"]
            if keys:
                matched[obj] = keys[0]
            continue
        in_checkpoint = {c.local_name: c.node_id for c in node.children}
        for name, child in view.children(obj).items():
            if name in in_checkpoint:
                queue.append((in_checkpoint[name], child))
    missing, reshaped = [], []
    variables = sorted(live_variables(root),
                       key=lambda item: not getattr(item[1], "trainable", False))
    for path, var in variables:
        key = matched.get(var)
        if key is None and path.startswith(_RANDOM_PREFIX) and unseeded is not None:
            unseeded.append(variable_name(var))
            continue
        if key is None:
            missing.append(f"{path} ({variable_name(var)})")
            continue
        saved = shapes.get(key)
        shape = list(base_variable(var).shape)
        if saved is not None and list(saved) != shape:
            reshaped.append(f"{variable_name(var)} (saved {list(saved)}, now {shape})")
    if dropped is not None:
        taken = set(matched.values())
        dropped.extend(key.split("/.ATTRIBUTES/")[0] for key in _keys_under(graph, optimizers)
                       if key not in taken)
    problems = []
    if missing:
        problems.append(f"it has no value for {len(missing)} variable(s): "
                        + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    if reshaped:
        problems.append(f"{len(reshaped)} variable(s) changed shape: "
                        + ", ".join(reshaped[:5]) + (" ..." if len(reshaped) > 5 else ""))
    return "; ".join(problems) or None


def _keys_under(graph, node_ids) -> List[str]:
    """The variable keys of the checkpoint's objects under ``node_ids``, each once."""
    keys, seen, queue = [], set(), list(node_ids)
    while queue:
        node_id = queue.pop(0)
        if node_id in seen:
            continue
        seen.add(node_id)
        node = graph.nodes[node_id]
        keys += [a.checkpoint_key for a in node.attributes if a.name == "VARIABLE_VALUE"]
        queue += [c.node_id for c in node.children]
    return keys


def _top_names(root, graph) -> Tuple[list, list]:
    """(names the checkpoint holds its objects under, names ``root`` tracks), both without
    the run's state and the save counter."""
    own = (STATE_NAME, "save_counter")
    saved = [c.local_name for c in graph.nodes[0].children if c.local_name not in own]
    tracked = [n for n in tf.train.TrackableView(root).children(root) if n not in own]
    return saved, tracked


def _renaming(reader, root, graph) -> Optional[List[tuple]]:
    """[(saved name, tracked name)] when the checkpoint fits ``root`` with its objects under
    other names (``sv.track(net=...)`` where ``model=...`` was saved), else None."""
    saved, tracked = _top_names(root, graph)
    old = [n for n in saved if n not in tracked]
    new = [n for n in tracked if n not in saved]
    if not old or len(old) != len(new) or len(new) > 4:
        return None
    children = tf.train.TrackableView(root).children(root)
    for order in itertools.permutations(old):
        named = {n: children[n] for n in tracked if n in saved}
        named.update({o: children[n] for o, n in zip(order, new)})
        if STATE_NAME in children:
            named[STATE_NAME] = children[STATE_NAME]
        if misfit(reader, tf.train.Checkpoint(**named), graph) is None:
            return list(zip(order, new))
    return None


def _precision_change(root, keys) -> Optional[str]:
    """How the checkpoint's mixed precision differs from the tracked optimizers', or None. A
    Keras optimizer under a mixed-precision policy is a LossScaleOptimizer: its state is
    the inner optimizer's, beside a loss scale, so every value moves."""
    saved = any("inner_optimizer/" in key for key in keys)
    now = any(hasattr(obj, "inner_optimizer")
              for obj in tf.train.TrackableView(root).descendants())
    if saved == now:
        return None
    was, is_now = ("mixed precision", "full precision") if saved else \
        ("full precision", "mixed precision")
    return (f"it was saved in {was} (its optimizer {'was' if saved else 'was not'} a "
            f"LossScaleOptimizer), and the model now trains in {is_now} (the dtype policy "
            f"is {_keras_policy()!r}). Set the policy it was trained with "
            "(keras.mixed_precision.set_global_policy(...)) before building the model, or "
            "train this policy in a new logdir")


def _keras_policy() -> str:
    """The name of Keras' global dtype policy ("float32", "mixed_float16", ...)."""
    import keras  # pylint: disable=import-outside-toplevel  (the eager backend runs without)
    return keras.mixed_precision.global_policy().name


def restore(root, path: str) -> None:
    """Restores ``root`` (a tf.train.Checkpoint) from the checkpoint ``path``: raises one of
    ``UNREADABLE`` for a damaged one (``checkpoints.restore_newest`` then tries an older one),
    CheckpointMismatchError for one that does not fit."""
    reader = tf.train.load_checkpoint(path)
    keys = reader.get_variable_to_shape_map()
    graph = object_graph(reader) if OBJECT_GRAPH_KEY in keys else None
    if graph is None:
        raise CheckpointMismatchError(
            f"The checkpoint {path} was written by a graph-mode (TF1) Saver: it names "
            f"variables ({', '.join(sorted(keys)[:3])}{' ...' if len(keys) > 3 else ''}), "
            "while an eager run saves and restores objects (tf.train.Checkpoint). Train "
            "the eager model in another logdir, or run this logdir's graph code with "
            "tf.compat.v1.disable_eager_execution().")
    precision = _precision_change(root, keys)
    if precision is not None:
        raise CheckpointMismatchError(f"The checkpoint {path} does not fit the tracked "
                                      f"objects: {precision}.")
    unseeded: list = []
    dropped: list = []
    problem = misfit(reader, root, graph, unseeded, dropped)
    if problem is not None:
        renaming = _renaming(reader, root, graph)
        if renaming is not None:
            saved = ", ".join(f"{o}=..." for o, _ in renaming)
            raise CheckpointMismatchError(
                f"The checkpoint {path} holds the tracked objects under other names: "
                + ", ".join(f"{o} (now {n})" for o, n in renaming) + ". Track them under "
                f"the names they were saved with: sv.track({saved}), or use a new logdir.")
        raise CheckpointMismatchError(
            f"The checkpoint {path} does not fit the tracked objects: {problem}. The model "
            "changed since it was saved (or the logdir holds another model). Use a new "
            "logdir to start afresh; to warm-start from this checkpoint, restore it in an "
            f"init_fn: tf.train.Checkpoint(model=model).read({path!r}).expect_partial().")
    if dropped:
        raise CheckpointMismatchError(
            f"The checkpoint {path} holds optimizer state that the tracked optimizer has no "
            f"place for: {len(dropped)} value(s) ({', '.join(dropped[:4])}"
            f"{' ...' if len(dropped) > 4 else ''}). The optimizer changed since it was saved "
            "(SGD where it was Adam would drop Adam's moment estimates). Track the optimizer it "
            "was saved with; to switch optimizers, train in a new logdir and warm-start the "
            "model in an init_fn: "
            f"tf.train.Checkpoint(model=model).read({path!r}).expect_partial().")
    root.read(path).expect_partial()
    if unseeded:
        logger.warning("The checkpoint %s holds no state for %d random-layer seed generator(s) "
                       "(%s): it was written before they were saved. Those layers draw their "
                       "random numbers from their seeds again, so this resumed run differs "
                       "from an uninterrupted one.", path, len(unseeded),
                       ", ".join(unseeded[:3]) + (" ..." if len(unseeded) > 3 else ""))


def restore_newest(root, logdir: str, paths: List[str]) -> Optional[str]:
    """Restores ``root`` from the newest readable checkpoint of ``paths``
    (``checkpoints.restore_newest``); returns its path, or None without paths."""
    restored = checkpoints.restore_newest(paths, lambda path: restore(root, path), UNREADABLE,
                                          logdir)
    return restored[0] if restored is not None else None


# ------------------------------------------------------------------------------------ save

class _Traced:
    """What the snapshots of one object graph structure reuse, from one session to the next in
    a kernel (a notebook re-runs its cells, or builds its model again in the cell): the host
    copies, by the object's index in the graph, and the writes traced for them, by the indices
    of the checked copies. Tracing a write costs far more than the write of a small model (a
    1 MB MLP: 0.2 s against 15 ms); a traced write reads only the copies, so it serves any
    objects of the same ``key``."""

    def __init__(self, key: tuple):
        self.key = key
        self.copies: Dict[int, tf.Variable] = {}
        self.writes: Dict[tuple, tuple] = {}   # checked indices -> (write, check)
        self.owners: list = []   # weak references to the objects it was given back for
        self.traces = 0   # writes traced (the Python body of a write runs only then)

    @property
    def orphaned(self) -> bool:
        """True when every object it was given back for is freed."""
        return all(ref() is None for ref in self.owners)


class _TracedPool:
    """The ``_Traced`` of each object graph structure not in use. A snapshot takes its
    structure's (or a new one) and gives it back when its writes ended, so two runs never share
    copies. An entry lives while an object it was given back for lives (weak references); the
    newest entry whose objects were all freed (an orphan) is kept too, until a snapshot takes
    it or takes an entry of another structure: a cell that builds its model again frees the
    model of its last run before the new one saves, and the new one takes that entry. So the
    copies of a freed model stay in memory only until the next run, which would need as much."""

    def __init__(self):
        self._lock = threading.Lock()
        self._free: Dict[tuple, _Traced] = {}
        self._orphan: Optional[_Traced] = None

    def take(self, key: tuple) -> _Traced:
        with self._lock:
            found = self._free.pop(key, None)
            orphan, self._orphan = self._orphan, None
            if orphan is not None and orphan is not found:
                self._free.pop(orphan.key, None)   # another structure runs now: free it
            if found is not None:
                found.owners = [ref for ref in found.owners if ref() is not None]
            return found or _Traced(key)

    def holds(self, key: tuple) -> bool:
        """True when a free entry of ``key`` has a traced write."""
        with self._lock:
            found = self._free.get(key)
            return found is not None and bool(found.writes)

    def give_back(self, traced: _Traced, owners) -> None:
        known = [ref() for ref in traced.owners]
        try:
            for owner in owners:
                if not any(owner is other for other in known):
                    traced.owners.append(weakref.ref(owner, lambda _, t=traced: self._freed(t)))
        except TypeError:  # an object without weak references: it could never be freed
            return
        with self._lock:
            self._free[traced.key] = traced

    def _freed(self, traced: _Traced) -> None:
        """An object ``traced`` was given back for is freed: once all are, it is the orphan
        (the one before, if another, is dropped)."""
        with self._lock:
            if self._free.get(traced.key) is not traced or not traced.orphaned:
                return
            old, self._orphan = self._orphan, traced
            if old is not None and old is not traced and self._free.get(old.key) is old:
                del self._free[old.key]


_POOL = _TracedPool()


def _structure(objects: list, edges: list) -> tuple:
    """What a traced write of ``objects`` depends on: the edges and names of the object graph,
    and each object's type, or a variable's dtype and shape. Not the variables' own names: a
    model built again (Keras names it ``sequential_1``) reuses the write traced for the model
    before. Its copies keep that model's names, which the checkpoint records beside each value
    (``full_name``, read only by a TF1 name-based Saver); the finiteness check's messages name
    the variables of the run (``Snapshot.write_function``)."""
    kinds = []
    for obj in objects:
        if is_variable(obj):
            base = base_variable(obj)
            kinds.append((base.dtype.name, tuple(base.shape.as_list())))
        else:
            kinds.append(type(obj).__qualname__)
    return tuple(edges), tuple(kinds)


class Snapshot:
    """Host copies of the variables a Checkpoint saves, and a second Checkpoint of the same
    objects that saves the copies in their place. ``copy()`` (training thread) refreshes them;
    ``write_function(checked)`` then writes the state of that instant (from any thread).
    ``release()`` after the last write: the copies and the traced writes go to the next
    snapshot of the same object graph in this process (``_TracedPool``). ``owners``: the
    objects whose lifetime bounds theirs (default: ``items``'s)."""

    def __init__(self, items: Dict[str, object], owners=None):
        self.writer = tf.train.Checkpoint(**items)
        _ = self.writer.save_counter  # created now, so that it is saved (and restores cleanly)
        self._owners = list(items.values() if owners is None else owners)
        self._copies = object_identity.ObjectIdentityDictionary()
        self.writer._saver._object_map = self._copies  # pylint: disable=protected-access
        self._objects: list = []   # the object graph the newest copy() saw (_object_graph)
        self._traced: Optional[_Traced] = None   # of that graph
        self.why_not = ""   # why the objects cannot be copied (copy(), has_traced_write())

    def copies_of(self, variables) -> list:
        """The host copies of ``variables`` (tf.Variables), in their order; None for one
        without a copy (not saved, or before the first ``copy()``)."""
        by_base = object_identity.ObjectIdentityDictionary()
        for obj, copy in self._copies.items():
            by_base[base_variable(obj)] = copy
        return [by_base.get(variable) for variable in variables]

    def copy(self) -> bool:
        """Copies every variable to its host copy; False (nothing copied, ``why_not`` says
        why) when the checkpoint saves tensors that are not in the object graph's variables (a
        dataset iterator, a table, a v1 optimizer's slots): then the caller saves
        synchronously."""
        objects, edges = _object_graph(self.writer)
        if not self._copyable(objects):
            return False
        fresh = ()
        if self._changed(objects, edges):
            fresh = self._use(objects, edges)
        with tf.device("CPU:0"):
            for obj, copy in self._copies.items():
                if not any(copy is new for new in fresh):
                    copy.assign(base_variable(obj))
        return True

    def _copyable(self, objects: list) -> bool:
        """False (``why_not`` says why) when ``copy()`` cannot copy ``objects``."""
        if any(not is_variable(o) and _has_own_tensors(o) for o in objects
               if o is not self.writer):
            self.why_not = ("a tracked object saves state that is not a variable (a dataset "
                            "iterator, a table), which cannot be copied aside.")
            return False
        if any(_has_slot_variables(o) for o in objects):
            self.why_not = ("a tracked optimizer keeps slot variables outside the object "
                            "graph (tf.compat.v1.train or tf_keras optimizers), which a "
                            "snapshot cannot copy; Keras 3 optimizers can be.")
            return False
        return True

    def _changed(self, objects: list, edges: list) -> bool:
        """True when the object graph is not the one of the newest copy(): other objects,
        other edges (a write traced for other names would save the objects under those), or a
        variable of another shape."""
        if self._traced is None or len(objects) != len(self._objects) or any(
                new is not old for new, old in zip(objects, self._objects)):
            return True
        return self._traced.key[0] != tuple(edges) or any(
            copy.shape != base_variable(obj).shape for obj, copy in self._copies.items())

    def _use(self, objects: list, edges: list) -> list:
        """The copies and traced writes of the object graph ``objects`` (its ``edges``), from
        the pool when a snapshot of the same graph gave them back; returns the copies made
        now (they hold their variable's value already)."""
        key = _structure(objects, edges)
        if self._traced is None or self._traced.key != key:
            if self._traced is not None:
                _POOL.give_back(self._traced, self._owners)
            self._traced = _POOL.take(key)
        copies, fresh = self._traced.copies, []
        self._copies.clear()
        with tf.device("CPU:0"):
            for index, obj in enumerate(objects):
                if not is_variable(obj):
                    continue
                if index not in copies:
                    base = base_variable(obj)
                    copies[index] = tf.Variable(base.read_value(), trainable=False,
                                                name=base.name.split(":")[0])
                    fresh.append(copies[index])
                self._copies[obj] = copies[index]
        self._objects = objects
        return fresh

    def has_traced_write(self) -> bool:
        """True when a write traced for the object graph as it is now is at hand (of this
        snapshot, or in the pool): a save then costs no tracing. False, with ``why_not``, when
        the object graph cannot be copied at all."""
        objects, edges = _object_graph(self.writer)
        if not self._copyable(objects):
            return False
        if self._traced is not None and not self._changed(objects, edges):
            return bool(self._traced.writes)
        return _POOL.holds(_structure(objects, edges))

    def release(self) -> None:
        """After the last write: the copies and traced writes go back to the pool."""
        traced, self._traced, self._objects = self._traced, None, []
        self._copies.clear()
        if traced is not None:
            _POOL.give_back(traced, self._owners)

    def write_function(self, checked) -> Tuple[Callable[[str], object], finite.VariableCheck]:
        """After a ``copy()``: ``(write, check)``. ``write(path)`` writes the copies as the
        checkpoint ``path`` in one call of a traced ``tf.function``; with ``checked``
        (tf.Variables saved here, the trainable ones), it is refused, raising
        InvalidArgumentError (``finite.is_guard_failure``) and leaving only its parts
        (``<path>_temp``; on s3://, ``<path>.part-*``), unless their copies are finite
        (``finite.VariableCheck.guard``: the check runs beside the write and gates the merge
        of its parts). ``check``: the fast check of the same copies (``VariableCheck.run``),
        to name the variables of a refused write or to give the verdict before the write
        ended; traced at its first run, which most runs never need (MobileNetV2 and Adam:
        0.9 s).

        The write is traced in the calling thread (the training thread: a graph built in a
        background thread, at the end of a Keras fit, deadlocked once, when the garbage
        collector freed a tf.data iterator there whose destructor waits for threads of its
        own), once per structure of the object graph saved in this process (its edges, types,
        dtypes and shapes: ``_TracedPool``), so that re-running a cell, or building the same
        model again, reuses it (MobileNetV2 and Adam, 580 variables: 1.3 s, once). Once
        traced, a write runs no Python per variable (there: 80 ms, where an eager write of
        the same copies takes 190 ms)."""
        copies = self.copies_of(checked)
        if any(copy is None for copy in copies):
            copies = []  # one is not saved: the caller checks the live variables instead
        by_copy = object_identity.ObjectIdentityDictionary()
        for index, copy in self._traced.copies.items():
            by_copy[copy] = index
        key = tuple(by_copy[copy] for copy in copies)
        if key not in self._traced.writes:
            self._traced.writes[key] = self._trace_write(copies)
        function, check = self._traced.writes[key]
        # The copies may be named after the variables of a model built before this one.
        return function, check.standing_for(checked) if copies else check

    def _trace_write(self, copies: list) -> tuple:
        """(the traced write, the check of ``copies``): see ``write_function``."""
        check = finite.VariableCheck.eager(copies)
        device = next(iter(self._copies.values())).device  # save_counter's copy, at least
        writer, traced = self.writer, self._traced

        def write(prefix):
            traced.traces += 1
            # On the copies' own device, so that the object graph is saved with them: one
            # shard, as an eager write makes (a bare "/cpu:0" would make a second one).
            with tf.device(device):
                return writer.write(prefix)

        function = tf.function(check.guard(write), autograph=False,
                               input_signature=[tf.TensorSpec([], tf.string)])
        return function.get_concrete_function(), check


class Refusal:
    """The verdict of the finiteness check of the save of ``step``: once decided,
    ``variables`` names the checked variables that held a NaN or an infinity ([] when all
    were finite), or ``error`` holds what the check raised.

    The writer thread learns it from its write (``written``: the write passed or was refused).
    The training thread takes it at its first step boundary after the write ended; when it
    needs it before (its next save, the session's end), it does not wait for the write: it
    checks the same copies itself with ``check`` (``VariableCheck.run``, every core, a few
    milliseconds at 100 MB), which gives the same answer. ``check`` also names the variables
    of a refused write.
    """

    def __init__(self, step: int, check: finite.VariableCheck):
        self.step = step
        self.variables: List[str] = []
        self.error: Optional[BaseException] = None
        self._check = check
        self._written: Optional[bool] = None   # set by the writer: passed (True) or refused
        self._decided = False
        self._lock = threading.Lock()

    @property
    def known(self) -> bool:
        """True once the write passed or was refused, or the verdict was decided: then
        ``decide()`` checks only to name what a refused write held."""
        return self._written is not None or self._decided

    def written(self, passed: bool) -> None:
        """The writer thread: the guarded write passed (True) or was refused (False)."""
        self._written = passed

    def decide(self) -> "Refusal":
        """Decides the verdict (once, in whichever thread asks first); returns self."""
        with self._lock:
            if self._decided:
                return self
            self._decided = True
            if self._written:
                return self
            try:
                self.variables = self._check.run()
            except BaseException as e:  # pylint: disable=broad-except
                self.error = e
                return self
            if self._written is False and not self.variables:
                self.error = RuntimeError(
                    f"The checkpoint of step {self.step} was refused as not finite, but no "
                    "checked variable holds a NaN or an infinity.")
        return self

    @property
    def refused(self) -> bool:
        """After ``decide()``: the save must not count (not finite, or the check failed)."""
        return bool(self.variables) or self.error is not None


class CheckpointWriter:
    """Writes ``<logdir>/<basename>-<step>`` checkpoints of ``items``, one at a time.

    ``save(step)`` returns once the snapshot is taken (``async_save``) or the files are written;
    then, in order: the files, the state file (the newest first in TensorFlow's format), the
    retention sweep (``keep`` newest), and ``on_saved(step, path, wall_time, seconds)``. A write
    that fails is reported to ``on_error(CheckpointWriteError)`` and raised by the next
    ``save()`` or ``wait()``; the checkpoints written before are not touched.

    ``owners``: the objects whose lifetime bounds the reuse of the snapshot's copies and traced
    writes after ``release()`` (``Snapshot``). ``checked``: tf.Variables (the trainable ones)
    that must be finite for a save to count
    (``finite.VariableCheck``). With a snapshot, the writer thread's write is guarded: the
    check of the snapshot's copies runs beside the write of the parts and gates their merge
    under the checkpoint's name, in the same call (``Snapshot.write_function``). The training
    thread does not wait for it; at 100 MB it adds -1 to 4 % to the write (bench/bench_finite.py,
    2 cores; the most on a local disk) and 3 to 8 ms of CPU time. Without a snapshot, the calling
    thread checks before writing. Either way a refused save writes nothing under the
    checkpoint's name and changes neither the state file nor the retention; ``verdict()`` says
    which variables were not finite.
    """

    def __init__(self, items: Dict[str, object], logdir: str, basename: str, keep: int,
                 existing: List[str], *, async_save: bool = True, checked=(), owners=None,
                 on_saved: Callable = lambda *a: None, on_error: Callable = lambda e: None):
        self._items = items
        self._logdir = logdir
        self._prefix = os.path.join(logdir, basename)
        self._keep = keep
        self._kept = list(reversed(existing))  # oldest first
        self._async = async_save
        self._snapshot = Snapshot(items, owners) if async_save else None
        self._sync_writer = None
        self._on_saved = on_saved
        self._on_error = on_error
        self._checked = list(checked)
        self._verdict: Optional[Refusal] = None    # of the newest save, until verdict() took it
        self.checked_before = False   # the newest save's check ran before its write (no copies)
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self.last_path: Optional[str] = None
        self.sync_reason: Optional[str] = None   # why async saving was not possible
        self.threads: "list" = []

    @property
    def kept(self) -> List[str]:
        """The checkpoints kept, oldest first."""
        return list(self._kept)

    @property
    def checks(self) -> bool:
        """True when saves check variables (``checked`` was given)."""
        return bool(self._checked)

    def non_finite_now(self) -> List[str]:
        """The names of the checked variables that are not finite now (the live ones)."""
        return self._live_check().run() if self._checked else []

    def _live_check(self) -> finite.VariableCheck:
        """The traced check of the live variables (``VariableCheck.eager``: cached per list of
        variables, traced at its first run)."""
        return finite.VariableCheck.eager(self._checked)

    @property
    def verdict_pending(self) -> bool:
        """True from a checked ``save()`` until ``verdict()`` took its verdict."""
        return self._verdict is not None

    @property
    def verdict_known(self) -> bool:
        """True when a verdict is pending and its write ended: then ``verdict()`` checks the
        copies itself only to name what a refused write held (or after a write that failed).
        While the write runs, ``verdict()`` would run the fused check, on every core: the
        training thread takes the verdict before then only when it must."""
        verdict = self._verdict
        return verdict is not None and (verdict.known or not self.writing)

    def verdict(self) -> Optional[Refusal]:
        """The verdict of the newest checked save, and only once; None when there is none to
        take. Raises what the check raised. Does not wait for the write: when it has not ended,
        the calling thread checks the same copies itself (a few milliseconds at 100 MB; its
        first run traces the check, about a second for a few hundred variables)."""
        verdict, self._verdict = self._verdict, None
        if verdict is None:
            return None
        verdict.decide()
        if verdict.error is not None:
            raise verdict.error
        return verdict

    def save(self, step: int, final: bool = False) -> str:
        """Starts the checkpoint of ``step`` (see the class); returns its path. The verdict of
        the save before must have been taken. ``final``: the last save of the session, which
        the session's end waits for: when no write is traced for these objects yet (a short
        cell, whose only checkpoint is this one), it is written here, from the variables
        themselves, checked before op by op: tracing the snapshot's write and its check would
        cost that cell a few tenths of a second (a 1 MB model: 0.35 s, against 15 ms for the
        write; bench/bench_cell_cost.py)."""
        if self._verdict is not None:
            raise RuntimeError("save(): the verdict of the save before was not taken")
        self.wait()
        path = f"{self._prefix}-{step}"
        start = time.time()
        direct = final and self._snapshot is not None and not self._snapshot.has_traced_write()
        snapped = self._snapshot is not None and not direct and self._snapshot.copy()
        if self._snapshot is not None and not snapped and not self.sync_reason and \
                self._snapshot.why_not:
            self.sync_reason = ("Checkpoints are written synchronously (the training thread "
                                "waits for the files): " + self._snapshot.why_not)
            logger.info(self.sync_reason)
        write, check = (self._snapshot.write_function(self._checked) if snapped
                        else (None, None))
        self.checked_before = bool(self._checked) and not (check and check.names)
        verdict = None
        if self.checked_before:  # no copies to check: the live variables, before the write
            verdict = Refusal(step, finite.VariableCheck.untraced(self._checked) if direct
                              else self._live_check()).decide()
        elif self._checked:
            verdict = Refusal(step, check)
        self._verdict = verdict
        if self.checked_before and verdict.refused:
            return path
        if not snapped:
            if self._sync_writer is None:
                self._sync_writer = tf.train.Checkpoint(**self._items)
                _ = self._sync_writer.save_counter
            self._write(self._sync_writer.write, path, step, start)
            self.wait()
            return path
        thread = threading.Thread(target=self._write, name="jupyter_supervisor-checkpoint",
                                  args=(write, path, step, start, verdict), daemon=True)
        thread.start()
        self._thread = thread
        self.threads.append(thread)
        return path

    @property
    def writing(self) -> bool:
        """True while the write of the newest save runs (its thread is alive)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits for the write in progress; raises its CheckpointWriteError. False on timeout."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                return False
            self._thread = None
            self.threads = [t for t in self.threads if t.is_alive()]
        error, self._error = self._error, None
        if error is not None:
            raise error
        return True

    def release(self) -> None:
        """After the last save, once its write ended: the snapshot's copies and traced writes
        serve the next writer of the same objects in this process (``Snapshot.release``).
        While a write runs, nothing is released."""
        if self._snapshot is not None and not self.writing:
            self._snapshot.release()

    def _write(self, write: Callable[[str], object], path: str, step: int, start: float,
               verdict: Optional[Refusal] = None) -> None:
        """The writer thread: the files (``write``, refused when ``verdict`` is given and the
        copies are not finite), then the state file and the retention."""
        try:
            try:
                write(path)
            except (tf.errors.OpError, OSError) as e:
                refused = verdict is not None and finite.is_guard_failure(e)
                # A checkpoint kept under this name (a step saved again) keeps its files.
                _remove_checkpoint(path, partial_only=refused or path in self._kept)
                if refused:
                    verdict.written(False)  # the state file and the retention stay
                    return
                raise CheckpointWriteError(self._failure(path, e)) from e
            if verdict is not None:
                verdict.written(True)
            self._record(path)
        except BaseException as e:  # pylint: disable=broad-except
            self._error = e
            self._on_error(e)
            return
        self.last_path = path
        seconds = time.time() - start
        self._on_saved(step, path, start + seconds, seconds)

    def _record(self, path: str) -> None:
        """The state file names ``path`` newest, then the retention deletes the oldest."""
        if path in self._kept:
            self._kept.remove(path)
        self._kept.append(path)
        self._write_state()
        for old in self._kept[:-self._keep]:
            for name in _checkpoint_files(old):
                with contextlib.suppress(tf.errors.NotFoundError):
                    tf.io.gfile.remove(name)
        del self._kept[:-self._keep]
        self._write_state()

    def _write_state(self) -> None:
        try:
            checkpoint_management.update_checkpoint_state_internal(
                save_dir=self._logdir, model_checkpoint_path=self._kept[-1],
                all_model_checkpoint_paths=self._kept, save_relative_paths=True,
                all_model_checkpoint_timestamps=None)
        except (tf.errors.OpError, OSError) as e:
            raise CheckpointWriteError(self._failure(self._kept[-1], e, state=True)) from e

    def _failure(self, path: str, error, state: bool = False) -> str:
        older = [p for p in self._kept if p != path]
        what = ("the checkpoint state file of" if state else "the checkpoint") + f" {path}"
        return checkpoints.write_failure(self._logdir, error, what,
                                         older[-1] if older else None)


def _object_graph(root) -> Tuple[list, list]:
    """What a checkpoint of ``root`` saves: the objects it reaches, breadth first (as
    ``tf.train.TrackableView.descendants``), and every edge between them, (parent's index,
    name, child's index), also a second name of an object."""
    objects, index, edges = [root], object_identity.ObjectIdentityDictionary(), []
    index[root] = 0
    for number, obj in enumerate(objects):  # grows while it is walked
        for name, child in tf.train.TrackableView.children(obj).items():
            if child not in index:
                index[child] = len(objects)
                objects.append(child)
            edges.append((number, name, index[child]))
    return objects, edges


def _checkpoint_files(path: str) -> List[str]:
    return tf.io.gfile.glob(glob.escape(path) + ".*")


def _remove_checkpoint(path: str, partial_only: bool = False) -> None:
    """Deletes TensorFlow's partial files of the checkpoint ``path`` (``remove_refused_save``)
    and, unless ``partial_only``, the checkpoint's own files."""
    finite.remove_refused_save(path)
    if partial_only:
        return
    for name in _checkpoint_files(path):
        with contextlib.suppress(tf.errors.NotFoundError):
            tf.io.gfile.remove(name)
