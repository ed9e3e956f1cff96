"""The snapshot of an eager run's variables that a checkpoint is written from: host copies
refreshed by the training thread at a step boundary, and a write of those copies traced once
per object graph structure and reused across sessions of the kernel.

Why not TensorFlow's own ``CheckpointOptions(enable_async=True)``: its copy of Keras 3 variables
creates a ``tf.Variable`` inside a ``tf.function`` and fails from the second save on
("tf.function only supports singleton tf.Variables created on the first call").
``Snapshot`` does what that helper does, with copies made once outside any function: the
training thread copies every variable into its host copy, in one call of a function traced
once (that copy is all it waits for, there and in its next step), and the writer thread saves
the copies under the original objects' names (the saver's object map, the mechanism
TensorFlow's helper uses), with one call of a ``tf.function`` traced once, which also holds
the finiteness check of the copies (``Snapshot.write_function``).
"""
import threading
import weakref
from typing import Callable, Dict, Optional, Tuple

import tensorflow as tf
from tensorflow.python.util import object_identity

from .. import compat, finite
from .variables import base_variable, has_slot_variables, is_variable


class _Traced:
    """What the snapshots of one object graph structure reuse, from one session to the next in
    a kernel (a notebook re-runs its cells, or builds its model again in the cell): the host
    copies, by the object's index in the graph, and the writes traced for them, by the indices
    of the checked copies. Tracing a write costs far more than the write of a small model; a
    traced write reads only the copies, so it serves any objects of the same ``key``."""

    def __init__(self, key: tuple):
        self.key = key
        self.copies: Dict[int, tf.Variable] = {}
        self.copy_function: Optional[Callable] = None   # of copies (_trace_copy), once made
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


def _trace_copy(copies: list) -> Callable:
    """A traced function that copies the variables whose handles it is given (in the order
    of ``copies``) into ``copies``: ``DeepCopy`` makes a buffer of the value's own, which the
    copy takes (an assignment alone shares the variable's buffer, and TensorFlow would then
    copy it into a new one when the next step updates the variable in place: the step after
    the save would pay the copy). So the training thread pays one copy, in one call. The
    variables are arguments, not captured, so that a model built again (the same structure)
    reuses it."""
    dtypes = [copy.dtype for copy in copies]

    def copy_all(*handles):
        for copy, handle, dtype in zip(copies, handles, dtypes):
            value = tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)
            copy.assign(tf.raw_ops.DeepCopy(x=value))

    function = tf.function(copy_all, autograph=False,
                           input_signature=[tf.TensorSpec([], tf.resource)] * len(copies))
    return function.get_concrete_function()


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
        compat.redirect_checkpoint_writes(self.writer, self._copies)
        self._objects: list = []   # the object graph the newest copy() saw (_object_graph)
        self._traced: Optional[_Traced] = None   # of that graph
        self._handles: list = []   # of the variables of _copies, in the copy function's order
        self.why_not = ""   # why the objects cannot be copied (copy(), has_traced_write())

    def copies_of(self, variables) -> list:
        """The host copies of ``variables`` (tf.Variables), in their order; None for one
        without a copy (not saved, or before the first ``copy()``)."""
        by_base = object_identity.ObjectIdentityDictionary()
        for obj, copy in self._copies.items():
            by_base[base_variable(obj)] = copy
        return [by_base.get(variable) for variable in variables]

    def copy(self) -> bool:
        """Copies every variable into its host copy, in one call of a traced function
        (``_trace_copy``); False (nothing copied,
        ``why_not`` says why) when the checkpoint saves tensors that are not in the object
        graph's variables (a dataset iterator, a table, a v1 optimizer's slots): then the
        caller saves synchronously."""
        objects, edges = _object_graph(self.writer)
        if not self._copyable(objects):
            return False
        if self._changed(objects, edges):
            self._use(objects, edges)
        self._traced.copy_function(*self._handles)
        return True

    def _copyable(self, objects: list) -> bool:
        """False (``why_not`` says why) when ``copy()`` cannot copy ``objects``."""
        if any(not is_variable(o) and compat.saves_own_tensors(o) for o in objects
               if o is not self.writer):
            self.why_not = ("a tracked object saves state that is not a variable (a dataset "
                            "iterator, a table), which cannot be copied aside.")
            return False
        if any(has_slot_variables(o) for o in objects):
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

    def _use(self, objects: list, edges: list) -> None:
        """The copies, the copy function and the traced writes of the object graph
        ``objects`` (its ``edges``), from the pool when a snapshot of the same graph gave them
        back."""
        key = _structure(objects, edges)
        if self._traced is None or self._traced.key != key:
            if self._traced is not None:
                _POOL.give_back(self._traced, self._owners)
            self._traced = _POOL.take(key)
        copies = self._traced.copies
        self._copies.clear()
        self._handles = []
        with tf.device("CPU:0"):
            for index, obj in enumerate(objects):
                if not is_variable(obj):
                    continue
                base = base_variable(obj)
                if index not in copies:
                    copies[index] = tf.Variable(base.read_value(), trainable=False,
                                                name=base.name.split(":")[0])
                self._copies[obj] = copies[index]
                self._handles.append(base.handle)
        if self._traced.copy_function is None:
            self._traced.copy_function = _trace_copy(list(self._copies.values()))
        self._objects = objects

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
        traced, self._traced, self._objects, self._handles = self._traced, None, [], []
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
        ended; traced at its first run, which most runs never need.

        The write is traced in the calling thread (the training thread: a graph built in a
        background thread, at the end of a Keras fit, deadlocked once, when the garbage
        collector freed a tf.data iterator there whose destructor waits for threads of its
        own), once per structure of the object graph saved in this process (its edges, types,
        dtypes and shapes: ``_TracedPool``), so that re-running a cell, or building the same
        model again, reuses it: tracing costs about as much per variable as a few writes.
        Once traced, a write runs no Python per variable, where an eager write of the same
        copies runs some for each."""
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
