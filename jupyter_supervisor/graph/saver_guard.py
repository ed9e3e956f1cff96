"""The finiteness checks of ``finite`` in a graph. The guard of a ``Saver``: the check put into
the Saver's own session run, so that a save of a model that is not finite puts nothing under the
checkpoint's name. Beside the write as the gate of the merge of a sharded Saver's parts (the
Supervisor's own Saver is sharded where that writes the same files), or before the write of a
plain Saver. And the fused check of the variables as one op of the graph (``variable_check``),
for those a guard cannot cover and to name the variables of a refused save.
"""
import contextlib
from typing import List, Optional, Sequence

import tensorflow as tf

from .. import compat
from ..finite import (FLOAT_TYPES, GUARD_TEXT, VariableCheck, finite_flags, float_variables,
                      variable_name)

# The name scope of the Assert that guards a Saver's save op.
_GUARD = "jupyter_supervisor_finite_guard"

# The graph collection holding the flags op of the newest check built in a graph.
_COLLECTION = "jupyter_supervisor_finite_flags"


def variable_check(variables: Sequence, graph=None) -> Optional[VariableCheck]:
    """The fused check (``finite.VariableCheck``, run with ``run(sess)``) of ``variables`` as
    one op in ``graph`` (default: the default graph), built in the thread that builds the
    graph, before it is finalized. A check of the same variables built earlier in the graph is
    reused (so a finalized graph keeps its check); on a finalized graph without one, returns
    None."""
    graph = graph if graph is not None else tf.compat.v1.get_default_graph()
    variables = float_variables(variables)
    names = [variable_name(v) for v in variables]
    if not variables:
        return VariableCheck([], lambda sess: [])
    op = _reusable_flags(graph, names)
    if op is None:
        if graph.finalized:
            return None
        with graph.as_default(), tf.name_scope("jupyter_supervisor_finite"):
            op = finite_flags(variables, names)
        graph.clear_collection(_COLLECTION)
        graph.add_to_collection(_COLLECTION, op)
    return VariableCheck(names, lambda sess: sess.run(op))


def _reusable_flags(graph, names: List[str]):
    """The flags op of the graph's collection if it checks exactly ``names``, else None."""
    for op in graph.get_collection(_COLLECTION):
        prefix = op.op.name.rsplit("/", 1)[0] + "/"
        checked = [flag.op.name[len(prefix):] for flag in op.op.inputs]
        if checked == names:
            return op
    return None


def _one_by_one(tensors, names: Sequence[str], name: Optional[str] = None):
    """An op that raises InvalidArgumentError (its text has ``GUARD_TEXT`` and the name) when
    one of ``tensors`` holds a NaN or an infinity: a CheckNumerics of each, one after the
    other. The check ``guard_saver`` runs beside a graph Saver's write, which reads the same
    bytes.

    CheckNumerics is a plain loop on one thread, where ``finite_flags``'s reduction reads on
    every core. So it leaves the write its core and most of the memory bandwidth: beside the
    Supervisor's write it cost the save less than the reduction did, at several times its CPU
    time (bench/bench_finite.py; docs/performance.md). It still reads faster than a write into
    the page cache, so the check ends first. (The eager writer checks its copies before it
    writes them, in its own thread: the fused one, ``VariableCheck.of_copies``.)"""
    done = []
    for tensor, tensor_name in zip(tensors, names):
        with tf.control_dependencies(done):
            done = [tf.debugging.check_numerics(tensor, f"{GUARD_TEXT}: {tensor_name}").op]
    return tf.group(*done, name=name)


def guard_saver(saver, graph, names: Sequence[str]) -> set:
    """Makes ``saver``'s saves fail, putting nothing under the checkpoint's name, unless the
    tensors they write for the variables ``names`` (their checkpoint keys: the trainable
    variables) are finite: an Assert over exactly those tensors (``finite_flags``), in the one
    session run of ``Saver.save``, so that what is checked is what is written. Then
    ``Saver.save`` raises InvalidArgumentError (``is_guard_failure``), and neither the
    checkpoint state file nor the retention changes. Other saved tensors (optimizer slots, a
    "best loss" that starts at +inf) are not checked.

    A sharded Saver (``sharded_where_plain_writes``) writes its parts into a temporary
    directory (on s3://, next to the checkpoints) and then merges them under the checkpoint's
    name: there the Assert gates the merge, so the check runs beside the write and costs a
    save no time (the check only starts once every tensor is read, so that the write is not
    queued behind it). The parts of a refused save are left for ``remove_refused_save``. A
    plain Saver writes under the final name at once: there the Assert must run before the
    write.

    Call it before the graph is finalized. Returns the names it guards (also those an earlier
    call guarded, on a finalized graph); the others (not saved under their own name, as the
    parts of a partitioned variable, or a finalized graph without a guard) need a check
    before the save. The Saver is changed for every user of it: its saves of a model that is
    not finite fail.
    """
    wanted = set(names)
    covered = set()
    save_tensor_op = graph.get_tensor_by_name(saver.saver_def.save_tensor_name).op
    merges = _ops_before(save_tensor_op, "MergeV2Checkpoints")
    for op in _ops_before(save_tensor_op, "SaveV2"):
        keys = tf.get_static_value(op.inputs[1])  # prefix, keys, slices, tensors...
        slices = tf.get_static_value(op.inputs[2])
        if keys is None or slices is None:
            continue
        chosen = {}
        for key, piece, tensor in zip(keys, slices, op.inputs[3:]):
            key = key.decode() if isinstance(key, bytes) else str(key)
            if key in wanted and not piece and tensor.dtype.base_dtype.name in FLOAT_TYPES:
                chosen[key] = tensor
        if not chosen:
            continue
        gated = merges if merges else [op]
        scope = f"{_GUARD}/{op.name}/"  # this SaveV2's own guard (not SaveV2_1's)
        if any(c.name.startswith(scope) for gate in gated for c in gate.control_inputs):
            covered.update(chosen)  # guarded by an earlier call
            continue
        if graph.finalized:
            continue
        tensors = list(chosen.values())
        with graph.as_default(), graph.name_scope(None), \
                graph.name_scope(f"{_GUARD}/{op.name}"), \
                tf.device(op.device) if op.device else contextlib.nullcontext():
            if merges:
                # Beside the write: from when the write can start (every tensor read), gently.
                with tf.control_dependencies([tf.group(*tensors)]):
                    guard = _one_by_one(tensors, list(chosen), name="check")
            else:  # before the write: as fast as can be
                guard = tf.debugging.Assert(tf.reduce_all(finite_flags(tensors)),
                                            [GUARD_TEXT], name="check")
        if hasattr(guard, "mark_used"):
            guard.mark_used()  # used, as a control input (tf_should_use cannot see that)
        for gate in gated:
            compat.add_control_input(gate, guard)
        covered.update(chosen)
    return covered


def sharded_where_plain_writes(variables) -> bool:
    """True when a sharded Saver of ``variables`` writes where a plain one does: none is
    placed on a task of a cluster (there each task would write its own part, on its own
    machine). Then a Supervisor's Saver is sharded, so that ``guard_saver`` can check beside
    the write."""
    return all("/job:" not in (getattr(v, "device", "") or "") for v in variables)


def _ops_before(op, op_type: str) -> list:
    """The ops of type ``op_type`` that ``op`` (a Saver's save tensor's op) depends on."""
    found, seen, todo = [], set(), [op]
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type == op_type:
            found.append(op)
            if op_type == "SaveV2":
                continue
        todo.extend(t.op for t in op.inputs)
        todo.extend(op.control_inputs)
    return found
