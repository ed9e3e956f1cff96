"""A run's cell body: transformed (IPython's syntax) and compiled once from the cell that started
it, executed in the notebook's namespace with the run's own ``sv`` and ``sess``, its errors
shown from the user's frames."""
import ast
import asyncio
import inspect
import os
import symtable
import sys
import sysconfig
import traceback
import types
from typing import Callable, Dict, Sequence

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


def unchanged(source: str) -> str:
    """A body's source as it is: plain Python, without IPython's transformations."""
    return source


def default_compile(source: str, name: str):
    """Compiles a body without IPython (tracebacks then name ``<supervise NAME>``)."""
    return compile_python(source, f"<supervise {name}>")


def compile_python(source: str, filename: str):
    """Compiles Python ``source`` as module code; top-level ``await`` makes it a coroutine's
    code (``inspect.CO_COROUTINE``), as IPython's auto-await does for a cell."""
    try:
        return compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as error:
        try:
            code = compile(source, filename, "exec", dont_inherit=True,
                           flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError:
            raise error from None
        if not code.co_flags & inspect.CO_COROUTINE:
            raise
        return code


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


def _function_of(source: str, code, own: Sequence[str]):
    """The body as a function of the run's own names, ``scope(*own) -> body()``, or None when
    it cannot be one. ``code``: the body compiled as a module (its file name and lines are
    kept, so that tracebacks read the same).

    Why: executed as module code with the run's names in a dict subclass, every name the body
    reads costs a dict miss and a KeyError, and every one it binds a Python call, on each
    step: a measurable share of a fast training step (bench/bench_interleaved.py). As a
    function, the names it binds are declared ``global`` (they go to the notebook, as in any
    cell), the others are read from the notebook as globals, and the run's own are closure
    variables. Not for a body that binds one of the run's own names, calls exec, eval, locals,
    vars, dir or get_ipython at top level (IPython's magics read and bind the caller's locals:
    ``%time x = f()``), awaits at top level, uses ``from m import *``, or does not compile as a
    function (a ``global`` after use): those run as module code.
    """
    if code.co_flags & inspect.CO_COROUTINE:
        return None
    try:
        tree = ast.parse(source, code.co_filename, "exec")
        table = symtable.symtable(source, code.co_filename, "exec")
    except SyntaxError:
        return None
    # (At module level every name "is global"; what counts is what the body binds.)
    bound = {sym.get_name() for sym in table.get_symbols()
             if sym.is_assigned() or sym.is_imported() or sym.is_declared_global()}
    # exec, eval, locals, vars and dir() at top level see a function's locals, not the notebook.
    if bound & set(own) or not tree.body or _NAMESPACE_CALLS & set(code.co_names):
        return None
    # The lines compile_source put in front of the source (the %%supervise line).
    shift = _first_line(code) - _first_line(compile(source, code.co_filename, "exec",
                                                    dont_inherit=True))
    ast.increment_lineno(tree, shift)
    # Our nodes start at line 1, as module code does (a traceback lists the cell's lines from
    # the code's first line), and end with the body.
    span = {"lineno": 1, "col_offset": 0, "end_lineno": tree.body[-1].end_lineno,
            "end_col_offset": 0}
    # Python 3.12 added type parameters to a def; an empty list is a plain def.
    plain = {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}
    statements = ([ast.Global(names=sorted(bound), **span)] if bound else []) + tree.body
    inner = ast.FunctionDef(name="body", args=_no_arguments(), body=statements,
                            decorator_list=[], returns=None, **plain, **span)
    outer = ast.FunctionDef(
        name="scope", args=_no_arguments([ast.arg(arg=name, **span) for name in own]),
        body=[inner, ast.Return(value=ast.Name(id="body", ctx=ast.Load(), **span), **span)],
        decorator_list=[], returns=None, **plain, **span)
    module = ast.Module(body=[outer], type_ignores=[])
    try:
        wrapper = compile(module, code.co_filename, "exec", dont_inherit=True)
    except SyntaxError:
        return None
    return wrapper


_NAMESPACE_CALLS = {"exec", "eval", "locals", "vars", "dir", "get_ipython"}


def _first_line(code) -> int:
    return next((line for _, _, line in code.co_lines() if line), 1)


def _no_arguments(args=()) -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=list(args), vararg=None, kwonlyargs=[],
                         kw_defaults=[], kwarg=None, defaults=[])


