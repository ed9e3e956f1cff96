"""The seam between a run (``notebook/run.py``) and what trains: ``Backend`` (what a run
drives; what it was asked to do is ``config.RunConfig``), shared by the graph backend
(``graph/``, TF1 code under a Supervisor) and the eager backend (TensorFlow 2 loops and Keras
``fit``).

A run builds its backend in the kernel's main thread (so bad input fails the cell at once),
then, in its own thread::

    with backend.session() as names:      # restore the newest checkpoint, or initialize
        namespace.update(names)            # e.g. {"sv": ..., "sess": ...}
        exec(body)                         # until it returns, or should_stop() with --repeat
    # leaving the block: services stopped, a final checkpoint written, Stopped emitted

and from any thread ``request_stop()``, ``save_now()``, ``read_step()``. Everything a backend
reports reaches the run's listeners as the records of ``events``; the run's history is fed only
by them. A session's stop is recorded once, in the backend (``stops``): the run asks it there
and reads it back (``stop_record``).
"""
import logging
from typing import Callable, ContextManager, Dict, List, Optional, Protocol

from . import stops

logger = logging.getLogger("jupyter_supervisor")


class RunConflictError(RuntimeError):
    """A live run already uses the name, logdir or graph a new run asks for."""


def clean_up(first: Optional[BaseException], what: str,
             action: Callable[[], object]) -> Optional[BaseException]:
    """Runs the clean-up ``action`` (releasing the lock, closing a file) of a session that
    ends with ``first`` (None: cleanly) and returns the error that ends it: the first one. A
    failure of ``action`` after an error never replaces it (as TensorFlow's Coordinator keeps
    the first exception): it is logged beside it, with ``what`` failed."""
    try:
        action()
    except Exception as e:  # pylint: disable=broad-except
        if first is None:
            return e
        logger.warning("%s failed too, after the error that ended the run (%s: %s): %s: %s",
                       what[:1].upper() + what[1:], type(first).__name__, first,
                       type(e).__name__, e, exc_info=e)
    return first


class StopBody(BaseException):
    """Raised into a cell body by its bound ``sess.run`` (or ``sv.step``) when a stop was
    requested that the body did not look at (``sv.should_stop()``): a loop that never checks
    ends at its next step boundary, and the run ends cleanly with a final checkpoint.

    A BaseException, as KeyboardInterrupt, so that a body's ``except Exception`` cannot
    swallow it.
    """


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

    def request_stop(self, ex: Optional[BaseException] = None, why: Optional[str] = None, *,
                     by: str = stops.SESSION, step: Optional[int] = None) -> None:
        """Asks the session to end at the next step boundary; ``ex`` fails the run. ``why``
        (the first one given) goes to the event file's SessionLog.STOP and the Stopped record.
        Recorded in ``stop_record``, with who asked (``by``) and at which ``step``. A stop
        asked before the session is ready holds for it."""

    @property
    def stop_record(self) -> Optional[stops.StopRecord]:
        """The session's stop as asked so far, or None (none asked)."""

    def save_now(self) -> Optional[str]:
        """Writes a checkpoint now, from any thread; returns its path (None: nothing to save).
        A model that is not finite is never written (``finite``): with ``on_nan="stop"`` this
        raises ``finite.NonFiniteError`` and the run stops with it; with ``"rollback"`` it
        returns None and the training thread restores the newest good checkpoint at its next
        step boundary. The periodic and the final checkpoints follow the same rule."""

    def read_step(self) -> Optional[int]:
        """The global step now, or None (no session yet, or no step)."""

    @property
    def stopped_by_peer(self) -> Optional[str]:
        """Why another worker stopped this one ("a stop on worker 1"), or None: the session
        ended for its own reasons. A run stopped by a peer ends 'stopped', not 'finished'."""

    def flush_events(self, timeout: Optional[float] = None) -> bool:
        """Waits until the listeners have seen every record emitted so far."""

    def owns_thread(self, thread) -> bool:
        """True for the backend's own service threads (their output goes to the run)."""

    def notes(self) -> List[str]:
        """What this run does differently from what its options suggest (no variables to
        save, no global step to count), for the user to read when the cell returns."""

    def close(self) -> None:
        """After the run's thread ended: leaves what the body used usable again."""
