"""While a run is live, every way the kernel is asked to end becomes a clean stop first.

A kernel ends in more ways than a Stop click, and most of them end the process at once:

- SIGTERM (a cloud VM's preemption notice, ``docker stop``, a batch scheduler, the client's
  second step of a shutdown) and SIGHUP (the terminal closed): Python's default ends the
  process at once, without ``atexit``.
- The server dies: ipykernel's parent poller (``ParentPollerUnix``, a thread that checks every
  second whether the process's parent changed) calls ``os._exit(1)``.
- A restart or shutdown from the page: a ``shutdown_request`` on the control channel; the
  client sends SIGTERM after half its ``KernelManager.shutdown_wait_time`` (5 s by default),
  and SIGKILL after the whole of it.
- ``%unload_ext`` and the interpreter's exit (``atexit``).
- A cloud's preemption notice, before its SIGTERM: ``notices.py`` (only the runs that listen).

``guard(stop, live)`` (``run.py`` calls it when a run starts) hooks each of them so that the
live runs are asked to stop at their next step boundary and write their final checkpoint
(``stop(why, timeout)``, at most ``STOP_SECS``), then the kernel ends the way it would have:
the handler installed before ours is called (for SIGTERM and SIGHUP, Python's default ends the
process with that signal), the poller's ``os._exit``, ipykernel's own shutdown. A signal set to
be ignored (``SIG_IGN``: a kernel started under ``nohup``) is left so: it neither stops a run
nor ends the kernel. ``release()`` puts every hook back once no run is live (``live()`` is
False). Nothing is installed in a kernel that never started a run. SIGINT is not touched: it
interrupts the cell that executes, never a background run.

A stop that does not end within its time is cut when the process ends: the checkpoint being
written then is never the newest (both backends name a checkpoint in the state file only once
its files are complete), and the logdir's lock file keeps a note of the stop, which the next
run on that logdir reports (``lockfile``).
"""
import asyncio
import atexit
import inspect
import logging
import os
import signal
import sys
import threading
from typing import Callable, Dict, List, Optional

from .. import compat, preemption
from .notices import NoticeHook

logger = logging.getLogger("jupyter_supervisor")

# Seconds the live runs get to write their final checkpoints when the kernel is asked to end:
# within the 30 s a cloud preemption (GCE, Kubernetes' default grace period) leaves before its
# SIGKILL. A kernel restart from the page is cut sooner, by the client's SIGKILL at
# KernelManager.shutdown_wait_time (5 s by default). Read at each stop: a notebook may set it.
STOP_SECS = 25.0

# Why a run stopped, as the kernel's end says it (the run's stop_reason).
RESTARTED, SHUT_DOWN = "the kernel was restarted", "the kernel was shut down"
SIGNALLED = "the kernel received "   # + the signal's name
SERVER_DIED, EXITED = "the server died", "the Python process exited"

# The signals that end a kernel from outside; SIGINT keeps its meaning (interrupt the cell).
SIGNALS = ("SIGTERM", "SIGHUP")


class _SignalHook:
    """SIGTERM and SIGHUP: a clean stop first, then what the handler before ours does (Python's
    default ends the process with the signal). A signal ignored on purpose stays ignored.
    Installed and uninstalled in the main thread only (where Python sets handlers)."""

    def __init__(self, stop_runs: Callable[[str], None]):
        self._stop_runs = stop_runs
        self._lock = threading.Lock()
        self._previous: Dict[int, object] = {}   # signal number -> the handler before ours

    def install(self) -> None:
        for name in SIGNALS:
            number = getattr(signal, name, None)
            if number is None or number in self._previous:
                continue
            previous = signal.getsignal(number)
            if previous == signal.SIG_IGN:
                # Ignored on purpose (a kernel started under `nohup`, a scheduler that
                # forwards SIGTERM only to its job): it stays ignored while runs live.
                continue
            signal.signal(number, self._on_signal)
            with self._lock:
                self._previous[number] = previous

    def uninstall(self) -> None:
        with self._lock:
            previous_handlers, self._previous = self._previous, {}
        for number, previous in previous_handlers.items():
            if signal.getsignal(number) == self._on_signal:  # pylint: disable=comparison-with-callable
                signal.signal(number, previous if previous is not None else signal.SIG_DFL)

    def _on_signal(self, number, frame) -> None:
        self._stop_runs(SIGNALLED + signal.Signals(number).name)
        with self._lock:
            previous = self._previous.get(number, signal.SIG_DFL)
        if callable(previous):
            previous(number, frame)
        else:
            # Python's default for this signal (or a handler set outside Python): end the
            # process as it would have, with the signal itself.
            signal.signal(number, signal.SIG_DFL if previous is None else previous)
            os.kill(os.getpid(), number)


