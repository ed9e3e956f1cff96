"""A run's cell body: compiled once from the cell that started it, executed in the notebook's
namespace with the run's own ``sv`` and ``sess``, its errors shown from the user's frames."""
import os
import sysconfig
import traceback
import types
from typing import Callable, Dict

# Where library code lives (the standard library, site-packages, this package): a traceback
# shown to the user starts at the first frame outside them (a notebook cell, the user's code).
_LIBRARY_DIRS = tuple(sorted({
    os.path.join(os.path.abspath(path), "")
    for path in [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] + [
        sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    if path}))


_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


def _without_our_frames(tb):
    """The traceback from ``tb`` down to the last frame before the first of this package's own
    (e.g. ``sv.save_checkpoint()`` called by the body ends at the body's line: the error's
    message says what happened). New traceback objects: the original chain is not changed."""
    kept = []
    while tb is not None and not os.path.abspath(
            tb.tb_frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        kept.append(tb)
        tb = tb.tb_next
    if tb is None or not kept:
        return kept[0] if kept else tb
    chain = None
    for frame in reversed(kept):
        chain = types.TracebackType(chain, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return chain


def default_compile(source: str, name: str):
    """Compiles a body without IPython (tracebacks then name ``<supervise NAME>``)."""
    return compile(source, f"<supervise {name}>", "exec", dont_inherit=True)


def default_format(exc: BaseException) -> str:
    """The traceback module's form of an error."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def is_user_code(filename: str) -> bool:
    """True for a frame of the user's code (not the standard library, a package, or ours)."""
    return not os.path.abspath(filename).startswith(_LIBRARY_DIRS)


def _names_used(code) -> set:
    """Every name ``code`` and the functions and comprehensions in it refer to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names_used(const)
    return names


class _BodyLocals(dict):
    """The local namespace a cell body executes in.

    It holds only the run's own names (``sv``, ``sess``, the pinned graph elements), so that a
    body keeps using its own Supervisor and ops even when later cells bind those names in the
    notebook; every assignment of the body goes to the notebook namespace, as in a normal cell.
    Names it lacks fall through to the notebook namespace (exec's globals) at C speed.
    """

    __slots__ = ("_notebook",)

    def __init__(self, notebook: dict, own: dict):
        super().__init__(own)
        self._notebook = notebook

    def __setitem__(self, key, value):
        self._notebook[key] = value
        if dict.__contains__(self, key):
            dict.__setitem__(self, key, value)

    def __delitem__(self, key):
        found = dict.__contains__(self, key)
        if found:
            dict.__delitem__(self, key)
        if key in self._notebook:
            del self._notebook[key]
        elif not found:
            raise KeyError(key)


class Body:
    """The source of a ``%%supervise`` cell, run by a TrainingRun.

    ``compile_source(source, run_name) -> code``: IPython's compiler makes tracebacks show the
    cell's own lines. ``format_exception(exc) -> str``: the error shown to the user, given the
    exception with its traceback trimmed to start at the body (or at the user's own code).
    """

    def __init__(self, source: str, namespace: dict, run_name: str, *,
                 compile_source: Callable[[str, str], object] = default_compile,
                 format_exception: Callable[[BaseException], str] = default_format):
        self.source = source
        self._namespace = namespace
        self._run_name = run_name
        self._compile_source = compile_source
        self._format_exception = format_exception
        self._code = None  # the compiled body, or its SyntaxError
        self._pinned: Dict[str, object] = {}

    def compiled(self):
        """The code object, or the SyntaxError the source raised. Compiled once, from the cell
        that started the run: tracebacks name that cell, also after a resume from a later one."""
        if self._code is None:
            try:
                self._code = self._compile_source(self.source, self._run_name)
            except SyntaxError as e:
                self._code = e
        return self._code

    def pin(self, graph) -> None:
        """Fixes the names the body uses that hold elements of ``graph`` (its ops, tensors,
        variables) to what they hold now, when the cell executes.

        A notebook re-runs its model-building cells while a run trains; the body keeps the ops
        of its own graph then, instead of finding another graph's ``train_op`` when it next
        reads the name. Every other name (a flag, a list, a function) is read live, as in any
        cell.
        """
        code = self.compiled()
        if isinstance(code, SyntaxError) or graph is None:
            return
        for name in _names_used(code):
            value = self._namespace.get(name)
            try:
                in_graph = getattr(value, "graph", None) is graph
            except Exception:  # pylint: disable=broad-except  (an odd object's property)
                in_graph = False
            if in_graph:
                self._pinned[name] = value

    def bind(self, names: Dict[str, object]) -> None:
        """Binds ``names`` in the notebook, for the cells that run meanwhile."""
        self._namespace.update(names)

    def execute(self, names: Dict[str, object], *, repeat: bool,
                should_stop: Callable[[], bool]) -> None:
        """Runs the body once, or with ``repeat`` again and again until ``should_stop()``."""
        code = self.compiled()
        local_ns = _BodyLocals(self._namespace, {**self._pinned, **names})
        if not repeat:
            exec(code, self._namespace, local_ns)  # pylint: disable=exec-used  (the cell body)
            return
        while not should_stop():
            exec(code, self._namespace, local_ns)  # pylint: disable=exec-used  (the cell body)

    def format(self, error: BaseException) -> str:
        """The error as the user sees it: its traceback starts at the cell body's own frame
        (our machinery above it is noise); a SyntaxError of the body has no frames at all.

        The exception itself is left as it is (its traceback is swapped only while it is
        formatted): it may still be on its way up the run's thread while a listener formats
        it, and its traceback grows meanwhile."""
        original = error.__traceback__
        if isinstance(error, SyntaxError) and error is self._code:
            shown = None
        else:
            start = original
            while start is not None and start.tb_frame.f_code is not self._code:
                start = start.tb_next
            if start is None:  # raised outside the body (an --init-fn): from the user's code
                start = original
                while start is not None and not is_user_code(start.tb_frame.f_code.co_filename):
                    start = start.tb_next
            if start is None:  # raised by ours or a library's code (a restore, a service)
                return f"{type(error).__name__}: {error}\n"
            shown = _without_our_frames(start)
        try:
            error.__traceback__ = shown
            try:
                return self._format_exception(error)
            except Exception:  # pylint: disable=broad-except
                return default_format(error)
        finally:
            error.__traceback__ = original
