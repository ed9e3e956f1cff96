"""Sends what a run's threads print or display to the run, never to the cell that executes.

A kernel sends each output with the *current* parent message: from a thread that set none, that
is whichever cell executes at that moment (or the last one that did). A training thread runs for
hours while the user runs other cells, so its output is claimed here, for the thread that
enters ``routed_to(sink)`` and every thread started from it (a data loader, a logging thread, a
thread pool's workers), however deep:

- the route is a context variable, and a thread started from a routed thread runs in a copy of
  its starter's context (what Python 3.14 does with ``sys.flags.thread_inherit_context``;
  ``threading.Thread.start`` does it here while a route is live); ipykernel 7 keeps its
  per-thread parent header in context variables too, so the run's threads also send what may
  still reach the frontend under the parent of the request that started the run;
- writes to ``sys.stdout`` / ``sys.stderr`` (``print``, ``!cmd``, a plain tqdm bar) go to
  ``sink.write(name, text)``: a thin proxy in front of each stream looks the route up and
  otherwise delegates every call to the stream it wraps, so every other thread writes exactly
  as before;
- ``display()``, ``IPython.display`` objects, the inline backend's ``plt.show()``, a widget's
  view (``tqdm.auto``) and ``clear_output`` reach the kernel's display publisher as messages:
  a hook of ipykernel's own (``ZMQDisplayPublisher.register_hook``, per thread) hands them to
  ``sink.publish(msg_type, content)`` instead of sending them; a shell without one (terminal
  IPython) prints their text form, which the stream proxy routes;
- help (``obj?``, ``%magic``) that IPython pages goes to the run as a display (an IPython
  ``show_in_pager`` hook) instead of the executing cell's pager;
- a pyplot figure that a routed thread creates is the run's (matplotlib's ``figure.hooks``):
  the inline backend's flush after each cell (``flush_figures``, which shows and closes every
  open figure) leaves it alone, and it is shown in the run and closed when the run's thread
  leaves the block, as a cell's figures are when the cell ends.

``threads_routed_to(owns, sink)`` routes a family of threads that were started elsewhere (a
Supervisor's services) by a predicate. Logging handlers that hold the original stream object
(TensorFlow's logger, in a notebook, writes to the ``sys.stdout`` it found at import) are
pointed at the proxy too. TensorFlow's own INFO lines from a routed thread ("Running
local_init_op.", when TF1 code turns its INFO logging on; not ours, such as what a waiting
worker waits for) go to the package logger instead: the run's output area is for what the body
prints, and the panel already shows what those lines tell.

What a process writes to its file descriptors directly (a C library's printf, a subprocess that
inherits them) is not a Python thread's: the kernel shows it where it executes.
"""
import contextlib
import contextvars
import logging
import os
import sys
import threading
import weakref
from typing import Callable, List, Optional, Tuple

from .. import compat

_STREAMS = ("stdout", "stderr")
_DISPLAY_MESSAGES = frozenset(("display_data", "update_display_data", "clear_output"))

# The sink of the calling context's run: an object with write(name, text) and
# publish(msg_type, content) (view.output_area.OutputLog).
_route: contextvars.ContextVar = contextvars.ContextVar("jupyter_supervisor_route",
                                                        default=None)
_lock = threading.Lock()
# Sinks for whole families of threads, each with the predicate that tells its threads (e.g.
# "started by this run's Supervisor"): asked only for threads without a route. Replaced, never
# mutated, so the write path reads it without a lock.
_families: Tuple[Tuple[Callable[[threading.Thread], bool], object], ...] = ()
# Logging handlers re-pointed at a proxy, with the stream they had (guarded by _lock).
_repointed: List[Tuple[logging.StreamHandler, object]] = []
# threading.Thread.start as it was before install() (guarded by _lock).
_thread_start: Optional[Callable] = None
# pyplot figures created by a routed thread -> its sink.
_run_figures: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_FIGURE_HOOK = f"{__name__}:_adopt_figure"

_logger = logging.getLogger("jupyter_supervisor")
# This package's directory: our own lines through TensorFlow's logger stay in the run's output.
_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


def _sink():
    """The calling thread's sink, or None."""
    sink = _route.get()
    if sink is None and _families:
        thread = threading.current_thread()
        for owns, family_sink in _families:
            if owns(thread):
                return family_sink
    return sink


class _TensorFlowInfoFilter(logging.Filter):
    """On TensorFlow's logger: its records below WARNING from a routed thread go to the
    package logger (at DEBUG), not to the run's output."""

    def filter(self, record):
        if record.levelno >= logging.WARNING or record.pathname.startswith(_PACKAGE_DIR) or \
                _sink() is None:
            return True  # a warning, one of our own lines (what a waiting worker waits for)
        _logger.debug("TensorFlow: %s", record.getMessage())
        return False


_TF_FILTER = _TensorFlowInfoFilter()