class _PollerHook:
    """The server's death: ipykernel's parent poller calls ``os._exit(1)``; its module's ``os``
    is replaced by one whose ``_exit`` stops the runs first (``compat.PollerOs``)."""

    def __init__(self, stop_runs: Callable[[str], None]):
        self._stop_runs = stop_runs
        self._module = None   # ipykernel.parentpoller, while hooked

    def install(self) -> None:
        app = _kernel_app()
        if self._module is not None or app is None:
            return  # hooked already, or not a kernel: no server to outlive
        try:
            module = compat.parent_poller_module(app)
        except compat.CompatError as e:
            logger.warning("A run cannot save when the Jupyter server dies in this kernel: %s",
                           e)
            return
        if module is None:
            logger.debug("This kernel has no parent poller: nothing ends it when the server "
                         "dies.")
            return
        if isinstance(module.os, compat.PollerOs):
            return  # hooked by another owner: theirs to put back
        module.os = compat.PollerOs(module.os, lambda: self._stop_runs(SERVER_DIED))
        self._module = module

    def uninstall(self) -> None:
        module, self._module = self._module, None
        if module is not None and isinstance(module.os, compat.PollerOs):
            module.os = module.os.real


class _ShutdownRequestHook:
    """A restart or shutdown from the page: the kernel's ``shutdown_request`` handlers (shell
    and control) stop the runs first, then do what they did."""

    def __init__(self, stop_runs: Callable[[str], None]):
        self._stop_runs = stop_runs
        self._kernel = None
        self._originals: Dict[str, object] = {}   # handler table -> the original handler

    def install(self) -> None:
        kernel = _kernel()
        if kernel is None or self._originals:
            return
        tables = compat.shutdown_request_tables(kernel)
        if not tables:
            logger.warning("A run cannot save when this kernel is restarted or shut down from "
                           "the page: %s has no shutdown_request handler to hook (see "
                           "jupyter_supervisor/compat/).", type(kernel).__qualname__)
            return
        self._kernel = kernel
        for name, handlers in tables.items():
            original = handlers["shutdown_request"]
            self._originals[name] = original
            handlers["shutdown_request"] = self._handler(original)

    def uninstall(self) -> None:
        if self._kernel is not None:
            tables = compat.shutdown_request_tables(self._kernel)
            for name, original in self._originals.items():
                if name in tables:
                    tables[name]["shutdown_request"] = original
        self._originals.clear()
        self._kernel = None

    def _handler(self, original):
        async def shutdown_request(stream, ident, parent):
            restart = bool(parent.get("content", {}).get("restart"))
            why = RESTARTED if restart else SHUT_DOWN
            # In the control thread's loop: its other messages wait while the runs stop.
            await asyncio.get_running_loop().run_in_executor(None, self._stop_runs, why)
            result = original(stream, ident, parent)
            if inspect.isawaitable(result):
                await result
        return shutdown_request


class _AtExitHook:
    """``%unload_ext`` aside, the interpreter's exit (``atexit``)."""

    def __init__(self, stop_runs: Callable[[str], None]):
        self._stop_runs = stop_runs
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            atexit.register(self._on_exit)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            atexit.unregister(self._on_exit)
            self._installed = False

    def _on_exit(self) -> None:
        self._stop_runs(EXITED)


