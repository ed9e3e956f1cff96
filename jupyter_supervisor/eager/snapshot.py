"""The snapshot of an eager run's variables that a checkpoint is written from: host copies
taken by the training thread at a step boundary, and their write as a ``tf.train.Checkpoint`` of
the tracked objects, in a writer thread.

Why not TensorFlow's own ``CheckpointOptions(enable_async=True)``: its copy of Keras 3 variables
creates a ``tf.Variable`` inside a ``tf.function`` and fails from the second save on
("tf.function only supports singleton tf.Variables created on the first call").
``Snapshot`` does what that helper does without making variables: the training thread copies
every variable to host memory of the snapshot's own, with one call of a function traced once per
object graph structure and a memory copy of them, split across the cores (that copy is all it
waits for, there and in its next step), and the writer thread checks the copies for NaN and
infinity, then writes them with TensorFlow's own ops, under the keys and with the object graph that
``tf.train.Checkpoint.write`` gives them, worked out once per snapshot
(``Snapshot.write_function``). The ops run in the writer thread: a traced write's kernels would
run on TensorFlow's shared thread pools, beside the training step's, and cost the run more CPU
than the same write made eagerly (docs/performance.md).

The copies go into the same host memory save after save (``_HostMemory``), not into memory
allocated for each: a large allocation is a mapping of its own, given back to the system when it
is freed, so a new copy touches new pages every time, and the page faults cost more than the
copy (at 150 MB here: 34,000 faults, about 100 ms of CPU and 40 ms of the training thread's
wait, against 17 ms for the copy into memory already touched).
"""
import mmap
import os
import threading
import weakref
from typing import Callable, Dict, NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

from .. import compat, finite
from .variables import IdentityMap, base_variable, has_slot_variables, is_variable


class _Traced:
    """What the snapshots of one object graph structure reuse, from one session to the next in
    a kernel (a notebook re-runs its cells, or builds its model again in the cell): the
    function that copies the variables (``_trace_copy``; the check of the copies is
    ``finite.copies_flags``, per structure too). Tracing costs far more than a save of a small
    model; the function captures nothing (the variables are its arguments), so it serves any
    objects of the same ``key``."""

    def __init__(self, key: tuple):
        self.key = key
        self.copy_function: Optional[Callable] = None
        self.owners: list = []   # weak references to the objects it was given back for
        self.traces = 0   # copy functions traced (the Python body of one runs only then)

    @property
    def orphaned(self) -> bool:
        """True when every object it was given back for is freed."""
        return all(ref() is None for ref in self.owners)


class _TracedPool:
    """The ``_Traced`` of each object graph structure not in use. A snapshot takes its
    structure's (or a new one) and gives it back after its last write. An entry lives while an
    object it was given back for lives (weak references); the newest entry whose objects were
    all freed (an orphan) is kept too, until a snapshot takes it or takes an entry of another
    structure: a cell that builds its model again frees the model of its last run before the
    new one saves, and the new one takes that entry."""

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
        """True when a free entry of ``key`` has a traced copy function."""
        with self._lock:
            found = self._free.get(key)
            return found is not None and found.copy_function is not None

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
    """What the traced functions of ``objects`` depend on: the edges and names of the object
    graph, and each object's type, or a variable's dtype, shape and device. Not the variables'
    own names: a model built again (Keras names it ``sequential_1``) reuses the functions
    traced for the model before."""
    kinds = []
    for obj in objects:
        if is_variable(obj):
            base = base_variable(obj)
            shape = None if base.shape.rank is None else tuple(base.shape.as_list())
            kinds.append((base.dtype.name, shape, base.device))
        else:
            kinds.append(type(obj).__qualname__)
    return tuple(edges), tuple(kinds)


def _in_host_memory(variable: tf.Variable) -> bool:
    return tf.DeviceSpec.from_string(variable.device or "").device_type in (None, "CPU")


# The dtypes whose copies go into the snapshot's own memory (``_HostMemory``): those that NumPy
# hands to TensorFlow as they are (DLPack; TensorFlow takes no bool from it, NumPy has no
# bfloat16). A variable of another dtype is copied into memory allocated for each save, as one
# on an accelerator is.
_OWN_MEMORY_DTYPES = frozenset([
    tf.float16, tf.float32, tf.float64, tf.complex64, tf.complex128,
    tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8, tf.uint16, tf.uint32, tf.uint64])

# TensorFlow's alignment of tensor memory (``Allocator::kAllocatorAlignment``).
_ALIGNMENT = 64


