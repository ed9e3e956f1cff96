"""jupyter_supervisor: a maintained TensorFlow training Supervisor for notebooks.

``Supervisor`` is a drop-in replacement for ``tf.compat.v1.train.Supervisor``. In IPython,
``%load_ext jupyter_supervisor`` adds ``%%supervise`` (train a cell in the background) and
``%supervise`` (list, stop, resume, save, wait, show); ``get_run(name)`` and ``runs()`` give the
runs to Python code.

TensorFlow is imported on first use of a name that needs it, so that the notebook-side modules
(panel, plots, history) and ``%load_ext`` do not import it.
"""
import sys

__version__ = "0.1.0"

_LAZY = {
    "Supervisor": ("graph.supervisor", "Supervisor"),
    "EagerSupervisor": ("eager.eager_supervisor", "EagerSupervisor"),
    "CheckpointMismatchError": ("checkpoints", "CheckpointMismatchError"),
    "CheckpointWriteError": ("checkpoints", "CheckpointWriteError"),
    "LogdirLockedError": ("lockfile", "LogdirLockedError"),
    "TrainingRun": ("notebook.run", "TrainingRun"),
    "RunConfig": ("config", "RunConfig"),
    "NonFiniteError": ("finite", "NonFiniteError"),
    "events": ("events", None),
    "cluster": ("graph.cluster", None),
    "preemption": ("preemption", None),  # termination_watcher() for TensorFlow's handler
    "versions": ("capabilities", "versions"),  # what holds on the installed TensorFlow and Keras  # jupyter_supervisor.cluster.start_server(...) etc.
}

__all__ = ["Supervisor", "EagerSupervisor", "get_run", "runs", "LogdirLockedError",
           "CheckpointMismatchError", "CheckpointWriteError", "NonFiniteError",
           "TrainingRun", "cluster", "preemption", "RunConfig", "events", "versions",
           "load_ipython_extension", "unload_ipython_extension"]


def __getattr__(name):
    if name in _LAZY:
        import importlib  # pylint: disable=import-outside-toplevel
        module, attr = _LAZY[name]
        value = importlib.import_module(f".{module}", __name__)
        if attr is not None:
            value = getattr(value, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_run(name=None):
    """The run that ``%%supervise`` started under ``name`` in this kernel.

    The first call imports TensorFlow (the runs' module does).

    Args:
        name: the run's name (``--name``, by default the logdir's last component). None: the
            only run of the kernel, or else the only live one.

    Returns:
        The ``TrainingRun``: its ``status``, ``global_step``, ``history``, and ``stop``,
        ``resume``, ``save_now``, ``wait``.

    Raises:
        KeyError: no run has that name; without a name, there is no run yet, or there are
            several and not exactly one is live.

    Example::

        run = jupyter_supervisor.get_run("fit")
        run.wait()
        print(run.status, run.global_step)   # finished 500
    """
    from .notebook.run import get_run as _get_run  # pylint: disable=import-outside-toplevel
    return _get_run(name)


def runs():
    """Every run of this kernel, live or ended, one per name.

    Imports nothing (no TensorFlow) while no run was ever started.

    Returns:
        A new list of the ``TrainingRun``s, in the order they were last started (a resume, or a
        new run under an ended run's name, moves that name to the end); [] before the first.

    Example::

        for run in jupyter_supervisor.runs():
            print(run.name, run.status, run.global_step)
    """
    if f"{__name__}.notebook.run" not in sys.modules:
        return []  # no run was ever started: no need to import TensorFlow
    from .notebook.run import runs as _runs  # pylint: disable=import-outside-toplevel
    return _runs()


# -- IPython connectivity ------------------------------------------------------------------

# Seconds ``%unload_ext`` waits for the live runs to write their final checkpoints.
UNLOAD_TIMEOUT_SECS = 120


def load_ipython_extension(ipython):
    """``%load_ext jupyter_supervisor``: registers ``%%supervise`` and ``%supervise``."""
    import atexit  # pylint: disable=import-outside-toplevel
    from .notebook.magics import SuperviseMagics  # pylint: disable=import-outside-toplevel
    from .view import panel  # pylint: disable=import-outside-toplevel
    ipython.register_magics(SuperviseMagics)
    # A kernel's shutdown closes the panels (their refreshers end) after the runs stopped:
    # atexit calls in reverse order, and the runs register their stop later, with the first.
    atexit.unregister(panel.close_all)
    atexit.register(panel.close_all)


def unload_ipython_extension(ipython):
    """``%unload_ext jupyter_supervisor``: stops every live run (each writes a final
    checkpoint), joins their threads and removes the magics."""
    run = sys.modules.get(f"{__name__}.notebook.run")
    if run is not None:
        late = run.stop_all(timeout=UNLOAD_TIMEOUT_SECS, why="the extension was unloaded")
        for training in late:
            print(f"Run {training.name!r} did not stop within {UNLOAD_TIMEOUT_SECS} s: its "
                  "cell body must return once sv.should_stop() is True.", file=sys.stderr)
        if late:
            return  # leave the magics and the output routing to the runs still stopping
    from .notebook import routing  # pylint: disable=import-outside-toplevel
    from .view import panel  # pylint: disable=import-outside-toplevel
    panel.close_all()
    routing.uninstall()
    magics = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        magics[kind].pop("supervise", None)
