"""Every use of another library's private API, in one place.

TensorFlow, Keras and ipykernel offer no public way to do these things; each is a small
function here, saying what it reaches into, why, and the versions it was checked against, so
that an upgrade means reading this file (and ``tests/test_compat.py``, which has a test per
entry that fails loudly, naming the entry, when what it reaches into is gone).

Checked against: TensorFlow 2.16-2.21, Keras 3.15, ipykernel 6.29-7.4, IPython 8-9,
matplotlib 3.7-3.11 and matplotlib-inline 0.1-0.2.

The libraries are imported when an entry is used, so that this module serves the
TensorFlow-free layers (``%load_ext``, ``view/``) too.
"""
import sys
from typing import Callable, Optional


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

def redirect_checkpoint_writes(checkpoint, object_map) -> None:
    """``Checkpoint._saver._object_map``: ``checkpoint`` then saves, for each object of
    ``object_map``, its mapped copy's value under the object's name (the mechanism TensorFlow's
    own async checkpointing uses for its host copies)."""
    saver = getattr(checkpoint, "_saver", None)
    if saver is None or not hasattr(saver, "_object_map"):
        raise _missing("tf.train.Checkpoint._saver._object_map", "TensorFlow")
    saver._object_map = object_map  # pylint: disable=protected-access


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
    frame = sys._getframe(1)  # pylint: disable=protected-access
    try:
        while frame is not None:
            code = frame.f_code
            if code.co_name == "fit" and frame.f_locals.get("self") is model and \
                    name in code.co_varnames[:code.co_argcount]:
                return frame.f_locals.get(name)
            frame = frame.f_back
    finally:
        del frame
    return None


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
