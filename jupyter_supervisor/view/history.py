"""A thread-safe, bounded record of what one training run reported, for the panel to show.

``RunHistory`` is a Supervisor listener (``on_event``) plus a few setters the run calls
(status, error, output, step). Readers take ``snapshot()``: an immutable view whose ``version``
bumps on every change, so a refresher can tell cheaply whether anything is new (``version`` is
also a property of the history itself, readable without building a snapshot).

Memory stays flat however long the run: each scalar tag keeps at most ``max_points`` buckets.
A bucket holds the last step it covers, the sum and count of its values (so its mean) and their
min and max. While a series fits, every point is its own bucket; when it is full, neighbouring
buckets are merged in pairs and each bucket from then on takes twice as many points. So every
bucket covers about the same number of points, and the min/max envelope of the raw values is
exact at any zoom level.

Restarts are treated as TensorBoard treats them: a point whose step is lower than the last one of
its tag drops the points at and after that step (TensorBoard's out-of-order rule), and a session
restored at step S drops what was recorded after S. ``load_event_files`` reads a logdir's event
files with TensorBoard's own reader and applies its SessionLog.START purge, so the plots of a
resumed run continue from what is on disk.

This module imports no TensorFlow; ``load_event_files`` imports TensorBoard's reader when called
(which may import TensorFlow if it is installed).
"""
import array
import bisect
import collections
import dataclasses
import itertools
import math
import os
import threading
import time
import traceback
import types
from typing import Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from .. import events
from .._validate import check_number, invalid

# The newest checkpoints kept in the history; the panel shows the newest and what the Saver keeps.
MAX_CHECKPOINTS = 64
# The newest records of the run's timeline (sessions, status changes, rollbacks, stops).
MAX_TIMELINE = 64
# Samples of (clock, step) for the step-rate estimate: one per second at most, about 10 s.
_RATE_SAMPLE_SECS = 1.0
_RATE_SAMPLES = 11
# Unique across every series, so that a series replaced by another (event files read at a
# resume) never looks like the one a reader saw.
_GENERATIONS = itertools.count(1)


class ScalarSeries(NamedTuple):
    """One tag's points, oldest first; read-only arrays of equal length.

    ``steps`` is the last global step of each bucket, ``values`` the mean of its values, ``mins``
    and ``maxs`` their envelope (equal to ``values`` where a bucket holds a single point),
    ``walls`` the wall time (epoch seconds) of each bucket's last point. ``generation`` changes
    whenever buckets were merged or dropped, so that a reader who saw the first n buckets of the
    same generation knows that only the buckets from n - 1 on (the last one may have grown) are
    new.
    """
    steps: np.ndarray
    values: np.ndarray
    mins: np.ndarray
    maxs: np.ndarray
    walls: np.ndarray
    generation: int = 0


class StatusChanged(NamedTuple):
    """The run's status became ``status`` at ``wall_time`` (epoch seconds), at ``step``."""
    status: str
    step: Optional[int]
    wall_time: float


@dataclasses.dataclass(frozen=True, eq=False)
class HistorySnapshot:
    """An immutable view of a RunHistory at one moment.

    ``version`` bumps on every change of the history; ``scalars_version`` only when a scalar
    point changed, ``output_total`` when output was appended (it counts every character ever
    appended, so it changes even when the kept tail has the same length).
    Elapsed time counts the time spent in an active status (starting, running, stopping):
    ``active_secs`` before the current active period plus, while active, the time since
    ``active_since`` (both in the history's clock). ``elapsed`` is that sum at ``taken_at``;
    ``elapsed_at(now)`` extends it to a later clock reading without a new snapshot.
    """
    version: int
    status: str
    active: bool
    step: Optional[int]
    steps_per_sec: Optional[float]
    started: float
    active_secs: float
    active_since: Optional[float]
    taken_at: float
    scalars: Mapping[str, ScalarSeries]
    scalars_version: int
    checkpoints: Tuple[events.CheckpointSaved, ...]
    output: str
    output_total: int
    error: str
    waiting_for_chief: bool
    restored_from: Optional[str]
    stop_reason: Optional[str]
    kept: Tuple[str, ...] = ()
    progress: Optional[events.Progress] = None
    ready: bool = False
    rollbacks: Tuple[events.RolledBack, ...] = ()
    restoring: Optional[str] = None
    checkpoint_count: int = 0
    timeline: Tuple[object, ...] = ()

    @property
    def elapsed(self) -> float:
        """Seconds spent active, as of ``taken_at``."""
        return self.elapsed_at(self.taken_at)

    def elapsed_at(self, now: float) -> float:
        """Seconds spent active as of clock reading ``now`` (assuming no change since)."""
        if self.active_since is None:
            return self.active_secs
        return self.active_secs + max(0.0, now - self.active_since)

    @property
    def is_active(self) -> bool:
        """True while the run is active (its status says so: starting, running, stopping)."""
        return self.active


