"""When to checkpoint or write summaries: ``Timer``, one object for both backends (no
TensorFlow).

As TensorFlow's ``SecondOrStepTimer`` (``basic_session_run_hooks.py``), it separates *when* from
*what*: the caller asks ``due(step)`` at a step boundary, ``restart``s the interval and does the
work; it is due every ``secs`` seconds or every ``steps`` steps, never both. Work done in the
background that outlasts the interval starts the next one when it ends (``ended``). It also
remembers the step the newest checkpoint holds (``last_step``), so that a save that would
write the same state again is skipped (``moved``): TensorFlow's ``CheckpointSaverHook.end()``
rule, "save a last time unless the last step was just saved".

The graph Supervisor's services are TensorFlow ``LooperThread``s, which wake every
``Timer.secs`` on their own thread (``graph/services.py``); the eager backend asks ``due`` in its
training thread at each step boundary.
"""
import time
from typing import Callable, Optional

from ._validate import check_number, invalid


class Timer:
    """Due every ``secs`` seconds or every ``steps`` steps (one of them; 0 or None: never
    due), counted from the last ``restart`` (before the first one: due at once).
    ``clock``: seconds, monotonic (tests may pass their own)."""

    def __init__(self, *, secs: Optional[float] = None, steps: Optional[int] = None,
                 clock: Callable[[], float] = time.monotonic):
        if secs and steps:
            raise ValueError(invalid("steps", steps, f"None when secs is given (secs={secs}): a "
                                     "timer counts seconds or steps, not both"))
        check_number("secs", secs, allow_none=True)
        check_number("steps", steps, integer=True, allow_none=True)
        self.secs = secs or None
        self.steps = steps or None
        self._clock = clock
        self._last_time: Optional[float] = None
        self._last_trigger_step: Optional[int] = None
        # The step the newest checkpoint holds (None: none of this session).
        self.last_step: Optional[int] = None

    @property
    def enabled(self) -> bool:
        """False for a timer that is never due (0 seconds and 0 steps)."""
        return self.secs is not None or self.steps is not None

    def due(self, step: Optional[int] = None) -> bool:
        """True when the interval since the last ``restart`` has passed (for a step timer,
        ``step`` is where the caller is)."""
        if self.secs is not None:
            return self._last_time is None or self._clock() >= self._last_time + self.secs
        if self.steps is not None:
            return self._last_trigger_step is None or (
                step is not None and step >= self._last_trigger_step + self.steps)
        return False

    def overdue(self, step: Optional[int] = None) -> bool:
        """True when it has been due for one interval more (two since the last ``restart``): a
        save put off while the write before it runs is put off no longer."""
        if self.secs is not None:
            return self._last_time is None or self._clock() >= self._last_time + 2 * self.secs
        if self.steps is not None:
            return self._last_trigger_step is None or (
                step is not None and step >= self._last_trigger_step + 2 * self.steps)
        return False

    def restart(self, step: Optional[int] = None) -> None:
        """Starts the next interval now (at ``step``, for a step timer)."""
        self._last_time = self._clock()
        self._last_trigger_step = step

    def ended(self) -> Optional[float]:
        """The work started at the last ``restart`` (a checkpoint's write, in the background)
        ended now. When it outlasted the interval, the next interval starts now, and this
        returns the seconds it took (else None): work that takes longer than the interval is
        followed by one interval without it, not started again at once (which would make it
        run all the time). Seconds only: a step timer is unchanged."""
        if self.secs is None or self._last_time is None:
            return None
        now = self._clock()
        took = now - self._last_time
        if took <= self.secs:
            return None
        # Another thread may restart meanwhile (a save that waited for this one): both are
        # "now", so either value serves.
        self._last_time = now
        return took

    def moved(self, step: Optional[int]) -> bool:
        """True unless the newest checkpoint holds ``step`` already (``last_step``)."""
        return step is None or step != self.last_step
