"""jupyter_supervisor: a maintained TensorFlow training Supervisor for notebooks.

``Supervisor`` is a drop-in replacement for ``tf.compat.v1.train.Supervisor``.
TensorFlow is imported on first use of a name that needs it, so that the notebook-side modules
(panel, plots, history) can be imported without it.
"""
__version__ = "0.1.0"

_LAZY = {
    "Supervisor": ("supervisor", "Supervisor"),
    "CheckpointMismatchError": ("supervisor", "CheckpointMismatchError"),
    "LogdirLockedError": ("lockfile", "LogdirLockedError"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib  # pylint: disable=import-outside-toplevel
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
