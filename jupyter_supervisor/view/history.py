"""A thread-safe, bounded record of what one training run reported, for the panel to show.

``RunHistory`` is a Supervisor listener (``on_event``) plus a few setters the run calls
(status, error, output, step); what the run printed and displayed is its ``outputs`` (an
``output_area.OutputLog``). Readers take ``snapshot()``: an immutable view whose ``version``
bumps on every change, so a refresher can tell cheaply whether anything is new (``version`` is
also a property of the history itself, readable without building a snapshot). Whoever must act
at a change of status (the panel: its refresher lives while the run does, and a run's end is
shown in full before the run reports it) ``watch``es it.

Memory stays flat however long the run: each scalar tag keeps at most ``max_points`` buckets
(``series.Series``, with their min/max envelope).

Restarts are treated as TensorBoard treats them: a point whose step is lower than the last one of
its tag drops the points at and after that step, and a session that records from step S (its
SessionLog.START) drops what earlier sessions recorded from S on. ``load_event_files`` adds the
scalars of the logdir's event files (``eventfiles``), so the plots of a resumed run continue
from what is on disk: the curves are drawn from the records the event files hold (summaries and
step rates), so a history reloaded after a restart has the points the live one had.

The step the header shows moves with the records that say where training is: on the eager
backend its Progress records, which give fit's epoch and batch at the same step, so the two
never contradict each other; elsewhere every record and ``note_step``. The highest step the
run reached is kept apart (``reached``), so that a session resumed from an older checkpoint
says how many steps were lost.

A stall (``stall_secs``): while the run is running, no step for max(10 x the recent median
step time, ``stall_secs``) (before the session's first step time is known, for
``stall.FIRST_STEP_STALL`` x ``stall_secs``: the first step traces the model and reads the first
batch); ``stall.StallDetector`` decides it. ``note_step``, which the run calls every half second
while its body runs, notices it; the timeline records when it was raised and when the steps
came again.
"""
import collections
import dataclasses
import logging
import os
import threading
import time
import traceback
import types
from typing import Callable, Dict, Mapping, NamedTuple, Optional, Tuple

from .. import events, names, preemption
from .._validate import check_number, invalid
from . import eventfiles
from .output_area import OutputLog
from .series import RawTail, ScalarSeries, Series
from .stall import StallDetector, StallEnded, Stalled

logger = logging.getLogger("jupyter_supervisor")

# The newest checkpoints kept in the history; the panel shows the newest and what the Saver keeps.
MAX_CHECKPOINTS = 64
# The newest records of the run's timeline (sessions, status changes, rollbacks, stops).
MAX_TIMELINE = 64
# Samples of (clock, step) for the step-rate estimate: one per second at most, about 10 s.
_RATE_SAMPLE_SECS = 1.0
_RATE_SAMPLES = 11


class StatusChanged(NamedTuple):
    """The run's status became ``status`` at ``wall_time`` (epoch seconds), at ``step``."""
    status: str
    step: Optional[int]
    wall_time: float


class SessionStarted(NamedTuple):
    """A session is ready at ``step``: restored from ``restored_from`` (None: initialized).
    ``lost``: how many steps the run had recorded past ``step`` before (the steps a restore
    from an older checkpoint trains again), or None."""
    step: Optional[int]
    restored_from: Optional[str]
    lost: Optional[int]
    wall_time: float


def shown_in_timeline(record) -> bool:
    """Whether ``record`` is an event of the run's timeline, a line of its own where it is
    shown (``text.timeline``): a session that began, a stall and its end, a rollback, the input
    running out, a stop asked for and each way a session ended. Not: the statuses the next
    record says more of (starting, running), a session's other ends (its status says them)."""
    if isinstance(record, StatusChanged):
        return record.status in (names.STOPPING, names.FINISHED, names.FAILED, names.STOPPED)
    if isinstance(record, events.Stopped):  # and a stop on a preemption notice (its line)
        return record.reason == events.OUT_OF_RANGE or preemption.is_notice(record.why)
    return isinstance(record, (SessionStarted, Stalled, StallEnded, events.RolledBack))