class _KernelEnd:
    """The hooks of one process; see the module docstring. ``_lock`` guards ``_stop`` and
    ``_live`` and the hooks' installation."""

    def __init__(self):
        self._lock = threading.RLock()
        self._stop: Optional[Callable[[str, float], List]] = None
        self._live: Optional[Callable[[], bool]] = None
        self._signals = _SignalHook(self.stop_runs)
        # The hooks that can be installed from any thread; a cloud's preemption notice
        # (notices.py) stops only the runs that listen to it.
        self.notices = NoticeHook(lambda: STOP_SECS)
        self._hooks = (_PollerHook(self.stop_runs), _ShutdownRequestHook(self.stop_runs),
                       _AtExitHook(self.stop_runs), self.notices)

    def guard(self, stop: Callable[[str, float], List], live: Callable[[], bool]) -> None:
        """Hooks every way the kernel ends (again after ``release``); call it from the main
        thread, where signal handlers are set."""
        with self._lock:
            self._stop, self._live = stop, live
            if threading.current_thread() is threading.main_thread():
                self._signals.install()
            for hook in self._hooks:
                hook.install()

    def release(self) -> None:
        """Puts every hook back when no run is live. Signal handlers can be set only in the main
        thread: from another thread, that part is done by the kernel's main loop (until then
        ours pass the signal straight on, since no run is live)."""
        with self._lock:
            if self._stop is None or self._live():
                return
            for hook in self._hooks:
                hook.uninstall()
            if threading.current_thread() is threading.main_thread():
                self._signals.uninstall()
                self._stop = self._live = None
                return
        loop = _main_loop()
        if loop is not None:
            loop.add_callback(self.release)

    def stop_runs(self, why: str, timeout: Optional[float] = None) -> None:
        """Asks the live runs to stop (``why`` is what they record) and waits for their final
        checkpoints, at most ``timeout`` seconds (default ``STOP_SECS``). The waiting happens in
        a thread of its own: the caller may be a signal handler that interrupted the main
        thread inside a lock."""
        timeout = STOP_SECS if timeout is None else timeout
        with self._lock:
            stop, live = self._stop, self._live
        if stop is None or not live():
            return
        logger.warning("Stopping the live runs: %s (final checkpoints, at most %g s).",
                       why, timeout)
        late: list = []
        worker = threading.Thread(target=lambda: late.extend(stop(why, timeout)),
                                  name="jupyter_supervisor-kernel-end", daemon=True)
        try:
            worker.start()
        except RuntimeError:  # no new thread at the interpreter's shutdown: stop from here
            late.extend(stop(why, timeout))
        else:
            worker.join(timeout + 1)
        if worker.is_alive() or late:
            names = ", ".join(repr(r.name) for r in late) or "some runs"
            logger.warning("%s did not write a final checkpoint within %g s; the newest "
                           "complete checkpoint stays the latest.", names, timeout)

def cut_advice(why: Optional[str]) -> str:
    """What gives the live runs more time to write their final checkpoints when the kernel
    ends for ``why`` (a stop_reason), for the note of a stop that was cut ("" for a stop that
    is not the kernel's end: nothing cuts it)."""
    if why in (RESTARTED, SHUT_DOWN):
        return ("A restart or shutdown from the page ends the kernel after the client's "
                "KernelManager.shutdown_wait_time (5 s by default): raise it in the server's "
                "config (see docs/preemption.md).")
    if why is not None and why.startswith(SIGNALLED):
        return (f"After {why[len(SIGNALLED):]}, the kernel gives its runs at most "
                "jupyter_supervisor.notebook.shutdown.STOP_SECS (25 s by default), and whoever "
                "sent the signal may kill it sooner (docker stop -t, Kubernetes' "
                "terminationGracePeriodSeconds, a cloud's preemption notice): give both more "
                "time, and keep --save-model-secs short (see docs/preemption.md).")
    if preemption.is_notice(why):
        return ("A preemption notice gives the runs until the machine stops, and the checkpoint "
                "of the step in flight may not fit: keep --save-model-secs short, so that the "
                "last periodic checkpoint is recent (see docs/preemption.md).")
    if why in (SERVER_DIED, EXITED):
        return ("The kernel gives its runs at most jupyter_supervisor.notebook.shutdown."
                "STOP_SECS (25 s by default) before it ends: raise it (see "
                "docs/preemption.md).")
    return ""


def _kernel_app():
    """The running IPKernelApp, or None (a terminal IPython, plain Python)."""
    kernelapp = sys.modules.get("ipykernel.kernelapp")
    if kernelapp is None or not kernelapp.IPKernelApp.initialized():
        return None
    return kernelapp.IPKernelApp.instance()


def _kernel():
    app = _kernel_app()
    return None if app is None else getattr(app, "kernel", None)


def _main_loop():
    """The kernel's main-thread IOLoop (``add_callback`` is safe from any thread), or None."""
    kernel = _kernel()
    return None if kernel is None else getattr(kernel, "io_loop", None)


_HOOKS = _KernelEnd()
guard = _HOOKS.guard
release = _HOOKS.release