class Body:
    """The source of a ``%%supervise`` cell, run by a TrainingRun.

    ``transform_source(source) -> Python source``: IPython's input transformations (magics,
    ``!cmd``, ``obj?``), keeping the lines where they are. ``compile_source(python, run_name)
    -> code``: IPython's compiler makes tracebacks show the cell's own lines.
    ``format_exception(exc) -> str``: the error shown to the user, given the exception with its
    traceback trimmed to start at the body (or at the user's own code).
    """

    def __init__(self, source: str, namespace: dict, run_name: str, *,
                 transform_source: Callable[[str], str] = unchanged,
                 compile_source: Callable[[str, str], object] = default_compile,
                 format_exception: Callable[[BaseException], str] = default_format):
        self.source = source
        self._namespace = namespace
        self._run_name = run_name
        self._transform_source = transform_source
        self._compile_source = compile_source
        self._format_exception = format_exception
        self._python = None  # the body as Python source, once transformed
        self._code = None  # the compiled body, or its SyntaxError
        self._pinned: Dict[str, object] = {}
        self._wrappers: Dict[tuple, object] = {}   # own names -> _function_of's code, or None
        self._frames = set()                        # the code objects a body frame runs

    def compiled(self):
        """The code object, or the SyntaxError the source raised. Compiled once, from the cell
        that started the run: tracebacks name that cell, also after a resume from a later one.
        What ``transform_source`` raises (a magic refused in a body) is raised."""
        if self._code is None:
            self._python = self._transform_source(self.source)
            try:
                self._code = self._compile_source(self._python, self._run_name)
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
        own = {**self._pinned, **names}
        function = self._function(own)
        if function is not None:
            if not repeat:
                function()
                return
            while not should_stop():
                function()
            return
        local_ns = _BodyLocals(self._namespace, own)
        loop = None
        if code.co_flags & inspect.CO_COROUTINE:
            # Top-level await: in an event loop of the run's thread (the kernel's belongs to
            # the main thread), one for the whole run.
            loop = asyncio.new_event_loop()

            def once():  # pylint: disable=eval-used  (the cell body)
                loop.run_until_complete(eval(code, self._namespace, local_ns))
        else:
            def once():
                exec(code, self._namespace, local_ns)  # pylint: disable=exec-used  (the cell body)
        try:
            if not repeat:
                once()
                return
            while not should_stop():
                once()
        finally:
            if loop is not None:
                loop.close()

    def _function(self, own: Dict[str, object]):
        """The body as a function with ``own`` as its closure (see ``_function_of``), or
        None: then it runs as module code."""
        code = self.compiled()
        if isinstance(code, SyntaxError):
            return None
        self._frames.add(code)
        key = tuple(own)
        if key not in self._wrappers:
            self._wrappers[key] = _function_of(self._python, code, key)
        wrapper = self._wrappers[key]
        if wrapper is None:
            return None
        scope: Dict[str, object] = {}
        exec(wrapper, self._namespace, scope)  # pylint: disable=exec-used  (the cell body)
        function = scope["scope"](*own.values())
        # Named as the module code it stands for: IPython's tracebacks then show the cell's
        # lines around the failing one, as for any cell (it looks for a def of "body").
        names = {"co_name": "<module>"}
        if sys.version_info >= (3, 11):
            names["co_qualname"] = "<module>"
        function.__code__ = function.__code__.replace(**names)
        self._frames.add(function.__code__)
        return function

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
            while start is not None and start.tb_frame.f_code is not self._code and \
                    start.tb_frame.f_code not in self._frames:
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