class RoutedStream:
    """A file-like proxy: writes of routed threads go to their sink, the rest to ``wrapped``."""

    def __init__(self, wrapped, name: str):
        self.wrapped = wrapped
        self._name = name

    def write(self, text):
        sink = _sink()
        if sink is None:
            return self.wrapped.write(text)
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        sink.write(self._name, text)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if _sink() is None:
            self.wrapped.flush()

    def __getattr__(self, name):
        return getattr(self.wrapped, name)


def _start_in_context(thread: threading.Thread) -> None:
    """``threading.Thread.start`` while routes are possible: a thread started from a routed
    context runs in a copy of it (and with the run's display hook)."""
    if _route.get() is not None:
        context = contextvars.copy_context()
        run = thread.run
        thread.run = lambda: context.run(_run_routed, run)
    _thread_start(thread)


def _run_routed(run: Callable[[], None]) -> None:
    with _display_routed():
        run()


def _shell():
    ipython = sys.modules.get("IPython")
    return None if ipython is None else ipython.get_ipython()


@contextlib.contextmanager
def _display_routed():
    """Within the block, the calling thread's display messages go to its sink (ipykernel's
    per-thread hook on the display publisher; nothing to do where the shell has none)."""
    publisher = compat.kernel_display_publisher(_shell())
    if publisher is None:
        yield
        return
    sink = _route.get()

    def hook(message):
        if message["msg_type"] not in _DISPLAY_MESSAGES:
            return message
        sink.publish(message["msg_type"], message["content"])
        return None  # taken: not sent to the frontend

    publisher.register_hook(hook)
    try:
        yield
    finally:
        publisher.unregister_hook(hook)


def _page(_shell_self, data, start=0, screen_lines=0):  # pylint: disable=unused-argument
    """IPython's ``show_in_pager`` hook: help asked for in a routed thread goes to its run."""
    from IPython.core.error import TryNext  # pylint: disable=import-outside-toplevel
    sink = _sink()
    if sink is None:
        raise TryNext()  # the next hook: the kernel's pager
    bundle = data if isinstance(data, dict) else {"text/plain": str(data)}
    sink.publish("display_data", {"data": bundle, "metadata": {}})


def _adopt_figure(figure) -> None:
    """matplotlib's ``figure.hooks``: a figure pyplot makes for a routed thread is its run's."""
    sink = _route.get()
    if sink is not None:
        _run_figures[figure] = sink
        # The inline backend is imported with pyplot's first figure, and its flush registered
        # then: perhaps just now, by this thread.
        _guard_inline_flush()


def _before_cell() -> None:
    """Before each cell: the proxies back in front of the streams (a cell that swapped them,
    %%capture, restores what it found) and the inline flush guarded (a cell may register it
    again)."""
    install()
    _guard_inline_flush()


def _guard_inline_flush() -> None:
    """Puts ``_cells_flush`` around matplotlib-inline's post-execute flush, if registered."""
    callbacks = compat.post_execute_callbacks(_shell())
    for index, callback in enumerate(callbacks):
        if compat.is_inline_flush(callback):
            callbacks[index] = _cells_flush(callback)


def _cells_flush(flush: Callable[[], None]) -> Callable[[], None]:
    def flush_figures():
        """matplotlib-inline's flush of the cell's figures, without the runs' figures."""
        figs = compat.pyplot_figure_managers()
        hidden = {number: manager for number, manager in list(figs.items())
                  if manager.canvas.figure in _run_figures}
        for number in hidden:
            figs.pop(number, None)
        try:
            return flush()
        finally:
            figs.update(hidden)
    flush_figures.__wrapped__ = flush
    flush_figures.__module__ = __name__
    return flush_figures


def _show_figures_of(sink) -> None:
    """Shows the pyplot figures of ``sink``'s run that are still open in the run, and closes
    them (the calling thread is routed to it)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    mine = [figure for figure, owner in list(_run_figures.items()) if owner is sink]
    if pyplot is None or not mine:
        return
    from IPython.display import display  # pylint: disable=import-outside-toplevel
    open_figures = [manager.canvas.figure
                    for manager in compat.pyplot_figure_managers().values()]
    for figure in mine:
        if any(figure is other for other in open_figures):
            display(figure)
            pyplot.close(figure)


def install() -> None:
    """Puts the stream proxies, the thread-start inheritance, the pager hook, the guard of
    the inline backend's flush and the figure hook in place (idempotent)."""
    global _thread_start  # pylint: disable=global-statement
    with _lock:
        proxies = {}
        for name in _STREAMS:
            current = getattr(sys, name)
            if current is not None and not isinstance(current, RoutedStream):
                proxy = RoutedStream(current, name)
                setattr(sys, name, proxy)
                proxies[id(current)] = proxy
        logging.getLogger("tensorflow").addFilter(_TF_FILTER)  # once: addFilter skips a known one
        if proxies:
            for handler in _stream_handlers():
                proxy = proxies.get(id(handler.stream))
                if proxy is not None:
                    _repointed.append((handler, handler.stream))
                    handler.setStream(proxy)
        if _thread_start is None:
            _thread_start = threading.Thread.start
            threading.Thread.start = _start_in_context
        shell = _shell()
        if shell is not None and not _page_hooked(shell):
            shell.set_hook("show_in_pager", _page, priority=10)  # before the kernel's (99)
        if shell is not None and _before_cell not in shell.events.callbacks.get(
                "pre_execute", []):
            shell.events.register("pre_execute", _before_cell)
            _guard_inline_flush()
        try:
            import matplotlib  # pylint: disable=import-outside-toplevel
        except ImportError:
            return
        if _FIGURE_HOOK not in matplotlib.rcParams["figure.hooks"]:
            matplotlib.rcParams["figure.hooks"] = [*matplotlib.rcParams["figure.hooks"],
                                                   _FIGURE_HOOK]


