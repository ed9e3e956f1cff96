"""The one record of a session's stop: who asked, why, with which error, at which step and when
(``StopRecord``), kept in one place, the session's ``Stops``.

A backend holds the ``Stops`` of its session (a resume builds a new backend: a new record). Every
ask goes there: the run's (``Backend.request_stop(by=RUN)``: the Stop button, ``%supervise
stop``, the kernel's end), the body's ``sv.request_stop()``, an error, the input's end,
``--max-steps``, another worker. The run reads it back (``Backend.stop_record``: its
``stop_reason``, how long it has been stopping), the eager backend ends its loops on it, and its
Stopped record (what the panel, the history and the event file show) says its reason and why.

The first ask decides the reason and the error; ``why`` is the first one given, also by a later
ask. No TensorFlow here: ``view/`` may read a record.
"""
import dataclasses
import threading
import time
from typing import Optional, Tuple

from . import events

# Who asked for a stop (StopRecord.by).
RUN = "run"              # TrainingRun.stop: the Stop button, %supervise stop, the kernel's end
SESSION = "session"      # the session itself: the body's sv.request_stop(), an error, the input
MAX_STEPS = "max_steps"  # the global step reached --max-steps
PEER = "peer"            # another worker of a multi-worker run stopped


@dataclasses.dataclass(frozen=True)
class StopRecord:
    """A stop as asked so far.

    Attributes:
        by: who asked (``RUN``, ``SESSION``, ``MAX_STEPS``, ``PEER``), each once, the first
            asker first.
        reason: ``events.REQUESTED``, ``OUT_OF_RANGE`` or ``ERROR``, from the first ask.
        error: with ``ERROR``, the exception the run fails with; else None.
        why: what asked, in words ("the kernel received SIGTERM"): the first one given; None
            when no ask said.
        step: the global step when it was first asked (None: not known).
        at: ``time.monotonic()`` of the first ask.
    """
    by: Tuple[str, ...]
    reason: str
    error: Optional[BaseException]
    why: Optional[str]
    step: Optional[int]
    at: float

    @property
    def max_steps_only(self) -> bool:
        """True when only ``--max-steps`` asked (a Keras fit then ends the epoch whose batches
        are all trained)."""
        return self.by == (MAX_STEPS,)


class Stops:
    """The stop of one session: its ``record``, and whether it took effect (``requested``).

    A stop takes effect when it is asked, or, with ``agreed=False`` (a worker of a multi-worker
    run), once the workers agreed on it at a step boundary (``take_effect``). Thread-safe: any
    thread asks, the training thread reads at every step (plain attribute reads).
    """

    def __init__(self, agreed: bool = True):
        self._lock = threading.Lock()
        self._at_once = agreed
        self._record: Optional[StopRecord] = None
        self._requested = False

    @property
    def record(self) -> Optional[StopRecord]:
        """The stop asked so far, or None."""
        return self._record

    @property
    def asked(self) -> bool:
        """True once anyone asked (a worker: not agreed yet, maybe)."""
        return self._record is not None

    @property
    def reason(self) -> str:
        """The record's reason; ``events.REQUESTED`` when none was asked (the block ended)."""
        record = self._record
        return events.REQUESTED if record is None else record.reason

    @property
    def error(self) -> Optional[BaseException]:
        """The error the stop fails the run with, or None."""
        record = self._record
        return None if record is None else record.error

    @property
    def why(self) -> str:
        """The record's why, "" when none was given (as the event file's SessionLog.STOP)."""
        record = self._record
        return "" if record is None or record.why is None else record.why

    @property
    def requested(self) -> bool:
        """True once the stop took effect: training ends at its next step boundary."""
        return self._requested

    def ask(self, by: str, *, why: Optional[str] = None, reason: str = events.REQUESTED,
            error: Optional[BaseException] = None, step: Optional[int] = None) -> None:
        """Records a stop asked by ``by`` (see ``StopRecord``); a second ask adds its asker
        and, when none was given before, its ``why``."""
        why = None if why is None else str(why)
        with self._lock:
            record = self._record
            if record is None:
                self._record = StopRecord((by,), reason,
                                          error if reason == events.ERROR else None,
                                          why, step, time.monotonic())
                self._requested = self._requested or self._at_once
                return
            if by not in record.by or (record.why is None and why is not None):
                self._record = dataclasses.replace(
                    record, by=record.by if by in record.by else record.by + (by,),
                    why=record.why if record.why is not None else why)

    def take_effect(self) -> None:
        """The stop asked takes effect now (the workers agreed on it)."""
        with self._lock:
            self._requested = True
