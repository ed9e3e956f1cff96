"""What an eager run reports: ``events`` records to the listeners and, with a logdir, an event
file that TensorBoard reads (the session's start and stop, checkpoints, rollbacks, scalars, the
step rate), as the graph Supervisor writes them; and the best checkpoint kept
(``--keep-best``), as a text summary (``BEST_TAG``: TensorBoard's Text tab).

The panel draws what the event file holds. At its step boundaries the training thread hands
the step's scalars over as they are (numbers or tensors); the hub's dispatcher thread converts
them (waiting for the step there, not in training), writes them to the event file and reports
them as ``SummaryWritten``. So a curve reloaded from the event files, by the panel after a
restart or by TensorBoard, has the points the live panel had. Every write to the file goes
through the dispatcher's queue, in the order it was asked for: a rollback's SessionLog.START
comes after the diverged points it purges.

How often a point is taken: every ``POINT_SECS`` while a session is young, then less often as
it ages (``point_interval``: about ``POINTS_PER_DOUBLING`` points each time its age doubles),
and at least every ``save_summaries_secs``. So a short session (a stop and a resume a few
seconds apart) is drawn in detail, and a days-long one adds one point per
``save_summaries_secs``, as TensorFlow's summary service does: the event file grows at a
bounded rate, whatever the steps per second. The session's last step always gets a point and,
when it trained since the last one, a step-rate record (``end``), whatever ended it.

The step rate is measured between step boundaries (the first one of the session, then each
record's), so it leaves out the start-up (restoring, the first step's tracing) and what
happens after the last step (the final checkpoint): it is the rate of training.
"""
import logging
import math
import time
import types
from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from .. import compat, events, names
from ..timer import Timer

logger = logging.getLogger("jupyter_supervisor")

_Summary = tf.compat.v1.Summary
_Event = tf.compat.v1.Event
_SessionLog = tf.compat.v1.SessionLog
# What makes TensorBoard show a string tensor in its Text tab (the text plugin's name).
_TEXT = tf.compat.v1.SummaryMetadata(
    plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="text"))
# The tag of the text summary that names the best checkpoint kept (TensorBoard's Text tab).
BEST_TAG = "jupyter_supervisor/best_checkpoint"

# The shortest time between two points of a curve, and between two Progress records (what a
# panel shows: twice a second).
POINT_SECS = 0.5
PROGRESS_SECS = 0.5
# Points of a session's curves each time its age doubles, once it is older than
# POINT_SECS * POINTS_PER_DOUBLING / ln 2 (3 minutes): 1,440 in its first hour, then one per
# save_summaries_secs (10 s by default: 360 an hour).
POINTS_PER_DOUBLING = 250
# How long closing an event file waits for the points queued before it.
FLUSH_SECS = 10.0
# The longest time between two points when the run writes no summaries (save_summaries_secs=0:
# the panel still draws the scalars).
POINT_SECS_WITHOUT_SUMMARIES = 10.0


def point_interval(age: float, longest: float) -> float:
    """Seconds from a point of a session ``age`` seconds old to its next one: POINT_SECS at
    first, then ``age * ln 2 / POINTS_PER_DOUBLING``, at most ``longest``."""
    return min(longest, max(POINT_SECS, age * math.log(2) / POINTS_PER_DOUBLING))


class _EventFile:
    """An event file of its own name (unique, sorting after earlier ones: see
    ``events.event_file_suffix``), with the FileWriter methods this module and
    ``finite.Policy`` call. Writes are queued on ``hub``, in order with the scalars the
    dispatcher converts. TF1's FileWriter refuses eager mode; its file writer does not."""

    def __init__(self, logdir: str, hub: events.EventHub):
        self._writer = compat.event_file_writer(logdir, events.event_file_suffix())
        self._hub = hub

    def add_summary(self, summary, step) -> None:
        self._hub.run(self._writer.add_event, _Event(
            summary=summary, wall_time=time.time(), step=int(step)))

    def add_session_log(self, session_log, step=None) -> None:
        event = _Event(session_log=session_log, wall_time=time.time())
        if step is not None:
            event.step = int(step)
        self._hub.run(self._writer.add_event, event)

    def write_now(self, summary, step: int, wall_time: float) -> None:
        """Writes from the dispatcher thread itself (its queue's order is kept)."""
        self._writer.add_event(_Event(summary=summary, wall_time=wall_time, step=int(step)))

    def close(self) -> None:
        """Writes what is queued (waiting at most FLUSH_SECS for it), then closes the file."""
        if not self._hub.flush(FLUSH_SECS):
            logger.warning("The event file was closed before every point reached it (the "
                           "listeners took longer than %g s); the last ones may be missing.",
                           FLUSH_SECS)
        self._writer.close()


