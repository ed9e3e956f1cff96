"""Restoring an eager run's checkpoint: the newest readable one (``checkpoints`` falls back past
a damaged one), and, for one that does not fit what the body tracks, why (a changed model,
another optimizer, renamed ``sv.track`` keys, a precision-policy change).
"""
import itertools
import logging
from typing import List, Optional, Tuple

import tensorflow as tf
from google.protobuf import message

from .. import checkpoints, compat
from ..checkpoints import CheckpointMismatchError
from .variables import (RANDOM_STATE, STATE_NAME, IdentityMap, base_variable, is_variable,
                        live_variables, variable_name)

logger = logging.getLogger("jupyter_supervisor")

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_STATE_PREFIX = f"{STATE_NAME}/"
_RANDOM_PREFIX = f"{_STATE_PREFIX}{RANDOM_STATE}/"

# What reading a damaged checkpoint raises (truncated or overwritten files): it falls back.
UNREADABLE = (tf.errors.OpError, IndexError, message.DecodeError)


def object_graph(reader):
    """The object graph a TF2 checkpoint stores (raises when it cannot be read)."""
    return compat.checkpoint_object_graph(reader.get_tensor(OBJECT_GRAPH_KEY))


def misfit(reader, root, graph=None, unseeded: Optional[list] = None,
           dropped: Optional[list] = None, rate_changed: Optional[list] = None) -> Optional[str]:
    """Why the checkpoint of ``reader`` cannot restore the variables of ``root`` (the objects it
    has no value for, those whose shape changed), or None when it fits. The model's own
    (trainable) variables are named first, then the optimizer's. The run's random-layer states
    that it lacks are appended to ``unseeded`` instead; the values it holds under a tracked
    optimizer that no variable of it takes (another optimizer's slots), to ``dropped``; the
    tracked optimizers whose learning rate is a number where the checkpoint's was a schedule,
    or the reverse, to ``rate_changed`` (as (name, True when the tracked one's is a number)).
    Not a misfit: a variable of the run's own state that it lacks (added to the state since
    that checkpoint was written: it keeps its initial value)."""
    graph = graph if graph is not None else object_graph(reader)
    shapes = reader.get_variable_to_shape_map()
    view = tf.train.TrackableView(root)
    matched = IdentityMap()  # variable -> checkpoint key
    seen = IdentityMap()
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
            rate = compat.learning_rate_name()
            saved_rate = any(c.local_name == rate for c in node.children)
            number = is_variable(view.children(obj).get(rate))
            if rate_changed is not None and saved_rate != number:
                rate_changed.append((getattr(obj, "name", None) or type(obj).__name__, number))
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
        if key is None and path.startswith(_STATE_PREFIX):
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
    rate_changed: list = []
    problem = misfit(reader, root, graph, unseeded, dropped, rate_changed)
    if rate_changed:
        name, number = rate_changed[0]
        kinds = ("a schedule", "a number") if number else ("a number", "a schedule")
        raise CheckpointMismatchError(
            f"The checkpoint {path} was written by an optimizer whose learning rate was "
            f"{kinds[0]}, and the tracked one ({name}) has {kinds[1]}: Keras numbers an "
            "optimizer's variables after its learning rate, so the saved moment estimates "
            "cannot be restored into it. Give the optimizer the kind of learning rate it was "
            f"saved with ({kinds[0]}), or train in a new logdir and warm-start the model in an "
            f"init_fn: tf.train.Checkpoint(model=model).read({path!r}).expect_partial().")
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


def restore_newest(root, logdir: str, paths: List[str], **start) -> Optional[str]:
    """Restores ``root`` from the newest readable checkpoint of ``paths``
    (``checkpoints.restore_newest``, given ``start``: a run start's ``basename`` and
    ``sweep_unlisted``); returns its path, or None without paths."""
    restored = checkpoints.restore_newest(paths, lambda path: restore(root, path), UNREADABLE,
                                          logdir, **start)
    return restored[0] if restored is not None else None