class _Series:
    """The buckets of one tag (see the module docstring); not thread-safe on its own.

    Kept in ``array.array``s: compact like numpy arrays, but appending and updating one item
    from Python is several times faster, and this runs for every summary of a long run.
    """

    def __init__(self, max_points: int):
        self._max_points = max_points
        self._last = array.array("q")    # last step of each bucket, non-decreasing
        self._sum = array.array("d")     # sum of its values
        self._min = array.array("d")     # envelope (NaNs take no part: +inf/-inf if only NaNs)
        self._max = array.array("d")
        self._count = array.array("q")   # how many points it holds
        self._wall = array.array("d")    # wall time of its last point
        self._width = 1                  # points a bucket takes before the next one opens
        self._generation = next(_GENERATIONS)  # a new one when buckets are merged or dropped
        self._frozen: Optional[ScalarSeries] = None  # read-only copy of the current state

    def __len__(self) -> int:
        return len(self._last)

    @property
    def first_step(self) -> Optional[int]:
        return self._last[0] if self._last else None

    @property
    def last_step(self) -> Optional[int]:
        return self._last[-1] if self._last else None

    @property
    def last_value(self) -> Optional[float]:
        return self._sum[-1] / self._count[-1] if self._last else None

    def drop_last(self) -> None:
        """Drops the newest bucket."""
        self._truncate(len(self._last) - 1)

    def add(self, step: int, value: float, wall: float) -> None:
        """Adds one point; a step lower than the last one first drops the points from it on."""
        if value != value:  # NaN: it counts, but takes no part in the envelope
            self._add_bucket(step, value, math.inf, -math.inf, 1, wall)
        else:
            self._add_bucket(step, value, value, value, 1, wall)

    def _add_bucket(self, step: int, total: float, lo: float, hi: float, count: int,
                    wall: float) -> None:
        last = self._last
        if last and step < last[-1]:
            self.drop_from(step)
        self._frozen = None
        if last and self._count[-1] < self._width:
            last[-1] = step
            self._sum[-1] += total
            if lo < self._min[-1]:
                self._min[-1] = lo
            if hi > self._max[-1]:
                self._max[-1] = hi
            self._count[-1] += count
            self._wall[-1] = wall
            return
        if len(last) >= self._max_points:
            self._merge_pairs()
            last = self._last
        last.append(step)
        self._sum.append(total)
        self._min.append(lo)
        self._max.append(hi)
        self._count.append(count)
        self._wall.append(wall)

    def _merge_pairs(self) -> None:
        # Called when full: max_points is even, so every bucket has a partner.
        def merged(column, combine, typecode):
            values = np.array(column)
            out = array.array(typecode)
            out.frombytes(combine(values[0::2], values[1::2]).astype(values.dtype).tobytes())
            return out

        self._last = merged(self._last, lambda a, b: b, "q")
        self._sum = merged(self._sum, np.add, "d")
        self._min = merged(self._min, np.minimum, "d")
        self._max = merged(self._max, np.maximum, "d")
        self._count = merged(self._count, np.add, "q")
        self._wall = merged(self._wall, lambda a, b: b, "d")
        self._width *= 2
        self._generation = next(_GENERATIONS)

    def drop_from(self, step: int) -> bool:
        """Drops every bucket that reaches ``step`` or beyond; True if any was dropped.

        A merged bucket that straddles ``step`` goes too: a point recorded after a restart's
        step is never shown, at the cost of at most one bucket of older points.
        """
        return self._truncate(bisect.bisect_left(self._last, step))

    def _truncate(self, keep: int) -> bool:
        if keep >= len(self._last):
            return False
        for column in (self._last, self._sum, self._min, self._max, self._count, self._wall):
            del column[keep:]
        self._frozen = None
        self._generation = next(_GENERATIONS)
        return True

    def extend(self, other: "_Series") -> None:
        """Appends ``other``'s buckets (all later than this series' last step)."""
        # pylint: disable=protected-access
        for bucket in zip(other._last, other._sum, other._min, other._max, other._count,
                          other._wall):
            self._add_bucket(*bucket)

    def frozen(self) -> ScalarSeries:
        """The series as read-only numpy arrays (computed once per change)."""
        if self._frozen is None:
            values = np.array(self._sum) / np.array(self._count)
            mins = np.array(self._min)
            maxs = np.array(self._max)
            # A bucket of NaNs only has no envelope: show its (NaN) mean, a gap in the plot.
            empty = mins > maxs
            mins[empty] = values[empty]
            maxs[empty] = values[empty]
            arrays = [np.array(self._last, dtype=np.int64), values, mins, maxs,
                      np.array(self._wall, dtype=np.float64)]
            for column in arrays:
                column.setflags(write=False)
            self._frozen = ScalarSeries(*arrays, generation=self._generation)
        return self._frozen