def _page_hooked(shell) -> bool:
    chain = getattr(getattr(shell.hooks, "show_in_pager", None), "chain", [])
    return any(getattr(hook, "__func__", None) is _page for _, hook in chain)


def uninstall() -> None:
    """Removes what ``install`` put in place; routed threads then print normally."""
    global _thread_start  # pylint: disable=global-statement
    with _lock:
        for name in _STREAMS:
            current = getattr(sys, name)
            if isinstance(current, RoutedStream):
                setattr(sys, name, current.wrapped)
        for handler, stream in _repointed:
            if isinstance(handler.stream, RoutedStream):
                handler.setStream(stream)
        _repointed.clear()
        logging.getLogger("tensorflow").removeFilter(_TF_FILTER)
        if _thread_start is not None:
            threading.Thread.start = _thread_start
            _thread_start = None
        shell = _shell()
        pager = getattr(getattr(shell, "hooks", None), "show_in_pager", None)
        if pager is not None:
            pager.chain = [(priority, hook) for priority, hook in pager.chain
                           if getattr(hook, "__func__", None) is not _page]
        if shell is not None:
            if _before_cell in shell.events.callbacks.get("pre_execute", []):
                shell.events.unregister("pre_execute", _before_cell)
            post = shell.events.callbacks.get("post_execute", [])
            post[:] = [getattr(callback, "__wrapped__", callback)
                       if getattr(callback, "__module__", "") == __name__ else callback
                       for callback in post]
        matplotlib = sys.modules.get("matplotlib")
        if matplotlib is not None and _FIGURE_HOOK in matplotlib.rcParams["figure.hooks"]:
            matplotlib.rcParams["figure.hooks"] = [
                hook for hook in matplotlib.rcParams["figure.hooks"] if hook != _FIGURE_HOOK]


def _stream_handlers() -> List[logging.StreamHandler]:
    loggers = [logging.getLogger()] + [
        logger for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)]
    return [handler for logger in loggers for handler in logger.handlers
            if isinstance(handler, logging.StreamHandler)
            and not isinstance(handler, logging.FileHandler)]


def current_parent() -> Optional[dict]:
    """The request the calling thread executes for (a cell, a button's comm message), as
    ipykernel knows it; None outside a kernel."""
    get_parent = getattr(_shell(), "get_parent", None)
    return get_parent() if get_parent is not None else None


@contextlib.contextmanager
def threads_routed_to(owns: Callable[[threading.Thread], bool], sink):
    """Within the block, what any thread for which ``owns(thread)`` is true prints goes to
    ``sink`` (the threads a run's Supervisor starts: services, ``sv.loop`` targets)."""
    global _families  # pylint: disable=global-statement
    install()
    entry = (owns, sink)
    with _lock:
        _families = _families + (entry,)
    try:
        yield
    finally:
        with _lock:
            _families = tuple(f for f in _families if f is not entry)


@contextlib.contextmanager
def routed_to(sink, parent: Optional[dict] = None):
    """Within the block, what the calling thread and the threads it starts print or display
    goes to ``sink``; with ``parent`` (a request, see ``current_parent``), what they send to
    the frontend all the same is sent as that request's output."""
    install()
    if _route.get() is not None:
        raise RuntimeError("This thread's output is already routed.")
    token = _route.set(sink)
    shell = _shell()
    parents = None
    if parent and hasattr(shell, "set_thread_parent"):
        parents = shell.set_thread_parent(parent)
    try:
        with _display_routed():
            try:
                yield
            finally:
                try:
                    _show_figures_of(sink)   # as a cell's, when it ends
                except Exception as error:  # pylint: disable=broad-except
                    sink.write("stderr", f"The run's open figures could not be shown: "
                                         f"{type(error).__name__}: {error}\n")
    finally:
        if parents is not None:
            shell.reset_thread_parent(parents)
        _route.reset(token)
