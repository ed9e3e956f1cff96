"""The runs of this kernel: one per name, at most one live per name, logdir or graph
(``get_run``, ``runs``), and the stop of every live run when the kernel ends (``stop_all``,
registered with ``shutdown``)."""
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Dict, List, Optional

from ..backend import RunConflictError
from ..lockfile import LogdirLockedError
from ..names import STOPPING
from . import shutdown

if TYPE_CHECKING:  # the runs themselves; run.py imports this module
    from .run import TrainingRun

logger = logging.getLogger("jupyter_supervisor")


class RunStateError(RuntimeError):
    """The run's state does not allow what was asked (e.g. saving a run that ended)."""


def _same_dir_key(logdir: str) -> str:
    return logdir if "://" in logdir else os.path.realpath(logdir)


class _Registry:
    """The runs of this kernel by name, in start order."""

    def __init__(self):
        # Re-entrant: a signal handler may ask for the live runs while the main thread, which
        # it interrupted, holds it.
        self._lock = threading.RLock()
        self._runs: Dict[str, "TrainingRun"] = {}

    def check_free(self, run: "TrainingRun", graph) -> None:
        """Raises RunConflictError when a live run other than ``run`` uses its name, logdir or
        graph."""
        with self._lock:
            others = [r for r in self._runs.values() if r is not run and r.is_live]
        for other in others:
            if other.status == STOPPING:
                how = (f"It is writing its final checkpoint: `%supervise wait {other.name}` "
                       "waits for it.")
            else:
                how = (f"Stop it first with `%supervise stop {other.name}` (or "
                       f"jupyter_supervisor.get_run({other.name!r}).stop()).")
            # The logdir first: another --name would not help there.
            if run.logdir and other.logdir and \
                    _same_dir_key(run.logdir) == _same_dir_key(other.logdir):
                raise LogdirLockedError(
                    f"Run {other.name!r} is {other.status} on logdir {other.logdir!r}: one run "
                    f"writes to a logdir at a time. {how}")
            if other.name == run.name:
                raise RunConflictError(
                    f"A run named {run.name!r} is {other.status}. {how} Or pass another --name.")
            if graph is not None and other._graph is graph:  # pylint: disable=protected-access
                raise RunConflictError(
                    f"Run {other.name!r} is {other.status} on this graph (it is finalized while "
                    f"a run trains it). {how} Or build the new model in a fresh graph "
                    "(tf.compat.v1.reset_default_graph()).")

    def add(self, run: "TrainingRun") -> None:
        """Registers ``run`` under its name (replacing an ended run of that name)."""
        with self._lock:
            self._runs.pop(run.name, None)
            self._runs[run.name] = run
        shutdown.guard(_stop_for_kernel_end, _any_live)

    def get(self, name: Optional[str]) -> "TrainingRun":
        """The run named ``name``; without a name, the only run, or else the only live one."""
        with self._lock:
            runs = list(self._runs.values())
            found = self._runs.get(name) if name is not None else None
        if name is None:
            live = [r for r in runs if r.is_live]
            if len(runs) == 1 or len(live) == 1:
                return runs[0] if len(runs) == 1 else live[0]
            if not runs:
                raise KeyError("There is no run yet: start one with %%supervise.")
            raise KeyError("There are several runs: name one of "
                           + ", ".join(repr(r.name) for r in runs) + ".")
        if found is None:
            known = ", ".join(repr(r.name) for r in runs) or "none yet"
            raise KeyError(f"There is no run named {name!r} (runs: {known}).")
        return found

    def all(self) -> List["TrainingRun"]:
        with self._lock:
            return list(self._runs.values())


REGISTRY = _Registry()


def get_run(name: Optional[str] = None) -> "TrainingRun":
    """The run of this kernel named ``name``.

    Args:
        name: the run's name (``--name``, by default the logdir's last component). None: the
            only run of the kernel, or else the only live one.

    Returns:
        The ``TrainingRun``.

    Raises:
        KeyError: no run has that name; without a name, there is no run yet, or there are
            several and not exactly one is live.
    """
    return REGISTRY.get(name)


def runs() -> List["TrainingRun"]:
    """Every run of this kernel, live or ended, one per name.

    Returns:
        A new list of the ``TrainingRun``s, in the order they were last started: a resume, or
        a new run under an ended run's name, moves that name to the end.
    """
    return REGISTRY.all()


def stop_all(timeout: Optional[float] = None, why: Optional[str] = None) -> List["TrainingRun"]:
    """Stops every live run (each writes a final checkpoint; ``why`` is its ``stop_reason``)
    and waits for their threads; returns the runs that had not ended within ``timeout``
    seconds."""
    live = [r for r in REGISTRY.all() if r.is_live]
    for run in live:
        try:
            run.stop(wait=False, why=why)
        except RunStateError:
            pass  # it ended meanwhile
    deadline = None if timeout is None else time.monotonic() + timeout
    late = []
    for run in live:
        left = None if deadline is None else max(deadline - time.monotonic(), 0)
        if not run.wait(left):
            late.append(run)
    return late


def _any_live() -> bool:
    return any(r.is_live for r in REGISTRY.all())


def _stop_for_kernel_end(why: str, timeout: float) -> List["TrainingRun"]:
    late = stop_all(timeout=timeout, why=why)
    for run in late:
        logger.warning("Run %r did not stop within %g s (%s); its newest checkpoint is the "
                       "last complete one.", run.name, timeout, why)
    return late