def to_float(value) -> Optional[float]:
    """A number or a scalar tensor as a float (waiting for a tensor's step); None for what
    is not one, or a tensor whose step failed."""
    try:
        return float(np.asarray(value).reshape(()))
    except (TypeError, ValueError, tf.errors.OpError):
        return None


class Reporter:
    """The records and the event file of one session. ``event_file`` is None without a logdir
    (until ``open``, and after ``close``). ``summaries_secs``: the run's
    ``save_summaries_secs`` (0: no scalars and no step rate in the event file). ``clock``:
    monotonic seconds (tests pass their own)."""

    def __init__(self, hub: events.EventHub, summaries_secs: float, clock=time.monotonic):
        self.hub = hub
        self.event_file: Optional[_EventFile] = None
        self._clock = clock
        self._writes_scalars = bool(summaries_secs)
        self._longest = summaries_secs or POINT_SECS_WITHOUT_SUMMARIES
        # When (timer.Timer, as everywhere); what, below. Used by the training thread only.
        self._points = Timer(secs=POINT_SECS, clock=clock)
        self._progresses = Timer(secs=PROGRESS_SECS, clock=clock)
        self._rates = Timer(secs=summaries_secs or None, clock=clock)
        self._started: Optional[float] = None      # the clock when the session became ready
        self._point_step: Optional[int] = None     # the step of the newest point
        self._rate_from: Optional[Tuple[int, float]] = None  # (step, clock) a rate starts at
        self._boundary: Optional[Tuple[int, float]] = None   # the newest boundary's

    def open(self, logdir: Optional[str]) -> None:
        """Opens the session's event file (none without ``logdir``)."""
        if logdir:
            self.event_file = _EventFile(logdir, self.hub)

    def started(self, step: int, restored: Optional[str]) -> None:
        """The session is ready at ``step`` (restored from ``restored``, or initialized); its
        START is at the next step (``events.START_AFTER``)."""
        if self.event_file is not None:
            self.event_file.add_session_log(_SessionLog(status=_SessionLog.START),
                                            step + events.START_AFTER)
        self._started = self._clock()
        self._points = Timer(secs=POINT_SECS, clock=self._clock)   # due at once
        self._progresses = Timer(secs=PROGRESS_SECS, clock=self._clock)
        self._point_step, self._rate_from, self._boundary = None, None, None
        self.hub.emit(events.SessionReady, step, restored, True, time.time())

    def boundary(self, step: int, scalars: Dict[str, object], progress: Optional[tuple]) -> None:
        """The training thread at a step boundary (``scalars``: the step's, as given;
        ``progress``: fit's (epoch, epochs, batch, batches), or None): a point of the scalars,
        a Progress record and a step-rate record, each when one is due."""
        self._boundary = (step, self._clock())
        if scalars and self._points.due():
            self._points.restart()
            self._points.secs = point_interval(self._boundary[1] - self._started,
                                               self._longest)
            self._point(step, scalars)
        if self._progresses.due():
            self._progresses.restart()
            self._progress(step, progress)
        if self._rates.enabled:
            if self._rate_from is None:
                self._rate_from = self._boundary   # the rate counts from the first boundary
                self._rates.restart()
            elif self._rates.due():
                self._rates.restart()
                self._rate()

    def end(self, step: Optional[int], scalars: Dict[str, object],
            progress: Optional[tuple]) -> None:
        """The session's last step (None: it never became ready): its point, unless it has
        one, its Progress, and the step rate since the last record, when it trained since."""
        if step is None:
            return
        if scalars and self._point_step != step:
            self._point(step, scalars)
        self._progress(step, progress)
        if self._rates.enabled and self._boundary is not None:
            self._rate()

    def _point(self, step: int, scalars: Dict[str, object]) -> None:
        self._point_step = step
        self.hub.run(self._write_scalars, step, dict(scalars), "", time.time())

    def _progress(self, step: int, progress: Optional[tuple]) -> None:
        epoch, epochs, batch, batches = progress if progress is not None else (None,) * 4
        self.hub.emit(events.Progress, step, epoch, epochs, batch, batches, time.time())

    def _rate(self) -> None:
        """A step-rate record from ``_rate_from`` to the newest boundary, if it trained."""
        (start, since), (step, at) = self._rate_from, self._boundary
        if step <= start or at <= since:
            return
        self._rate_from = (step, at)
        wall = time.time() - (self._clock() - at)
        self.hub.run(self._write_rate, step, (step - start) / (at - since), wall)

    def scalars(self, scalars: Dict[str, object], step: int, prefix: str = "") -> None:
        """Writes the numbers of ``scalars`` (numbers or tensors: converted off this thread)
        at ``step``, their tags prefixed with ``prefix``."""
        self.hub.run(self._write_scalars, step, dict(scalars), prefix, time.time())

    # -- the dispatcher thread -----------------------------------------------------------------

    def _write_scalars(self, step: int, scalars: Dict[str, object], prefix: str,
                       wall_time: float) -> Optional[events.SummaryWritten]:
        values = {}
        for tag, value in scalars.items():
            number = to_float(value)
            if number is not None:  # as the event file holds it, and TensorBoard shows it
                values[prefix + tag] = float(np.float32(number))
        if not values:
            return None
        event_file = self.event_file  # the session's end may close it meanwhile
        if event_file is not None and self._writes_scalars:
            event_file.write_now(_Summary(value=[
                _Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()]),
                step, wall_time)
        return events.SummaryWritten(step, types.MappingProxyType(values), wall_time)

    def _write_rate(self, step: int, rate: float, wall_time: float) -> events.StepRate:
        rate = float(np.float32(rate))
        event_file = self.event_file
        if event_file is not None:
            event_file.write_now(_Summary(value=[
                _Summary.Value(tag=names.STEP_RATE_TAG, simple_value=rate)]), step, wall_time)
        return events.StepRate(step, rate, wall_time, names.STEP_RATE_TAG)

    def _write_best(self, best, path: str, step: int, wall_time: float) -> events.BestKept:
        event_file = self.event_file
        if event_file is not None:
            event_file.write_now(_Summary(value=[_Summary.Value(
                tag=BEST_TAG, metadata=_TEXT, tensor=tf.make_tensor_proto(
                    f"best {best.text()}: {path}"))]), step, wall_time)
        return events.BestKept(best.metric, best.mode, best.value, best.step, best.epoch, path,
                               wall_time)

    # -- the other records ---------------------------------------------------------------------

    def saved(self, step, path, wall_time, seconds, kept) -> None:
        """The writer thread: the checkpoint ``path`` is written (``kept``: newest first)."""
        event_file = self.event_file  # the session's end may close it meanwhile
        if event_file is not None:
            event_file.add_session_log(_SessionLog(
                status=_SessionLog.CHECKPOINT, checkpoint_path=path), step)
        self.hub.emit(events.CheckpointSaved, step, path, wall_time, seconds, kept)

    def best(self, best, path: str, step: int) -> None:
        """The checkpoint ``path`` is kept as the best (``best.Best``), at ``step``: the new
        best's own step, or the step a session restored. Any thread: the text summary and the
        BestKept record are the dispatcher's, after what was queued before."""
        self.hub.run(self._write_best, best, path, step, time.time())

    def write_stalled(self, step: int, path: str, since: float) -> None:
        """The write of ``step``'s checkpoint to ``path``, started at ``since``, is stalled."""
        self.hub.emit(events.WriteStalled, step, path, since, time.time())

    def end_session(self, step: Optional[int], why: str = "") -> None:
        """The session ended at ``step``: marks it in the event file (``why`` as the STOP's
        msg), and closes the file."""
        if self.event_file is not None:
            self.event_file.add_session_log(_SessionLog(status=_SessionLog.STOP, msg=why), step)
            self.close()

    def stopped(self, reason: str, error: Optional[BaseException],
                step: Optional[int], why: str = "") -> None:
        """The Stopped record, the last of the session."""
        self.hub.emit(events.Stopped, reason, error, step, time.time(), why)

    def close(self) -> None:
        """Closes the event file (without marking the session's end), once what is queued for
        it is written."""
        if self.event_file is not None:
            self.event_file.close()
            self.event_file = None