def _check_int(name: str, value, minimum: int) -> int:
    check_number(name, value, integer=True, minimum=minimum)
    return int(value)


def _format_error(error: BaseException) -> str:
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


class RunHistory:
    """What one run reported: status, step, rate, scalars, checkpoints, output, error.

    Every method may be called from any thread. Scalar series keep at most ``max_points``
    buckets each (older points merged, with their min/max envelope); the output keeps its last
    ``max_output_chars`` characters. ``clock`` (seconds, monotonic) times the elapsed time and
    the step rate; tests inject a fake one.
    """

    def __init__(self, max_points: int = 2000, max_output_chars: int = 200_000,
                 clock: Callable[[], float] = time.monotonic,
                 format_error: Callable[[BaseException], str] = _format_error,
                 wall_clock: Callable[[], float] = time.time):
        max_points = _check_int("max_points", max_points, 4)
        if max_points % 2:
            raise ValueError(invalid("max_points", max_points,
                                     "an even integer >= 4 (old points are merged in pairs)"))
        self._max_points = max_points
        self._max_output_chars = _check_int("max_output_chars", max_output_chars, 0)
        if not callable(clock):
            raise TypeError(invalid("clock", clock,
                                    "a callable returning seconds, like time.monotonic"))
        self._clock = clock
        self._wall_clock = wall_clock
        self._format_error = format_error
        # One lock protects every field below; nothing slow (file reading, formatting of
        # snapshots beyond copies) happens while it is held.
        self._lock = threading.Lock()
        self._version = 0
        self._scalars_version = 0
        self._status = "starting"
        self._active = True
        self._stepping = True
        self._step: Optional[int] = None
        self._steps_per_sec: Optional[float] = None
        self._rate_samples: "collections.deque[Tuple[float, int]]" = collections.deque(
            maxlen=_RATE_SAMPLES)
        self._started = clock()
        self._active_secs = 0.0
        self._active_since: Optional[float] = self._started
        self._series: Dict[str, _Series] = {}
        self._checkpoints: "collections.deque[events.CheckpointSaved]" = collections.deque(
            maxlen=MAX_CHECKPOINTS)
        self._checkpoint_count = 0           # written in this run, all sessions
        self._timeline: "collections.deque[object]" = collections.deque(maxlen=MAX_TIMELINE)
        self._restoring: Optional[str] = None  # the checkpoint the next session restores
        self._output_chunks: "collections.deque[str]" = collections.deque()
        self._output_len = 0         # characters in _output_chunks
        self._output_total = 0       # characters ever appended
        self._output_joined: Optional[str] = None
        self._error = ""
        self._failure: Optional[BaseException] = None   # the exception _error shows
        self._waiting_for_chief = False
        self._restored_from: Optional[str] = None
        self._kept: Tuple[str, ...] = ()     # what retention keeps, newest first
        self._progress: Optional[events.Progress] = None
        self._ready = False                  # the current session restored or initialized
        self._rate_records = 0               # StepRate records since the session started
        self._rate_tags: set = set()         # the tags StepRate records were plotted under
        self._session_step: Optional[int] = None  # the step the current session started at
        self._stop_reason: Optional[str] = None
        self._rollbacks: "collections.deque[events.RolledBack]" = collections.deque(
            maxlen=MAX_CHECKPOINTS)

    @property
    def max_points(self) -> int:
        """The most buckets any scalar series keeps."""
        return self._max_points

    @property
    def version(self) -> int:
        """Bumps on every change; cheap to read (no snapshot is built)."""
        return self._version

    # -- writers ---------------------------------------------------------------------------

    def on_event(self, event) -> None:
        """Records one events.py record (a Supervisor listener); other objects are ignored."""
        with self._lock:
            if isinstance(event, events.SummaryWritten):
                self._on_summary(event)
            elif isinstance(event, events.StepRate):
                self._on_step_rate(event)
            elif isinstance(event, events.CheckpointSaved):
                self._note_step(event.step)
                self._checkpoints.appendleft(event)
                self._checkpoint_count += 1
                if event.kept:
                    self._kept = tuple(str(path) for path in event.kept)
            elif isinstance(event, events.SessionReady):
                self._on_session_ready(event)
            elif isinstance(event, events.WaitingForChief):
                self._waiting_for_chief = True
            elif isinstance(event, events.Progress):
                self._on_progress(event)
            elif isinstance(event, events.RolledBack):
                self._on_rolled_back(event)
            elif isinstance(event, events.Stopped):
                self._drop_rate_of_the_stop(event.step)
                self._note_step(event.step)
                self._stop_reason = event.reason
                self._timeline.append(event)
                if event.exception is not None and not self._error:
                    self._set_failure(event.exception)
            else:
                return  # a record this history does not show (a newer events.py)
            self._version += 1

    def _on_summary(self, event) -> None:
        step = event.step if event.step is not None else (self._step or 0)
        step = int(step)
        for tag, value in event.scalars.items():
            series = self._series_of(tag)
            series.add(step, float(value), float(event.wall_time))
        if event.scalars:
            self._scalars_version += 1
        self._note_step(event.step)

    def _on_step_rate(self, event) -> None:
        # A plotted series, like the event file's; the header's steps/s is the history's own
        # estimate (one estimator, also without summaries). The step counter's first record
        # after a start measures no interval (TensorFlow writes it too), one taken before the
        # first step measures the start-up (tracing, restoring) and one taken while the run
        # stops measures the stop: none is plotted.
        self._note_step(event.step)
        started_at = self._session_step
        if (not self._rate_records or not self._stepping
                or (started_at is not None and event.step <= started_at)):
            self._rate_records = 1
            return
        self._rate_tags.add(event.tag)
        self._series_of(event.tag).add(int(event.step), float(event.steps_per_sec),
                                       float(event.wall_time))
        self._scalars_version += 1

    def _drop_rate_of_the_stop(self, step) -> None:
        # The step counter's last record may measure the final checkpoint being written, after
        # the last step: a 0 at the final step that no training produced.
        for tag in self._rate_tags:
            series = self._series.get(tag)
            while series is not None and series.last_step == step and series.last_value == 0:
                series.drop_last()
                self._scalars_version += 1

    def _on_session_ready(self, event) -> None:
        self._ready = True
        self._restoring = None
        self._timeline.append(event)
        self._waiting_for_chief = False
        self._rate_records = 0
        self._session_step = None if event.step is None else int(event.step)
        self._restored_from = event.restored_from
        self._rollbacks.clear()  # counted per session
        self._stop_reason = None
        self._rate_samples.clear()
        self._steps_per_sec = None
        if event.step is None:
            return
        self._restart_at(int(event.step))
        self._rate_samples.append((self._clock(), self._step))

    def _on_progress(self, event) -> None:
        # The eager backend's live view, a few times a second: where fit is, and the loop's
        # latest scalars, plotted at their step (the event file holds them at each summary).
        self._progress = event
        step = int(event.step)
        for tag, value in event.scalars.items():
            series = self._series_of(tag)
            if series.last_step != step:
                series.add(step, float(value), float(event.wall_time))
        if event.scalars:
            self._scalars_version += 1
        self._note_step(step)

    def _on_rolled_back(self, event) -> None:
        self._rollbacks.append(event)
        self._timeline.append(event)
        if event.restored_step is None:
            return
        # As a restart from that checkpoint (TensorBoard drops the diverged points too, at the
        # SessionLog.START the Supervisor writes).
        self._restart_at(int(event.restored_step))
        self._rate_samples.clear()

    def _restart_at(self, step: int) -> None:
        # Training starts (again) at `step`: what was recorded at or after it belongs to a
        # timeline that the restore discarded (TensorBoard purges from the START step on, and
        # the new session records `step` again).
        self._step = step
        dropped = False
        for series in self._series.values():
            dropped |= series.drop_from(step)
        if dropped:
            self._scalars_version += 1

    def _series_of(self, tag: str) -> "_Series":
        series = self._series.get(tag)
        if series is None:
            series = self._series[tag] = _Series(self._max_points)
        return series

    def _note_step(self, step) -> None:
        # Events arrive late (queued on the hub); a later note_step may already be ahead, so
        # the step only moves forward here. A restore moves it back through SessionReady.
        if step is None:
            return
        step = int(step)
        if self._step is None or step > self._step:
            self._step = step
        now = self._clock()
        samples = self._rate_samples
        if samples and now - samples[-1][0] < _RATE_SAMPLE_SECS:
            return
        samples.append((now, self._step))
        if len(samples) >= 2 and samples[-1][0] > samples[0][0]:
            rate = (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
            if rate >= 0:
                self._steps_per_sec = rate

    def note_step(self, step: int) -> None:
        """Records the last known global step (also feeds the steps/sec estimate)."""
        step = _check_int("step", step, 0)
        with self._lock:
            before = (self._step, self._steps_per_sec)
            self._note_step(step)
            if (self._step, self._steps_per_sec) != before:
                self._version += 1

    def set_status(self, status: str, *, active: bool, new_session: bool = False,
                   stepping: Optional[bool] = None) -> None:
        """Sets the run's status (the run's vocabulary: any non-empty name). ``active``: the run
        is working (its elapsed time counts); ``new_session``: a session starts, not restored
        or initialized yet; ``stepping`` (default: ``active``): training steps, so a step rate
        measures training (one measured while a stop is written would be a made-up drop).
        Each change goes into the timeline."""
        if not isinstance(status, str) or not status:
            raise ValueError(invalid("status", status, "a non-empty str"))
        with self._lock:
            if status == self._status and not new_session:
                return
            now = self._clock()
            if self._active and not active:
                self._active_secs += max(0.0, now - self._active_since)
                self._active_since = None
            elif active and not self._active:
                self._active_since = now
            if new_session:
                self._ready = False
                self._restored_from = None
                self._progress = None
            self._rate_samples.clear()  # a new period starts a new estimate
            self._steps_per_sec = None
            self._status = status
            self._active = bool(active)
            self._stepping = bool(active if stepping is None else stepping)
            self._timeline.append(StatusChanged(status, self._step, self._wall_clock()))
            self._version += 1

    def set_restoring(self, path: Optional[str]) -> None:
        """The checkpoint the starting session is about to restore (None: none)."""
        with self._lock:
            if path != self._restoring:
                self._restoring = path
                self._version += 1

    def _set_failure(self, error: BaseException) -> None:
        if error is not self._failure:  # each failure is formatted once
            self._failure = error
            self._error = self._format_error(error)

    def set_failure(self, error: BaseException) -> None:
        """Records the exception that failed the run, once it reached the run's end; the error
        shown is its formatted form (the ``format_error`` the history was made with). A Stopped
        record may have shown it already, formatted while it was still on its way: formatted
        again here, with its whole traceback."""
        with self._lock:
            before = self._error
            self._failure = None
            self._set_failure(error)
            if self._error != before:
                self._version += 1

    def set_error(self, text: str) -> None:
        """Records the error to show (a formatted traceback); '' clears it."""
        if not isinstance(text, str):
            raise TypeError(invalid("text", text, "a str (a formatted traceback)"))
        with self._lock:
            self._failure = None
            if text != self._error:
                self._error = text
                self._version += 1

    def append_output(self, text: str) -> None:
        """Appends what the cell body printed; only the last ``max_output_chars`` are kept."""
        if not isinstance(text, str):
            raise TypeError(invalid("text", text, "a str"))
        if not text:
            return
        limit = self._max_output_chars
        with self._lock:
            self._output_total += len(text)
            self._version += 1
            if not limit:
                return
            self._output_joined = None
            chunks = self._output_chunks
            if len(text) >= limit:
                chunks.clear()
                self._output_len = 0
                text = text[len(text) - limit:]
            chunks.append(text)
            self._output_len += len(text)
            # Whole chunks first (cheap), then the head of the oldest one.
            while self._output_len - len(chunks[0]) >= limit:
                self._output_len -= len(chunks.popleft())
            excess = self._output_len - limit
            if excess > 0:
                chunks[0] = chunks[0][excess:]
                self._output_len -= excess

    # -- readers ---------------------------------------------------------------------------

    @property
    def step(self) -> Optional[int]:
        """The last known global step (cheap: no snapshot is built)."""
        return self._step

    @property
    def error(self) -> str:
        """The error shown for the run ('' when there is none)."""
        return self._error

    @property
    def restored_from(self) -> Optional[str]:
        """The checkpoint the current session was restored from, or None."""
        return self._restored_from

    def snapshot(self) -> HistorySnapshot:
        """An immutable view of everything recorded so far."""
        with self._lock:
            if self._output_joined is None:
                self._output_joined = "".join(self._output_chunks)
            return HistorySnapshot(
                version=self._version,
                status=self._status,
                active=self._active,
                step=self._step,
                steps_per_sec=self._steps_per_sec,
                started=self._started,
                active_secs=self._active_secs,
                active_since=self._active_since,
                taken_at=self._clock(),
                scalars=types.MappingProxyType(
                    {tag: series.frozen() for tag, series in sorted(self._series.items())
                     if len(series)}),
                scalars_version=self._scalars_version,
                checkpoints=tuple(self._checkpoints),
                output=self._output_joined,
                output_total=self._output_total,
                error=self._error,
                waiting_for_chief=self._waiting_for_chief,
                restored_from=self._restored_from,
                stop_reason=self._stop_reason,
                kept=self._kept,
                progress=self._progress,
                ready=self._ready,
                rollbacks=tuple(self._rollbacks),
                restoring=self._restoring,
                checkpoint_count=self._checkpoint_count,
                timeline=tuple(self._timeline),
            )

    # -- earlier runs from disk --------------------------------------------------------------

    def load_event_files(self, logdir: str, upto_step: Optional[int]) -> None:
        """Adds the scalars of the event files in ``logdir`` (as TensorBoard reads them).

        Reads with TensorBoard's reader (``directory_watcher`` over ``event_file_loader``),
        applies TensorBoard's purge of orphaned events (a SessionLog.START at step S drops the
        events seen before it with step >= S; files without that version fall back to
        TensorBoard's out-of-order rule), and keeps the points with step <= ``upto_step``
        (all of them when None). For each tag, only points older than the first point already
        recorded are added, so live summaries are never doubled. A missing ``logdir`` adds
        nothing. Reading happens without holding the lock.
        """
        if not isinstance(logdir, (str, os.PathLike)) or not os.fspath(logdir):
            raise ValueError(invalid("logdir", logdir,
                                     "the path of a directory with event files"))
        if upto_step is not None:
            upto_step = _check_int("upto_step", upto_step, 0)
        logdir = os.fspath(logdir)
        if not os.path.isdir(logdir):
            return
        loaded = _read_scalars(logdir, upto_step, self._max_points)
        if not loaded:
            return
        with self._lock:
            for tag, series in loaded.items():
                live = self._series.get(tag)
                if live is not None and len(live):
                    series.drop_from(live.first_step)
                    series.extend(live)
                self._series[tag] = series
            self._scalars_version += 1
            self._version += 1


# -- reading event files (TensorBoard's reader) --------------------------------------------


def _tensorboard_reader():
    try:
        # pylint: disable=import-outside-toplevel
        from tensorboard.backend.event_processing import directory_watcher
        from tensorboard.backend.event_processing import event_file_loader
        from tensorboard.backend.event_processing import io_wrapper
        from tensorboard.compat.proto import event_pb2
        from tensorboard.util import tensor_util
    except ImportError as error:
        raise ImportError(
            "Reading earlier summaries from the logdir needs TensorBoard's event reader: "
            "pip install tensorboard") from error
    return types.SimpleNamespace(
        directory_watcher=directory_watcher, event_file_loader=event_file_loader,
        io_wrapper=io_wrapper, event_pb2=event_pb2, tensor_util=tensor_util)


def _events(tb, logdir: str) -> Iterator:
    """Every event of every event file in ``logdir``, in TensorBoard's order."""
    watcher = tb.directory_watcher.DirectoryWatcher(
        logdir, tb.event_file_loader.LegacyEventFileLoader, tb.io_wrapper.IsSummaryEventsFile)
    return watcher.Load()


def _file_version(text: str) -> float:
    # "brain.Event:2" -> 2.0; TensorBoard treats unparsable versions like old ones.
    try:
        return float(text.rsplit(":", 1)[-1])
    except ValueError:
        return -1.0


class _Restarts:
    """Where SessionLog.START purges cut, found in a first pass over the events.

    TensorBoard drops, at a START at step S, every event seen before it with step >= S. So an
    event at position i survives iff its step is below ``cut(i)``: the lowest step of the
    STARTs after it. The stack holds (position, step) with rising positions and rising steps
    (a START makes every earlier one with a step at or above its own redundant), and the second
    pass visits positions in order, so it is walked once.
    """

    def __init__(self):
        self._stack: List[Tuple[int, int]] = []
        self._index = 0

    def add(self, position: int, step: int) -> None:
        stack = self._stack
        while stack and stack[-1][1] >= step:
            stack.pop()
        stack.append((position, step))

    def cut(self, position: int) -> float:
        stack, i = self._stack, self._index
        while i < len(stack) and stack[i][0] <= position:
            i += 1
        self._index = i
        return stack[i][1] if i < len(stack) else math.inf


# The tag of a step counter's records ("global_step/sec", TensorFlow's "<step op>/sec").
RATE_SUFFIX = "/sec"


def _read_scalars(logdir: str, upto_step: Optional[int], max_points: int) -> Dict[str, _Series]:
    tb = _tensorboard_reader()
    start = tb.event_pb2.SessionLog.START
    # First pass: where TensorBoard purges (EventAccumulator._MaybePurgeOrphanedData). Files
    # older than version 2 have no START; TensorBoard drops, per tag, the points a lower step
    # supersedes, which is what _Series.add does with every point anyway.
    restarts = _Restarts()
    file_version = None
    for position, event in enumerate(_events(tb, logdir)):
        if event.HasField("file_version"):
            file_version = _file_version(event.file_version)
        if (file_version is not None and file_version >= 2 and event.HasField("session_log")
                and event.session_log.status == start):
            restarts.add(position, event.step)
    # Second pass: the points no later START purges.
    # A step counter's first record after a START measured no interval, and one taken at the
    # session's first step the start-up (tracing, restoring), not training: skipped, as the
    # live history skips them (_on_step_rate).
    limit = math.inf if upto_step is None else upto_step
    series: Dict[str, _Series] = {}
    rates_since_start: set = set()
    started_at = -1
    for position, event in enumerate(_events(tb, logdir)):
        if event.HasField("session_log") and event.session_log.status == start:
            rates_since_start.clear()
            started_at = event.step
        if (not event.HasField("summary") or event.step > limit
                or event.step >= restarts.cut(position)):
            continue
        for tag, value in events.scalar_values(event.summary, tb.tensor_util.make_ndarray):
            if tag.endswith(RATE_SUFFIX) and (tag not in rates_since_start
                                              or event.step <= started_at):
                rates_since_start.add(tag)
                continue
            target = series.get(tag)
            if target is None:
                target = series[tag] = _Series(max_points)
            target.add(int(event.step), value, float(event.wall_time))
    return series