@dataclasses.dataclass(frozen=True, eq=False)
class HistorySnapshot:
    """An immutable view of a RunHistory at one moment.

    ``version`` bumps on every change of the history, its outputs included; ``scalars_version``
    only when a scalar point changed. ``output`` is the outputs' text form (``OutputLog.text``).
    Elapsed time counts the time spent in an active status (starting, running, stopping):
    ``active_secs`` before the current active period plus, while active, the time since
    ``active_since`` (both in the history's clock). ``elapsed`` is that sum at ``taken_at``;
    ``elapsed_at(now)`` extends it to a later clock reading without a new snapshot.
    ``timeline``: the run's first event and its newest records (``MAX_TIMELINE``);
    ``events_dropped``: how many events (``shown_in_timeline``) were let go of between them.
    """
    version: int
    status: str
    active: bool
    step: Optional[int]
    steps_per_sec: Optional[float]
    active_secs: float
    active_since: Optional[float]
    taken_at: float
    scalars: Mapping[str, ScalarSeries]
    scalars_version: int
    checkpoints: Tuple[events.CheckpointSaved, ...]
    output: str
    error: str
    waiting_for_chief: bool
    restored_from: Optional[str]
    kept: Tuple[str, ...] = ()
    progress: Optional[events.Progress] = None
    ready: bool = False
    rollbacks: Tuple[events.RolledBack, ...] = ()
    restoring: Optional[str] = None
    checkpoint_count: int = 0
    timeline: Tuple[object, ...] = ()
    stalled: Optional[Stalled] = None
    best: Optional[events.BestKept] = None
    write_stalled: Optional[events.WriteStalled] = None
    events_dropped: int = 0

    @property
    def elapsed(self) -> float:
        """Seconds spent active, as of ``taken_at``."""
        return self.elapsed_at(self.taken_at)

    def elapsed_at(self, now: float) -> float:
        """Seconds spent active as of clock reading ``now`` (assuming no change since)."""
        if self.active_since is None:
            return self.active_secs
        return self.active_secs + max(0.0, now - self.active_since)


def _check_int(name: str, value, minimum: int) -> int:
    check_number(name, value, integer=True, minimum=minimum)
    return int(value)


def _format_error(error: BaseException) -> str:
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


