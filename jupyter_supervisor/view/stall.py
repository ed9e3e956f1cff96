"""The stall detector: since when no step came, and the alerts it raised and ended.

A stall (``stall_secs``): no step for max(``STALL_FACTOR`` x the median of the newest
``STEP_TIMES`` step times, ``stall_secs``); before the session's first step time is known, for
``FIRST_STEP_STALL`` x ``stall_secs`` (the first step traces the model and reads the first
batch). ``StallDetector`` keeps no lock and no timeline: its owner (``history.RunHistory``)
calls it under its own lock, decides when a stall may be raised (a ready session, running), and
records what it returns (``Stalled``, ``StallEnded``) in the run's timeline.
"""
import collections
import statistics
import time
from typing import Callable, NamedTuple, Optional

from .._validate import check_number, invalid

# A stall: no step for max(STALL_FACTOR x the median of the newest STEP_TIMES step times,
# stall_secs); before a session's first step time is known, for FIRST_STEP_STALL x stall_secs.
STALL_FACTOR = 10
STEP_TIMES = 32
FIRST_STEP_STALL = 10


class Stalled(NamedTuple):
    """No step since ``since`` (epoch seconds), at ``step``; raised at ``wall_time``."""
    step: Optional[int]
    since: float
    wall_time: float


class StallEnded(NamedTuple):
    """Steps came again at ``wall_time``, at ``step``, after ``secs`` without one."""
    step: Optional[int]
    secs: float
    wall_time: float


class StallDetector:
    """Watches the steps of one run for a stall. Not thread-safe: its owner holds a lock.

    ``stall_secs``: the shortest time without a step that is a stall (0: stalls are not looked
    for). ``clock`` (seconds, monotonic) times the steps and the idle time; ``wall_clock``
    (epoch seconds) dates the records. Tests inject fake ones.
    """

    def __init__(self, stall_secs: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time):
        check_number("stall_secs", stall_secs)
        if not callable(clock):
            raise TypeError(invalid("clock", clock,
                                    "a callable returning seconds, like time.monotonic"))
        self._stall_secs = float(stall_secs)
        self._clock = clock
        self._wall_clock = wall_clock
        # When the step last rose (clock) and to what, how many rises since the last restart,
        # the newest step times (seconds per step), and the stall raised (None: none).
        self._moved_at: Optional[float] = None
        self._moved_step: Optional[int] = None
        self._moves = 0
        self._step_times: "collections.deque[float]" = collections.deque(maxlen=STEP_TIMES)
        self._stalled: Optional[Stalled] = None

    @property
    def stalled(self) -> Optional[Stalled]:
        """The stall raised and not ended yet, or None."""
        return self._stalled

    def restart(self, step: Optional[int]) -> None:
        """The clock starts again at ``step`` (a session began or rolled back, the run runs
        again): the step times are forgotten, a stall raised is dropped without an end."""
        self._moved_at = self._clock()
        self._moved_step = None if step is None else int(step)
        self._moves = 0
        self._step_times.clear()
        self._stalled = None

    def resume(self) -> None:
        """The run runs again (its status became running): as ``restart`` at the last step
        seen, so that the time spent paused is no stall."""
        self.restart(self._moved_step)

    def clear(self) -> None:
        """Drops the stall raised, without an end (the status changed)."""
        self._stalled = None

    def observe(self, step: int, now: float) -> Optional[StallEnded]:
        """The run is at ``step`` at clock reading ``now``. A step higher than the last one
        feeds the step times and ends a stall: the ``StallEnded`` returned (else None)."""
        if self._moved_step is not None and step <= self._moved_step:
            return None
        if self._moved_step is not None and self._moves and now > self._moved_at:
            self._step_times.append((now - self._moved_at) / (step - self._moved_step))
        if self._moved_step is not None:
            self._moves += 1
        self._moved_at, self._moved_step = now, step
        stalled, self._stalled = self._stalled, None
        if stalled is None:
            return None
        wall = self._wall_clock()
        return StallEnded(step, wall - stalled.since, wall)

    def limit(self) -> Optional[float]:
        """Seconds without a step that make a stall now (None: none is looked for)."""
        if not self._stall_secs:
            return None
        if not self._step_times:
            return FIRST_STEP_STALL * self._stall_secs
        return max(STALL_FACTOR * statistics.median(self._step_times), self._stall_secs)

    def check(self) -> Optional[Stalled]:
        """Raises a stall if no step came for ``limit()`` seconds: the ``Stalled`` returned,
        once per stall (else None)."""
        limit = self.limit()
        if limit is None or self._stalled is not None or self._moved_at is None:
            return None
        idle = self._clock() - self._moved_at
        if idle < limit:
            return None
        wall = self._wall_clock()
        self._stalled = Stalled(self._moved_step, wall - idle, wall)
        return self._stalled
