"""The seam between a run (``notebook/run.py``) and what trains: ``RunConfig`` (what a run was
asked to do) and ``Backend`` (what a run drives), shared by the graph backend (``graph/``, TF1
code under a Supervisor) and the eager backend (TensorFlow 2 loops and Keras ``fit``).

A run builds its backend in the kernel's main thread (so bad input fails the cell at once),
then, in its own thread::

    with backend.session() as names:      # restore the newest checkpoint, or initialize
        namespace.update(names)            # e.g. {"sv": ..., "sess": ...}
        exec(body)                         # until it returns, or should_stop() with --repeat
    # leaving the block: services stopped, a final checkpoint written, Stopped emitted

and from any thread ``request_stop()``, ``save_now()``, ``read_step()``. Everything a backend
reports reaches the run's listeners as the records of ``events``; the run's history is fed only
by them.
"""
import dataclasses
import os
from typing import Callable, ContextManager, Dict, List, Optional, Protocol

from . import finite
from ._validate import PATTERN_TEXT, check_number, has_pattern_characters, invalid


class RunConflictError(RuntimeError):
    """A live run already uses the name, logdir or graph a new run asks for."""


class StopBody(BaseException):
    """Raised into a cell body by its bound ``sess.run`` (or ``sv.step``) when a stop was
    requested that the body did not look at (``sv.should_stop()``): a loop that never checks
    ends at its next step boundary, and the run ends cleanly with a final checkpoint.

    A BaseException, as KeyboardInterrupt, so that a body's ``except Exception`` cannot
    swallow it.
    """


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What a run was asked to do; ``%%supervise`` builds one from its options.

    ``name`` defaults to the last component of ``logdir`` (or "run" without one); ``is_chief``
    defaults to ``task_index == 0``. ``init_fn`` is called only when there is no checkpoint to
    restore (graph: ``fn(sess)``; eager: ``fn()``, after ``sv.track``, or at the start of
    the first ``model.fit`` with ``sv.callback``). ``session_config`` is the ``ConfigProto`` of a graph run's
    managed session; for a task of a cluster, ``cluster.session_config(job, task_index)``,
    whose device filters let the task start or restart while another task is down.
    ``on_nan`` ("stop", "rollback" or "ignore") and ``max_rollbacks``: what a checkpoint due on
    a model that is not finite does (see ``finite``); both backends follow it.
    """
    logdir: Optional[str] = None
    name: Optional[str] = None
    save_model_secs: float = 60
    save_summaries_secs: float = 10
    checkpoint_basename: str = "model.ckpt"
    keep: int = 5
    max_steps: Optional[int] = None
    init_fn: Optional[Callable] = None
    repeat: bool = False
    master: str = ""
    task_index: int = 0
    is_chief: Optional[bool] = None
    recovery_wait_secs: float = 5
    stop_grace_secs: float = 30
    session_config: Optional[object] = None
    on_nan: str = finite.STOP
    max_rollbacks: int = finite.DEFAULT_MAX_ROLLBACKS

    def __post_init__(self):
        if self.logdir is not None and (not isinstance(self.logdir, (str, os.PathLike))
                                        or not os.fspath(self.logdir)):
            raise ValueError(invalid("logdir", self.logdir, "a directory path, or None"))
        if self.logdir is not None:
            object.__setattr__(self, "logdir", os.path.expanduser(os.fspath(self.logdir)))
        if self.name is None:
            object.__setattr__(self, "name", _default_name(self.logdir))
        if not isinstance(self.name, str) or not self.name.strip() or self.name != self.name.strip():
            raise ValueError(invalid("name", self.name,
                                     "a non-empty name without surrounding spaces"))
        check_number("save_model_secs", self.save_model_secs)
        check_number("save_summaries_secs", self.save_summaries_secs)
        check_number("recovery_wait_secs", self.recovery_wait_secs)
        check_number("stop_grace_secs", self.stop_grace_secs)
        check_number("keep", self.keep, integer=True, minimum=1)
        check_number("max_steps", self.max_steps, integer=True, minimum=1, allow_none=True)
        check_number("task_index", self.task_index, integer=True)
        finite.check_policy(self.on_nan, self.max_rollbacks)
        if not isinstance(self.checkpoint_basename, str) or not self.checkpoint_basename \
                or "/" in self.checkpoint_basename \
                or has_pattern_characters(self.checkpoint_basename):
            raise ValueError(invalid("checkpoint_basename", self.checkpoint_basename,
                                     "a file name such as 'model.ckpt', without /, "
                                     + PATTERN_TEXT))
        if self.init_fn is not None and not callable(self.init_fn):
            raise ValueError(invalid("init_fn", self.init_fn,
                                     "a function (graph: taking the session; eager: "
                                     "taking nothing), or None"))
        if not isinstance(self.master, str):
            raise ValueError(invalid("master", self.master,
                                     "a target such as 'grpc://localhost:2222', or ''"))
        if self.session_config is not None:
            import tensorflow as tf  # pylint: disable=import-outside-toplevel
            if not isinstance(self.session_config, tf.compat.v1.ConfigProto):
                raise ValueError(invalid("session_config", self.session_config,
                                         "a tf.compat.v1.ConfigProto, or None"))
        if self.is_chief is None:
            object.__setattr__(self, "is_chief", self.task_index == 0)

    @property
    def role(self) -> str:
        """'local' (no master), 'chief' or 'worker'."""
        if not self.is_chief:
            return "worker"
        return "chief" if self.master else "local"

    @property
    def saves(self) -> bool:
        """True when this task writes checkpoints and event files (a chief with a logdir)."""
        return bool(self.logdir) and bool(self.is_chief)


def _default_name(logdir: Optional[str]) -> str:
    if not logdir:
        return "run"
    return logdir.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or logdir


class Backend(Protocol):
    """What a TrainingRun drives: one session of training after another (a resume builds a new
    backend). Built in the kernel's main thread; its constructor raises early, with a message
    that says what to do, for what cannot work (an empty graph, a checkpoint that does not fit).
    """

    @property
    def supervisor(self):
        """What the body sees as ``sv`` (bound in the notebook when the run starts)."""

    def add_listener(self, listener: Callable[[object], None]) -> None:
        """``listener(record)`` for every record of ``events`` (on a dispatcher thread)."""

    def session(self) -> ContextManager[Dict[str, object]]:
        """In the run's thread: restores the newest checkpoint (falling back to an older one) or
        initializes (and ``init_fn``), starts the services, and yields the names the body sees
        besides ``sv`` (on the graph, ``sess``). Leaving it stops the services and writes a final
        checkpoint unless an error ends the block; the Stopped record is emitted last. A stop
        requested while a non-chief waits for its chief ends the block cleanly, without
        running the body (``should_stop()`` is True inside)."""

    def should_stop(self) -> bool:
        """True once a stop was requested (or max_steps reached, or the input ran out)."""

    def request_stop(self, ex: Optional[BaseException] = None, why: Optional[str] = None) -> None:
        """Asks the session to end at the next step boundary; ``ex`` fails the run. ``why``
        (the first one given) goes to the event file's SessionLog.STOP and the Stopped record."""

    def save_now(self) -> Optional[str]:
        """Writes a checkpoint now, from any thread; returns its path (None: nothing to save).
        A model that is not finite is never written (``finite``): with ``on_nan="stop"`` this
        raises ``finite.NonFiniteError`` and the run stops with it; with ``"rollback"`` it
        returns None and the training thread restores the newest good checkpoint at its next
        step boundary. The periodic and the final checkpoints follow the same rule."""

    def read_step(self) -> Optional[int]:
        """The global step now, or None (no session yet, or no step)."""

    def flush_events(self, timeout: Optional[float] = None) -> bool:
        """Waits until the listeners have seen every record emitted so far."""

    def owns_thread(self, thread) -> bool:
        """True for the backend's own service threads (their output goes to the run)."""

    def notes(self) -> List[str]:
        """What this run does differently from what its options suggest (no variables to
        save, no global step to count), for the user to read when the cell returns."""

    def close(self) -> None:
        """After the run's thread ended: leaves what the body used usable again."""
