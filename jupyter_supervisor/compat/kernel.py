"""ipykernel's, IPython's, ipywidgets' and matplotlib's private API: the kernel's hooks and
displays.

See ``compat/__init__.py`` for what this package is.
"""
import sys
from typing import Callable, List, Optional, Tuple

from .registry import Probe, missing as _missing, names_used


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



def shutdown_request_tables(kernel) -> dict:
    """{"shell_handlers" / "control_handlers": the dict} of the kernel's message-handler tables
    that hold a ``shutdown_request`` handler (ipykernel's ``Kernel``), which a run wraps to stop
    first: ipykernel has no hook for a shutdown request. {} when none has one."""
    found = {}
    for name in ("shell_handlers", "control_handlers"):
        handlers = getattr(kernel, name, None)
        if isinstance(handlers, dict) and "shutdown_request" in handlers:
            found[name] = handlers
    return found

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


# ---------------------------------------------------------------------------- ipywidgets

def widget_display_data(widget) -> dict:
    """The display data of an ipywidgets or anywidget ``widget`` ({mime type: data}, a copy to
    change): what ``display(widget)`` sends, for a caller that sends it with a text form of its
    own (``display(data, raw=True)``). It comes from the widget's ``_repr_mimebundle_()``, the
    hook of IPython's display protocol, which ipywidgets implements returning the data and
    anywidget a (data, metadata) pair; IPython's public way to it, its display formatter, needs
    a shell. Checked on ipywidgets 8.1 and anywidget 0.11."""
    method = getattr(widget, "_repr_mimebundle_", None)
    if method is None:
        raise _missing(f"{type(widget).__qualname__}._repr_mimebundle_", "ipywidgets")
    bundle = method()
    return dict(bundle[0] if isinstance(bundle, tuple) else bundle)


# ---------------------------------------------------------------------------- probes

def _module(name: str):
    import importlib  # pylint: disable=import-outside-toplevel
    return importlib.import_module(name)


PROBES = (
    Probe("save when the server dies", "ipykernel", "ipykernel.parentpoller's os._exit",
          "6.29-7.4",
          lambda: hasattr(_module("ipykernel.parentpoller"), "os")
          and hasattr(_module("ipykernel.parentpoller"), "ParentPollerUnix")),
    Probe("save on restart", "ipykernel", "Kernel.shell_handlers and control_handlers",
          "6.29-7.4",
          lambda: names_used(_module("ipykernel.kernelbase").Kernel, "shell_handlers",
                             "control_handlers")),
    Probe("output routing", "ipykernel", "ZMQDisplayPublisher.register_hook", "6.29-7.4",
          lambda: callable(_module("ipykernel.zmqshell").ZMQDisplayPublisher.register_hook)),
    Probe("figures in the run's output", "matplotlib", "matplotlib._pylab_helpers.Gcf.figs",
          "3.7-3.11",
          lambda: isinstance(_module("matplotlib._pylab_helpers").Gcf.figs, dict)),
)
