"""Sends what a background thread prints to a sink of its own, not to the cell that executes.

ipykernel routes each write to ``sys.stdout``/``sys.stderr`` by the *current* parent message:
from a thread that never set one, output lands in whichever cell executes at that moment (or
the last one that did). A training thread runs for hours while the user runs other cells, so
its output must be claimed explicitly. ``routed_to(sink)`` does that for the calling thread:
while the block runs, that thread's writes to ``sys.stdout`` and ``sys.stderr`` go to
``sink(text)``; ``threads_routed_to(owns, sink)`` does it for the threads a run started (its
Supervisor's services and loops); every other thread writes exactly as before.

It works by putting a thin proxy in front of ``sys.stdout`` and ``sys.stderr`` (once, kept until
``uninstall()``); the proxy looks the writing thread up in a dict and otherwise delegates every
call and attribute to the stream it wraps, so ipykernel's own use of its streams is unchanged.
Logging handlers that hold the original stream object (TensorFlow's logger, in a notebook,
writes its INFO lines to the ``sys.stdout`` it found at import) are pointed at the proxy too.
TensorFlow's own INFO lines from a routed thread ("Running local_init_op.", when TF1 code turns
its INFO logging on; not ours, such as what a waiting worker waits for) go to the package
logger instead: the run's output area is for what the
body prints, and the panel already shows what those lines tell.
"""
import contextlib
import logging
import os
import sys
import threading
from typing import Callable, Dict, List, Tuple

_STREAMS = ("stdout", "stderr")

# Thread ident -> sink for threads inside routed_to(). Plain dict: reads on the write path take
# no lock (a dict lookup is atomic under the GIL); changes happen under _lock.
_routes: Dict[int, Callable[[str], None]] = {}
_lock = threading.Lock()
# Sinks for whole families of threads, each with the predicate that tells its threads (e.g.
# "started by this run's Supervisor"): asked only for threads not in _routes. Replaced, never
# mutated, so the write path reads it without a lock.
_families: Tuple[Tuple[Callable[[threading.Thread], bool], Callable[[str], None]], ...] = ()
# Logging handlers re-pointed at a proxy, with the stream they had (guarded by _lock).
_repointed: List[Tuple[logging.StreamHandler, object]] = []

_logger = logging.getLogger("jupyter_supervisor")
# This package's directory: our own lines through TensorFlow's logger stay in the run's output.
_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


class _TensorFlowInfoFilter(logging.Filter):
    """On TensorFlow's logger: its records below WARNING from a routed thread go to the
    package logger (at DEBUG), not to the run's output."""

    def filter(self, record):
        if record.levelno >= logging.WARNING or record.pathname.startswith(_PACKAGE_DIR) or (
                threading.get_ident() not in _routes and _family_sink() is None):
            return True  # a warning, one of our own lines (what a waiting worker waits for)
        _logger.debug("TensorFlow: %s", record.getMessage())
        return False


_TF_FILTER = _TensorFlowInfoFilter()


class RoutedStream:
    """A file-like proxy: writes of routed threads go to their sink, the rest to ``wrapped``."""

    def __init__(self, wrapped):
        self.wrapped = wrapped

    def write(self, text):
        sink = _routes.get(threading.get_ident()) or _family_sink()
        if sink is None:
            return self.wrapped.write(text)
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        sink(text)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if threading.get_ident() not in _routes and _family_sink() is None:
            self.wrapped.flush()

    def __getattr__(self, name):
        return getattr(self.wrapped, name)


def install() -> None:
    """Puts the proxy in front of ``sys.stdout`` and ``sys.stderr`` (idempotent)."""
    with _lock:
        proxies = {}
        for name in _STREAMS:
            current = getattr(sys, name)
            if current is not None and not isinstance(current, RoutedStream):
                proxy = RoutedStream(current)
                setattr(sys, name, proxy)
                proxies[id(current)] = proxy
        logging.getLogger("tensorflow").addFilter(_TF_FILTER)  # once: addFilter skips a known one
        if proxies:
            for handler in _stream_handlers():
                proxy = proxies.get(id(handler.stream))
                if proxy is not None:
                    _repointed.append((handler, handler.stream))
                    handler.setStream(proxy)


def uninstall() -> None:
    """Removes the proxies that are still in place; routed threads then print normally."""
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


def _stream_handlers() -> List[logging.StreamHandler]:
    loggers = [logging.getLogger()] + [
        logger for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)]
    return [handler for logger in loggers for handler in logger.handlers
            if isinstance(handler, logging.StreamHandler)
            and not isinstance(handler, logging.FileHandler)]


def _family_sink():
    families = _families
    if not families:
        return None
    thread = threading.current_thread()
    for owns, sink in families:
        if owns(thread):
            return sink
    return None


@contextlib.contextmanager
def threads_routed_to(owns: Callable[[threading.Thread], bool], sink: Callable[[str], None]):
    """Within the block, what any thread for which ``owns(thread)`` is true prints goes to
    ``sink(text)`` (the threads a run's Supervisor starts: services, ``sv.loop`` targets)."""
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
def routed_to(sink: Callable[[str], None]):
    """Within the block, what the calling thread prints goes to ``sink(text)``."""
    install()
    ident = threading.get_ident()
    with _lock:
        if ident in _routes:
            raise RuntimeError("This thread's output is already routed.")
        _routes[ident] = sink
    try:
        yield
    finally:
        with _lock:
            del _routes[ident]
