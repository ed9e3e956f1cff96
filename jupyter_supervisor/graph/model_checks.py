"""The checks of a graph against its model: which tensor is its global step, whether it can
count steps, and whether a checkpoint fits its variables (and what to say when it does not).

Both the Supervisor (before it restores a checkpoint) and the graph backend (before a run
starts, in the kernel's main thread) ask them.
"""
from typing import Optional

import tensorflow as tf

from .. import compat

_v1 = tf.compat.v1
_GraphKeys = _v1.GraphKeys


def mismatch_message(what: str, path: str, problem: str, logdir: str, warm_start: str) -> str:
    """Why the checkpoint ``path`` (``what``: how the message names it) cannot be restored into
    the graph (``problem``, from ``checkpoint_misfit``), and what to do: a new ``logdir`` (how
    the caller names that option), or ``warm_start`` (how the caller passes an init_fn)."""
    return (f"{what} does not fit the graph: {problem}. The model changed since it was saved. "
            f"Train it in a new {logdir}; to warm-start from this checkpoint, {warm_start}, "
            "e.g. `def warm(sess): tf.compat.v1.train.Saver(old_vars).restore(sess, "
            f"{path!r})`.")


def global_step_by_name(graph):
    """The variable or tensor named 'global_step' of ``graph``, or None (how TensorFlow's
    Supervisor finds a global step outside the GLOBAL_STEP collection)."""
    for var in graph.get_collection(_GraphKeys.GLOBAL_VARIABLES):
        # A TF2 resource variable's "global_step:0" is its handle (dtype resource): use the
        # variable itself, whose dtype is the value's.
        if var.op.name == "global_step":
            return var
    try:
        return graph.get_tensor_by_name("global_step:0")
    except KeyError:
        return None


def counts_steps(step, shape: bool = False) -> bool:
    """True when ``step`` can count steps: an int32 or int64 (and, with ``shape``, a scalar or
    a one-element vector)."""
    dtype = getattr(step, "dtype", None)
    if dtype is None or dtype.base_dtype not in (tf.int32, tf.int64):
        return False
    if not shape:
        return True
    step_shape = getattr(step, "shape", None)
    return step_shape is not None and (step_shape.rank is None
                                       or step_shape.as_list() in ([], [1]))


def checkpoint_misfit(path: str, graph, saver=None) -> Optional[str]:
    """Why the checkpoint at ``path`` cannot restore the variables of ``graph`` that ``saver``
    restores (default: every global variable and saveable object): the variables it has no
    value for, and those whose shape changed. None when it fits, or when it cannot be read (its
    restore then fails and falls back to an older checkpoint)."""
    try:
        stored = tf.train.load_checkpoint(path).get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError):
        return None
    expected = {name: _variable_shape(var)
                for name, var in _saver_variables(saver, graph).items()}
    expected = {name: shape for name, shape in expected.items() if shape is not False}
    missing = sorted(set(expected) - set(stored))
    reshaped = sorted(
        f"{name!r} (saved {stored[name]}, graph {shape})"
        for name, shape in expected.items()
        if name in stored and shape is not None and shape != stored[name])
    problems = []
    if missing:
        problems.append(f"it has no value for {len(missing)} variable(s) of the graph: "
                        + ", ".join(repr(m) for m in missing[:5])
                        + (" ..." if len(missing) > 5 else ""))
    if reshaped:
        problems.append("variables changed shape: " + ", ".join(reshaped[:5]))
    return "; ".join(problems) or None


def _saver_variables(saver, graph) -> dict:
    """{checkpoint key: variable, variable handle or saveable} of what ``saver`` (default: a
    Saver of every global variable and saveable object) restores."""
    var_list = compat.saver_var_list(saver)
    with graph.as_default():
        if var_list is None:
            var_list = _v1.global_variables() + graph.get_collection(_GraphKeys.SAVEABLE_OBJECTS)
        return compat.saveables_by_key(var_list)


def _variable_shape(item):
    """The static shape (a list) of a variable the Saver restores; None if not fully known;
    False when ``item`` is not a plain variable (tables and other saveables are not checked)."""
    op = getattr(item, "op", None)
    if isinstance(item, tf.Variable):
        shape = item.shape
    elif op is not None and op.type == "VarHandleOp":  # a resource variable's handle
        shape = tf.TensorShape(op.get_attr("shape"))
    elif op is not None and op.type in ("ReadVariableOp", "Variable", "VariableV2"):
        shape = item.shape
    else:
        return False
    return shape.as_list() if shape.is_fully_defined() else None