def _in_own_memory(variable: tf.Variable) -> bool:
    """True when the snapshot copies ``variable`` into memory of its own (``_HostMemory``):
    one in host memory, of a dtype of ``_OWN_MEMORY_DTYPES``, of a fixed shape (a variable made with
    ``shape=None`` may change its shape), not empty."""
    return (_in_host_memory(variable) and variable.dtype in _OWN_MEMORY_DTYPES
            and variable.shape.is_fully_defined() and variable.shape.num_elements() > 0)


def _trace_copy(variables: list) -> Callable:
    """A traced function that reads the variables whose handles it is given (of the dtypes and
    devices of ``variables``, in their order) and returns, for each, what ``_HostMemory.fill``
    makes the copy from: for a variable ``_in_own_memory``, its value as it is (a read of a
    variable in host memory shares the variable's memory: the caller copies it at once, before
    the next step); for another in host memory, a copy in new memory (``DeepCopy``: TensorFlow
    would otherwise copy the shared memory when the next step updates the variable in place,
    and the step after the save would pay the copy); for a variable elsewhere (an accelerator's
    memory), its move to host memory. The variables are arguments, not captured, so that a model
    built again (the same structure) reuses the function. It is called with its arguments as
    they are (``compat.call_flat``): its public call binds each to the signature in Python,
    about 30 microseconds a variable in the training thread at each save."""
    kinds = [(variable.dtype, _in_own_memory(variable), _in_host_memory(variable))
             for variable in variables]

    def copy_all(*handles):
        values = []
        for handle, (dtype, own_memory, in_host_memory) in zip(handles, kinds):
            value = tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)
            if own_memory:
                values.append(value)
                continue
            with tf.device("CPU:0"):
                values.append(tf.raw_ops.DeepCopy(x=value) if in_host_memory
                              else tf.identity(value))
        return values

    function = tf.function(copy_all, autograph=False,
                           input_signature=[tf.TensorSpec([], tf.resource)] * len(kinds))
    concrete = function.get_concrete_function()

    def copy(*handles) -> list:
        return compat.call_flat(concrete, list(handles))
    return copy


class _HostMemory:
    """The host memory a snapshot copies its variables into, kept from one save to the next: a
    NumPy array per variable ``_in_own_memory`` (None for another), allocated at the first copy,
    its pages touched then and not again.

    ``fill`` copies into it and lends the copy out as tensors that share its memory (DLPack):
    the write, the check, ``Snapshot.copies_of``. Each tensor holds a view of its array (a weak
    reference says whether one is alive), so the memory is written again only once no tensor of
    the copy before lives: a copy still in use at the next save (held by the error of a write
    that failed, or by a caller of ``Snapshot.copies_of``) is never changed; that save gets
    memory of its own, and the old memory goes with its last tensor."""

    def __init__(self, variables: list):
        self._kinds = [(tuple(v.shape.as_list()), np.dtype(v.dtype.as_numpy_dtype))
                       if _in_own_memory(v) else None for v in variables]
        self._arrays: list = []
        self._lent: list = []   # weak references to the views of the arrays lent out

    def fill(self, values: list) -> list:
        """The copies of a snapshot: ``values`` (``_trace_copy``'s), those of the variables
        ``_in_own_memory`` copied into this memory and lent out as tensors."""
        if not self._arrays or any(ref() is not None for ref in self._lent):
            self._arrays = _host_arrays(self._kinds)
        self._lent = []
        _copy([(array, np.asarray(value)) for array, value in zip(self._arrays, values)
               if array is not None])
        copies = []
        for array, value in zip(self._arrays, values):
            if array is None:
                copies.append(value)
                continue
            view = array.view()   # what the tensor holds: its life is the tensor's
            self._lent.append(weakref.ref(view))
            copies.append(tf.experimental.dlpack.from_dlpack(view.__dlpack__()))
        return copies


# A copy is split across the cores in parts of at least this many bytes (``_copy``), on at most
# ``_MAX_COPY_THREADS`` threads.
_PART_BYTES = 16 << 20
_MAX_COPY_THREADS = 8


