"""What every entry of ``compat`` shares: its error, and the probe that says whether the
running library still has what an entry reaches into."""
import dataclasses
from typing import Callable


class CompatError(RuntimeError):
    """A private API this package relies on is not in the installed library any more."""


def missing(what: str, library: str) -> CompatError:
    """The CompatError for ``what``, missing from the installed ``library``."""
    return CompatError(
        f"{what} is not in the installed {library}: jupyter_supervisor relies on it (see "
        "jupyter_supervisor/compat/). Install a version it was checked against "
        "(docs/versions.md says which), or report the versions you have.")


@dataclasses.dataclass(frozen=True)
class Probe:
    """One check, run once per process, that the running ``library`` has ``what``.

    Attributes:
      feature: the feature that needs it (a key of ``capabilities.FEATURES``).
      library: the distribution that ships it ("tensorflow", "keras", "ipykernel", ...).
      what: the internal, as a note to the user names it.
      checked: the versions of ``library`` it was checked on (the tests of ``compat``).
      check: returns True when it is there; False, or an ImportError, AttributeError or
        TypeError, when it is not. It reads classes and code, and runs nothing of training.
    """
    feature: str
    library: str
    what: str
    checked: str
    check: Callable[[], bool]

    def holds(self) -> bool:
        """True when the running library has ``what``."""
        try:
            return bool(self.check())
        except (ImportError, AttributeError, TypeError):
            return False


def names_used(cls, *names: str) -> bool:
    """True when each of ``names`` is an attribute that some function of ``cls`` (its own or
    a base class's) reads or sets: the way to see an attribute that only an instance has,
    without making one."""
    seen = set()
    for klass in getattr(cls, "__mro__", ()):
        for value in vars(klass).values():
            function = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
            function = getattr(function, "__wrapped__", function)
            stack = [getattr(function, "__code__", None)]
            while stack:
                code = stack.pop()
                if code is None:
                    continue
                seen.update(code.co_names)
                # a comprehension's or a nested function's own code
                stack.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return all(name in seen for name in names)


def local_names(function, *names: str, arguments: bool = False) -> bool:
    """True when ``function`` (unwrapped from its decorators) has each of ``names`` as a local
    variable (with ``arguments``, as an argument): what ``compat``'s reads of a running call's
    frame rely on."""
    import inspect  # pylint: disable=import-outside-toplevel
    code = inspect.unwrap(function).__code__
    pool = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount] if arguments \
        else code.co_varnames
    return all(name in pool for name in names)


def constants_used(function, *values: str) -> bool:
    """True when each of ``values`` is a string constant of ``function`` (unwrapped from its
    decorators) or of a function or comprehension in it, alone or in a tuple (the keyword
    names of a call): how a probe sees the keyword argument a call passes, or the key a
    function reads, without running it."""
    import inspect  # pylint: disable=import-outside-toplevel
    seen, stack = set(), [inspect.unwrap(function).__code__]
    while stack:
        for constant in stack.pop().co_consts:
            if hasattr(constant, "co_consts"):
                stack.append(constant)
            elif isinstance(constant, tuple):
                seen.update(c for c in constant if isinstance(c, str))
            elif isinstance(constant, str):
                seen.add(constant)
    return all(value in seen for value in values)
