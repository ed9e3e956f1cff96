"""The variables an eager run saves: what counts as one (a tf.Variable or a Keras 3 variable),
what holds state, how users name them, and the names of the run's own entries in a checkpoint.
"""
from typing import List

import tensorflow as tf

from .. import compat

# The checkpoint name of the run's own state (global step, where fit is), beside the user's,
# and of its random-layer states in it: a checkpoint written before those were saved lacks
# them, and still restores (with a warning: that resume is not bit-exact).
STATE_NAME = "jupyter_supervisor"
RANDOM_STATE = "random_state"
# The record of fit's input in it (data_position): a checkpoint written before it restores
# without (the resume then says it may not be exact).
INPUT_STATE = "input"


class IdentityMap:
    """A mapping keyed by the objects themselves, not by their equality (a tf.Variable has no
    hash, and equal objects are not one): ``m[obj] = value``, ``m[obj]``, ``m.get(obj)``,
    ``obj in m``, ``values()``; ``add(obj)`` for its use as a set. It holds its keys, so that
    no id in it is reused while it lives."""

    __slots__ = ("_items",)

    def __init__(self, keys=()):
        self._items: dict = {}   # id(key) -> (key, value)
        for key in keys:
            self.add(key)

    def __setitem__(self, key, value) -> None:
        self._items[id(key)] = (key, value)

    def __getitem__(self, key):
        return self._items[id(key)][1]

    def __contains__(self, key) -> bool:
        return id(key) in self._items

    def get(self, key, default=None):
        """The value of ``key``, or ``default``."""
        found = self._items.get(id(key))
        return default if found is None else found[1]

    def add(self, key) -> None:
        """Adds ``key`` (with the value None)."""
        self._items[id(key)] = (key, None)

    def values(self) -> list:
        """The values, in the order their keys were first set."""
        return [value for _, value in self._items.values()]


def is_variable(obj) -> bool:
    """A tf.Variable, or a Keras 3 variable (which wraps one in ``.value``)."""
    return isinstance(obj, tf.Variable) or isinstance(getattr(obj, "value", None), tf.Variable) \
        and compat.serializes_to_tensors(obj)


def base_variable(obj) -> tf.Variable:
    """The tf.Variable of a tf.Variable or of a Keras 3 variable."""
    return obj if isinstance(obj, tf.Variable) else obj.value


def holds_state(obj) -> bool:
    """True when a checkpoint of ``obj`` would hold something: a variable, or tensors of its
    own (a dataset iterator) in it or below it. A tf.function holds neither."""
    if is_variable(obj) or compat.saves_own_tensors(obj):
        return True
    return any(is_variable(o) or compat.saves_own_tensors(o)
               for o in tf.train.TrackableView(obj).descendants())


def has_slot_variables(obj) -> bool:
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
    seen = IdentityMap([root])
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