def _copy(pairs: list) -> None:
    """Copies each ``(array, source)`` of ``pairs`` (of the same shape and dtype) into its
    array, split into parts of about the same size, one per core (at most
    ``_MAX_COPY_THREADS``; a part of at least ``_PART_BYTES``), each copied by a thread of its
    own, the calling thread one of them: NumPy lets go of the GIL while it copies. The training
    thread waits for the copy, so the cores are free: on 2 cores here the first save call of
    a run, whose copy touches its memory for the first time (the page faults are most of it),
    took 90 ms against 143 ms on one thread at 150 MB; a later one 23 against 29 ms
    (``bench/profile_save.py``)."""
    total = sum(array.nbytes for array, _ in pairs)
    parts = _split(pairs, max(1, min(_cores(), _MAX_COPY_THREADS, total // _PART_BYTES)))
    errors: list = []
    threads = [threading.Thread(target=_copy_part, args=(part, errors), daemon=True,
                                name="jupyter_supervisor-copy") for part in parts[1:]]
    for thread in threads:
        thread.start()
    _copy_part(parts[0], errors)
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _split(pairs: list, parts: int) -> list:
    """``pairs`` (``(array, source)``) cut into ``parts`` lists of ``(array, source)`` 1-D
    slices, of about the same number of bytes each, that together cover every element once:
    part ``k`` holds the elements that start before byte ``(k + 1) * size`` of all arrays and
    at or after byte ``k * size``, ``size`` the bytes of all over ``parts``, rounded up. One
    part is ``pairs`` as they are."""
    if parts == 1:
        return [pairs]
    size = max(1, -(-sum(array.nbytes for array, _ in pairs) // parts))
    split: list = [[] for _ in range(parts)]
    offset = 0   # the bytes of the arrays before
    for array, source in pairs:
        flat, flat_source, item = array.reshape(-1), source.reshape(-1), array.itemsize
        start = 0
        for number in range(offset // size, min(parts, -(-(offset + array.nbytes) // size))):
            end = min(flat.size, -(-((number + 1) * size - offset) // item))
            if start < end:
                split[number].append((flat[start:end], flat_source[start:end]))
                start = end
        offset += array.nbytes
    return split


def _copy_part(part: list, errors: list) -> None:
    try:
        for array, source in part:
            np.copyto(array, source)
    except BaseException as e:  # pylint: disable=broad-except
        errors.append(e)   # raised in the calling thread (``_copy``)


def _host_arrays(kinds: list) -> list:
    """Uninitialized arrays of the ``(shape, dtype)`` of ``kinds`` (None for None), in one
    private anonymous memory mapping, given back to the system with the last of them: each
    aligned to 64 bytes (TensorFlow's alignment: its kernels abort the process on a tensor
    whose memory is aligned less), in the pages the system gives any mapping (NumPy asks
    Linux for huge pages for a large array of its own, whose first touch cost 2.5 times more
    here: 1.1 s against 0.4 s for 400 MB)."""
    placed, size = [], 0   # (shape, dtype, elements, offset) or None, per kind
    for kind in kinds:
        if kind is None:
            placed.append(None)
            continue
        shape, dtype = kind
        elements, offset = int(np.prod(shape, dtype=np.int64)), -(-size // _ALIGNMENT) * _ALIGNMENT
        placed.append((shape, dtype, elements, offset))
        size = offset + elements * dtype.itemsize
    if not size:
        return [None] * len(kinds)
    memory = (mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE) if hasattr(mmap, "MAP_PRIVATE")
              else mmap.mmap(-1, size))
    return [None if place is None else
            np.frombuffer(memory, place[1], place[2], place[3]).reshape(place[0])
            for place in placed]


class _Plan(NamedTuple):
    """How the copies of a snapshot's variables are written as a ``tf.train.Checkpoint`` of its
    objects: each saved tensor's checkpoint key (``names``), slice spec (``slices``) and source
    (``order``: the index of a copy, or None for the object graph, ``graph``: a string tensor
    holding its serialized ``TrackableObjectGraph``)."""
    names: tf.Tensor
    slices: tf.Tensor
    order: Tuple[Optional[int], ...]
    graph: tf.Tensor


class Snapshot:
    """Host copies of the variables a ``tf.train.Checkpoint`` of ``items`` saves, taken at an
    instant, and their write as that checkpoint. ``copy()`` (training thread) takes them;
    ``write_function(checked)`` then makes the write of that copy (run it from any thread).
    ``release()`` after the last write: the traced functions go to the next snapshot of the same
    object graph in this process (``_TracedPool``). ``owners``: the objects whose lifetime bounds
    theirs (default: ``items``'s)."""

    def __init__(self, items: Dict[str, object], owners=None):
        self.writer = tf.train.Checkpoint(**items)
        _ = self.writer.save_counter  # created now, so that it is saved (and restores cleanly)
        self._owners = list(items.values() if owners is None else owners)
        self._objects: list = []     # the object graph the newest copy() saw (_object_graph)
        self._variables: list = []   # its variables, in the copy function's order
        self._containers: list = []  # its objects that are no variables
        self._handles: list = []     # its variables', the copy function's arguments
        self._open_shapes: list = []   # (variable, shape) of those of a shape left open
        self._traced: Optional[_Traced] = None   # of that graph
        self._plan: Optional[_Plan] = None       # of that graph, made at its first write
        self._memory: Optional[_HostMemory] = None   # of that graph, for the copies
        self._copies: list = []      # the newest copy: a host tensor per variable
        self.why_not = ""   # why the objects cannot be copied (copy(), is_traced())

    def copies_of(self, variables) -> list:
        """The newest copies of ``variables`` (tf.Variables), in their order; None for one
        without a copy (not saved, or before the first ``copy()``)."""
        by_base = IdentityMap()
        for obj, copy in zip(self._variables, self._copies):
            by_base[base_variable(obj)] = copy
        return [by_base.get(variable) for variable in variables]

    def copy(self) -> bool:
        """Copies every variable into a host tensor of its own: one call of a traced function
        (``_trace_copy``), then a memory copy per variable into the memory of the copy before
        once nothing uses it (``_HostMemory``); False (nothing copied, ``why_not`` says why)
        when the checkpoint saves tensors that are not in the object graph's variables (a
        dataset iterator, a table, a v1 optimizer's slots): then the caller saves
        synchronously."""
        objects, edges = _object_graph(self.writer)
        if self._changed(objects, edges):
            if not self._copyable(objects):
                return False
            self._use(objects, edges)
        elif not self._copyable(self._containers):
            # The same objects: only an optimizer's slots can have come (outside the graph).
            return False
        if self._plan is None:
            self._plan = self._make_plan()
            if self._plan is None:
                return False
        # The copy before is let go first (its write ended before this save): unless
        # something still holds it, the new one is made in its memory (``_HostMemory``).
        self._copies = []
        self._copies = self._memory.fill(self._traced.copy_function(*self._handles))
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
        other edges (the keys of the checkpoint would change), or a variable of another
        shape."""
        if self._traced is None or len(objects) != len(self._objects) or any(
                new is not old for new, old in zip(objects, self._objects)):
            return True
        return self._traced.key[0] != tuple(edges) or any(
            base_variable(obj).shape != shape for obj, shape in self._open_shapes)

    def _use(self, objects: list, edges: list) -> None:
        """The traced functions of the object graph ``objects`` (its ``edges``), from the pool
        when a snapshot of the same structure gave them back."""
        key = _structure(objects, edges)
        if self._traced is None or self._traced.key != key:
            if self._traced is not None:
                _POOL.give_back(self._traced, self._owners)
            self._traced = _POOL.take(key)
        self._objects = objects
        self._variables = [obj for obj in objects if is_variable(obj)]
        self._containers = [obj for obj in objects if not is_variable(obj)]
        bases = [base_variable(obj) for obj in self._variables]
        self._handles = [base.handle for base in bases]
        # Only a variable of a shape left open can change it (``_changed``).
        self._open_shapes = [(obj, base.shape) for obj, base in zip(self._variables, bases)
                             if not base.shape.is_fully_defined()]
        self._plan = None
        self._memory = _HostMemory(bases)
        if self._traced.copy_function is None:
            self._traced.copy_function = _trace_copy(bases)
            self._traced.traces += 1

    def is_traced(self) -> bool:
        """True when the functions a save needs for the object graph as it is now are traced
        (of this snapshot, or in the pool): a save then costs no tracing. False, with
        ``why_not``, when the object graph cannot be copied at all."""
        objects, edges = _object_graph(self.writer)
        if not self._copyable(objects):
            return False
        if self._traced is not None and not self._changed(objects, edges):
            return self._traced.copy_function is not None
        return _POOL.holds(_structure(objects, edges))

    def release(self) -> None:
        """After the last write: the traced functions go back to the pool."""
        traced, self._traced = self._traced, None
        self._objects, self._variables, self._containers = [], [], []
        self._handles, self._open_shapes = [], []
        self._plan, self._memory, self._copies = None, None, []
        if traced is not None:
            _POOL.give_back(traced, self._owners)

    def write_function(self, checked) -> Tuple[Callable[[str], None], finite.VariableCheck]:
        """After a ``copy()``: ``(write, check)`` of that copy. ``write(path)`` writes it as the
        checkpoint ``path``, the one ``tf.train.Checkpoint.write`` of the same objects writes,
        in the calling thread (its ops run there): its parts first (``<path>_temp``; on s3://,
        ``<path>.part-*``), then merged under the checkpoint's name, as TensorFlow does. With
        ``checked`` (tf.Variables saved here, the trainable ones), it first runs ``check``, the
        check of their copies, and writes nothing when one is not finite: it raises
        InvalidArgumentError (``finite.is_guard_failure``) naming them. ``check`` also serves to
        give the verdict before the write ended, in another thread.

        The functions it uses are traced in the calling thread, the training thread: a graph
        built in a background thread, at the end of a Keras fit, deadlocked once, when the
        garbage collector freed a tf.data iterator there whose destructor waits for threads of
        its own."""
        copies, plan = list(self._copies), self._plan   # this copy's: copy() makes new ones
        check, flags = self._check(checked, copies)

        def write(path: str) -> None:
            bad = [name for name, ok in zip(check.names, flags()) if not ok]
            if bad:
                raise tf.errors.InvalidArgumentError(
                    None, None, f"{finite.GUARD_TEXT}: {', '.join(bad)}")
            tensors = [plan.graph if index is None else copies[index] for index in plan.order]
            with tf.device("CPU:0"):
                # TensorFlow's sharded protocol: the parts, then the merge under the name.
                parts = tf.raw_ops.ShardedFilename(
                    basename=compat.save_parts(path).prefix,
                    shard=0, num_shards=1)
                tf.raw_ops.SaveV2(prefix=parts, tensor_names=plan.names,
                                  shape_and_slices=plan.slices, tensors=tensors)
                tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=[parts],
                                              destination_prefix=path, delete_old_dirs=True)
        return write, check

    def _check(self, checked, copies: list) -> Tuple[finite.VariableCheck, Callable]:
        """(the finiteness check of the copies, in ``copies``, of the float variables of
        ``checked``, named after them; its flags, one per name). A check of nothing when one
        of them has no copy (it is not saved: the caller checks the live variables
        instead)."""
        floats = finite.float_variables(checked)
        index = IdentityMap()
        for number, obj in enumerate(self._variables):
            index[base_variable(obj)] = number
        chosen = [index.get(variable) for variable in floats]
        if not chosen or None in chosen:
            return finite.VariableCheck([], lambda: []), lambda: []
        values = [copies[number] for number in chosen]
        flags = finite.copies_flags(values)
        return finite.VariableCheck.of_copies(floats, values), lambda: flags(*values).numpy()

    def _make_plan(self) -> Optional[_Plan]:
        """The keys, slices and sources of the tensors of a ``tf.train.Checkpoint.write`` of the
        objects, and their object graph, as TensorFlow's saver gathers them; None (``why_not``
        says why) when a saved tensor is not a copy's."""
        serialized, registered = compat.checkpoint_tensors(self.writer)
        index = IdentityMap()
        for number, obj in enumerate(self._variables):
            index[obj] = number
        names, slices, order, graph = [], [], [], None
        for trackable, tensors in serialized.items():
            for key, tensor in tensors.items():
                if trackable is None:
                    graph = tensor
                    index_of = None
                elif trackable in index and not isinstance(tensor, dict):
                    index_of = index[trackable]
                else:  # a variable saved in slices, or state of another kind
                    self.why_not = (f"the checkpoint saves {key} other than as the value of "
                                    "one variable, which a snapshot cannot copy.")
                    return None
                names.append(key)
                slices.append("")
                order.append(index_of)
        if registered:
            self.why_not = "a tracked object is saved by a saver of its own."
            return None
        with tf.device("CPU:0"):
            return _Plan(tf.constant(names), tf.constant(slices), tuple(order), graph)


def _object_graph(root) -> Tuple[list, list]:
    """What a checkpoint of ``root`` saves: the objects it reaches, breadth first (as
    ``tf.train.TrackableView.descendants``), and every edge between them, (parent's index,
    name, child's index), also a second name of an object."""
    objects, index, edges = [root], IdentityMap(), []
    index[root] = 0
    for number, obj in enumerate(objects):  # grows while it is walked
        for name, child in tf.train.TrackableView.children(obj).items():
            if child not in index:
                index[child] = len(objects)
                objects.append(child)
            edges.append((number, name, index[child]))
    return objects, edges