class RunHistory:
    """What one run reported: status, step, rate, scalars, checkpoints, output, error.

    Every method may be called from any thread. Scalar series keep at most ``max_points``
    buckets each (older points merged, with their min/max envelope); ``outputs`` keeps the last
    ``max_output_chars`` characters of text, carriage-return frames collapsed. ``clock``
    (seconds, monotonic) times the elapsed time, the step rate and stalls; tests inject a fake
    one (and a ``wall_clock``). ``stall_secs``: the shortest time without a step that is a stall
    (0: stalls are not looked for).
    """

    def __init__(self, max_points: int = 2000, max_output_chars: int = 200_000,
                 clock: Callable[[], float] = time.monotonic,
                 format_error: Callable[[BaseException], str] = _format_error,
                 wall_clock: Callable[[], float] = time.time, stall_secs: float = 30.0):
        max_points = _check_int("max_points", max_points, 4)
        if max_points % 2:
            raise ValueError(invalid("max_points", max_points,
                                     "an even integer >= 4 (old points are merged in pairs)"))
        self._max_points = max_points
        max_output_chars = _check_int("max_output_chars", max_output_chars, 0)
        # The detector checks stall_secs, then the clock (its clock is the history's).
        self._stall = StallDetector(stall_secs, clock, wall_clock)
        self._clock = clock
        self._wall_clock = wall_clock
        self._format_error = format_error
        # One lock protects every field below; nothing slow (file reading, formatting of
        # snapshots beyond copies) happens while it is held.
        self._lock = threading.Lock()
        self._version = 0
        self._scalars_version = 0
        self._status = names.STARTING
        self._active = True
        self._step: Optional[int] = None     # the step the header shows
        self._reached: Optional[int] = None  # the highest step recorded since the session began
        self._positioned = False             # the session reports Progress: it moves _step
        self._steps_per_sec: Optional[float] = None
        self._rate_samples: "collections.deque[Tuple[float, int]]" = collections.deque(
            maxlen=_RATE_SAMPLES)
        self._active_secs = 0.0
        self._active_since: Optional[float] = clock()
        self._series: Dict[str, Series] = {}
        self._checkpoints: "collections.deque[events.CheckpointSaved]" = collections.deque(
            maxlen=MAX_CHECKPOINTS)
        self._checkpoint_count = 0           # written in this run, all sessions
        self._timeline: "collections.deque[object]" = collections.deque(maxlen=MAX_TIMELINE)
        self._first_event: Optional[object] = None   # the first event shown, kept for good
        self._first_dropped = False                  # ... and no longer in _timeline
        self._events_dropped = 0   # events shown that _timeline let go of, the first aside
        self._restoring: Optional[str] = None  # the checkpoint the next session restores
        self.outputs = OutputLog(max_chars=max_output_chars)
        self._error = ""
        self._failure: Optional[BaseException] = None   # the exception _error shows
        self._waiting_for_chief = False
        self._restored_from: Optional[str] = None
        self._kept: Tuple[str, ...] = ()     # what retention keeps, newest first
        self._progress: Optional[events.Progress] = None
        self._ready = False                  # the current session restored or initialized
        # The step from which the current session records: a step rate at or before it
        # measured the start-up, not training.
        self._records_from: Optional[int] = None
        self._rollbacks: "collections.deque[events.RolledBack]" = collections.deque(
            maxlen=MAX_CHECKPOINTS)
        self._watchers: Tuple[Callable[[str], None], ...] = ()
        self._best: Optional[events.BestKept] = None   # the best checkpoint kept, if any
        # A checkpoint write that stalled, until a checkpoint is saved or a session begins.
        self._write_stalled: Optional[events.WriteStalled] = None

    @property
    def max_points(self) -> int:
        """The most buckets any scalar series keeps."""
        return self._max_points

    @property
    def version(self) -> int:
        """Bumps on every change; cheap to read (no snapshot is built)."""
        return self._version + self.outputs.version

    # -- writers ---------------------------------------------------------------------------

    def on_event(self, event) -> None:
        """Records one events.py record (a Supervisor listener); other objects are ignored."""
        with self._lock:
            if isinstance(event, events.SummaryWritten):
                self._on_summary(event)
            elif isinstance(event, events.StepRate):
                self._on_step_rate(event)
            elif isinstance(event, events.CheckpointSaved):
                self._note_step(event.step, header=not self._positioned)
                self._checkpoints.appendleft(event)
                self._checkpoint_count += 1
                self._write_stalled = None
                if event.kept:
                    self._kept = tuple(str(path) for path in event.kept)
            elif isinstance(event, events.BestKept):
                self._best = event
            elif isinstance(event, events.WriteStalled):
                self._write_stalled = event
            elif isinstance(event, events.SessionReady):
                self._write_stalled = None
                self._on_session_ready(event)
            elif isinstance(event, events.WaitingForChief):
                self._waiting_for_chief = True
            elif isinstance(event, events.Progress):
                self._on_progress(event)
            elif isinstance(event, events.RolledBack):
                self._on_rolled_back(event)
            elif isinstance(event, events.Stopped):
                self._note_step(event.step)
                self._record(event)
                self.outputs.end_line()
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
        self._note_step(event.step, header=not self._positioned)

    def _on_step_rate(self, event) -> None:
        # A plotted series, like the event file's; the header's steps/s is the history's own
        # estimate (one estimator, also without summaries). A record at or before the step the
        # session records from measured the start-up (TensorFlow's step counter writes one as
        # it starts): not plotted, as eventfiles.read_scalars skips it.
        self._note_step(event.step, header=not self._positioned)
        if self._records_from is not None and event.step <= self._records_from:
            return
        self._series_of(event.tag).add(int(event.step), float(event.steps_per_sec),
                                       float(event.wall_time))
        self._scalars_version += 1

    def _on_session_ready(self, event) -> None:
        self._ready = True
        self._restoring = None
        lost = None
        if event.restored_from and event.step is not None and self._reached is not None \
                and self._reached > event.step:
            lost = self._reached - int(event.step)
        self._record(SessionStarted(event.step, event.restored_from, lost,
                                             event.wall_time))
        self._waiting_for_chief = False
        self._records_from = (None if event.step is None
                              else int(event.step) + events.START_AFTER)
        self._restored_from = event.restored_from
        self._best = None  # a session that restored one says so next (BestKept)
        self._rollbacks.clear()  # counted per session
        self._rate_samples.clear()
        self._steps_per_sec = None
        self._positioned = False
        self._reached = None
        self._stall.restart(event.step)
        if event.step is None:
            return
        self._restart_at(int(event.step), self._records_from)
        self._rate_samples.append((self._clock(), self._step))

    def _on_progress(self, event) -> None:
        # The eager backend's live view, a few times a second: the step and where fit is at
        # that step. From the first one on, the header's step moves with them only (a
        # checkpoint or a summary of a later step would run ahead of fit's position).
        self._progress = event
        self._positioned = True
        self._note_step(event.step)
        self._step = int(event.step)

    def _on_rolled_back(self, event) -> None:
        self._rollbacks.append(event)
        self._record(event)
        if event.restored_step is None:
            return
        # As a restart from that checkpoint (TensorBoard drops the diverged points too, at the
        # SessionLog.START the Supervisor writes). Fit's position went on (its data is not
        # replayed): none is shown until the next Progress says it.
        self._progress = None
        self._restart_at(int(event.restored_step),
                         int(event.restored_step) + events.START_AFTER)
        self._rate_samples.clear()
        self._stall.restart(event.restored_step)

    def _restart_at(self, step: int, purge_from: Optional[int]) -> None:
        # Training starts (again) at `step`, recording from `purge_from`: what was recorded
        # from there on belongs to a timeline that the restore discarded (TensorBoard purges
        # from the START step on).
        self._step = step
        if purge_from is None:
            return
        dropped = False
        for series in self._series.values():
            dropped |= series.drop_from(purge_from)
        if dropped:
            self._scalars_version += 1

    def _record(self, record) -> None:
        # Under the lock. The timeline is bounded: the first event stays (where the run began),
        # and the events it lets go of are counted, so that a reader says how many it folds.
        timeline = self._timeline
        if self._first_event is None and shown_in_timeline(record):
            self._first_event = record
        if len(timeline) == timeline.maxlen:
            gone = timeline[0]
            if gone is self._first_event:
                self._first_dropped = True
            elif shown_in_timeline(gone):
                self._events_dropped += 1
        timeline.append(record)

    def _series_of(self, tag: str) -> "Series":
        series = self._series.get(tag)
        if series is None:
            series = self._series[tag] = Series(self._max_points)
        return series

    def _note_step(self, step, header: bool = True) -> None:
        # Events arrive late (queued on the hub); a later note_step may already be ahead, so
        # the step only moves forward here. A restore moves it back through SessionReady.
        # `header`: the header's step moves too (else only what the run reached).
        if step is None:
            return
        step = int(step)
        now = self._clock()
        if self._reached is None or step > self._reached:
            self._reached = step
        ended = self._stall.observe(step, now)
        if ended is not None:
            self._record(ended)
        if not header:
            return
        if self._step is None or step > self._step:
            self._step = step
        samples = self._rate_samples
        if samples and now - samples[-1][0] < _RATE_SAMPLE_SECS:
            return
        samples.append((now, self._step))
        if len(samples) >= 2 and samples[-1][0] > samples[0][0]:
            rate = (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
            if rate >= 0:
                self._steps_per_sec = rate

    def note_step(self, step: int) -> None:
        """Records the global step now (the run calls it every half second while the body
        runs; a session that reports Progress moves the header's step with those only). Feeds
        the steps/sec estimate, and raises or clears a stall."""
        step = _check_int("step", step, 0)
        with self._lock:
            before = (self._step, self._steps_per_sec, self._stall.stalled)
            self._note_step(step, header=not self._positioned)
            if self._ready and self._status == names.RUNNING:
                stalled = self._stall.check()
                if stalled is not None:
                    self._record(stalled)
            if (self._step, self._steps_per_sec, self._stall.stalled) != before:
                self._version += 1

    # -- status ------------------------------------------------------------------------------

    def watch(self, callback: Callable[[str], None]) -> None:
        """Calls ``callback(status)`` after each change of status, on the thread that made it
        and outside the history's lock, until ``unwatch``. What it raises is logged: a change
        of status is never undone by a watcher."""
        with self._lock:
            self._watchers += (callback,)

    def unwatch(self, callback: Callable[[str], None]) -> None:
        """Stops calling ``callback`` (a callback not watching is ignored)."""
        with self._lock:
            self._watchers = tuple(w for w in self._watchers if w != callback)

    def set_status(self, status: str, *, active: bool, new_session: bool = False,
                   step: Optional[int] = None) -> None:
        """Sets the run's status (the run's vocabulary: any non-empty name). ``active``: the run
        is working (its elapsed time counts); ``new_session``: a session starts, not restored
        or initialized yet. Each change goes into the timeline, at ``step`` (default: the
        header's; a stop request gives the step at which it was made), then the watchers hear
        of it."""
        if not isinstance(status, str) or not status:
            raise ValueError(invalid("status", status, "a non-empty str"))
        if step is not None:
            step = _check_int("step", step, 0)
        with self._lock:
            if status == self._status and not new_session:
                return
            self._change_status(status, active, new_session, step)
            watchers = self._watchers
        for callback in watchers:
            try:
                callback(status)
            except Exception:  # pylint: disable=broad-except
                logger.warning("A watcher of the run's status failed at %r.", status,
                               exc_info=True)

    def _change_status(self, status: str, active: bool, new_session: bool,
                       step: Optional[int]) -> None:
        # Under the lock.
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
        if status == names.RUNNING:
            self._stall.resume()
        else:
            self._stall.clear()
        self._record(StatusChanged(status, self._step if step is None else step,
                                            self._wall_clock()))
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
        """Appends ``text`` to the run's stdout (``outputs``: what the run says itself)."""
        self.outputs.write("stdout", text)

    # -- readers ---------------------------------------------------------------------------

    @property
    def step(self) -> Optional[int]:
        """The last known global step (cheap: no snapshot is built)."""
        return self._step

    @property
    def active(self) -> bool:
        """True while the run's status is an active one (cheap: no snapshot is built)."""
        return self._active

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
        # The outputs' version first: the text is at least as new as the version says.
        output_version = self.outputs.version
        output = self.outputs.text()
        with self._lock:
            return HistorySnapshot(
                version=self._version + output_version,
                status=self._status,
                active=self._active,
                step=self._step,
                steps_per_sec=self._steps_per_sec,
                active_secs=self._active_secs,
                active_since=self._active_since,
                taken_at=self._clock(),
                scalars=types.MappingProxyType(
                    {tag: series.frozen() for tag, series in sorted(self._series.items())
                     if len(series)}),
                scalars_version=self._scalars_version,
                checkpoints=tuple(self._checkpoints),
                output=output,
                error=self._error,
                waiting_for_chief=self._waiting_for_chief,
                restored_from=self._restored_from,
                kept=self._kept,
                progress=self._progress,
                ready=self._ready,
                rollbacks=tuple(self._rollbacks),
                restoring=self._restoring,
                checkpoint_count=self._checkpoint_count,
                timeline=((self._first_event,) if self._first_dropped else ())
                + tuple(self._timeline),
                events_dropped=self._events_dropped,
                stalled=self._stall.stalled,
                best=self._best,
                write_stalled=self._write_stalled,
            )

    def series_of(self, tag: str) -> Optional[Tuple[ScalarSeries, RawTail]]:
        """``tag``'s series and its newest points as they came (``Series.raw_tail``), read
        together; None for a tag without points."""
        with self._lock:
            series = self._series.get(tag)
            if series is None or not len(series):
                return None
            return series.frozen(), series.raw_tail()

    # -- earlier runs from disk --------------------------------------------------------------

    def load_event_files(self, logdir: str, upto_step: Optional[int]) -> None:
        """Adds the scalars of the event files in ``logdir`` (as TensorBoard reads them).

        Reads with TensorBoard's reader (``directory_watcher`` over ``event_file_loader``),
        applies TensorBoard's purge of orphaned events (a SessionLog.START at step S drops the
        events seen before it with step >= S; files without that version fall back to
        TensorBoard's out-of-order rule), and keeps the points with step <= ``upto_step``
        (all of them when None). For each tag, only points older than the first point already
        recorded are added, so live summaries are never doubled. The highest step the newest
        session recorded is what the run reached (the next session says how many steps a
        restore from an older checkpoint lost). A missing ``logdir`` adds nothing. Reading
        happens without holding the lock.
        """
        if not isinstance(logdir, (str, os.PathLike)) or not os.fspath(logdir):
            raise ValueError(invalid("logdir", logdir,
                                     "the path of a directory with event files"))
        if upto_step is not None:
            upto_step = _check_int("upto_step", upto_step, 0)
        logdir = os.fspath(logdir)
        if not os.path.isdir(logdir):
            return
        loaded = eventfiles.read_scalars(logdir, upto_step, self._max_points)
        with self._lock:
            if loaded.reached is not None and (self._reached is None
                                               or loaded.reached > self._reached):
                self._reached = loaded.reached
            if not loaded.series:
                return
            for tag, series in loaded.series.items():
                live = self._series.get(tag)
                if live is not None and len(live):
                    series.drop_from(live.first_step)
                    series.extend(live)
                self._series[tag] = series
            self._scalars_version += 1
            self._version += 1
