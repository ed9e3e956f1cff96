"""Reading a logdir's event files with TensorBoard's own reader, as TensorBoard reads them: the
scalars of earlier sessions (``read_scalars``, for the plots of a resumed run), every point of a
tag (``read_points``, for a chart's download) and why the last session stopped (``last_stop``).

TensorBoard's SessionLog.START purge is applied: a START at step S drops the events seen before
it with step >= S. This module imports no TensorFlow; TensorBoard's reader is imported when
called (which may import TensorFlow if it is installed).
"""
import bisect
import logging
import math
import types
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from .. import events, names
from .series import Series

logger = logging.getLogger("jupyter_supervisor")


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


def last_stop(logdir: str) -> Optional[str]:
    """Why the last session on ``logdir`` stopped: the msg of the SessionLog.STOP record of the
    newest event file that holds a session's START (each session writes a file of its own; the
    one just opened has none yet); None without one, or when the files cannot be read (only a
    note depends on it: the run goes on)."""
    try:
        tb = _tensorboard_reader()
        files = [path for path in tb.io_wrapper.ListDirectoryAbsolute(logdir)
                 if tb.io_wrapper.IsSummaryEventsFile(path)]
        for path in sorted(files, reverse=True):
            started, why = False, None
            for event in tb.event_file_loader.LegacyEventFileLoader(path).Load():
                if event.HasField("session_log"):
                    status = event.session_log.status
                    started = started or status == event.session_log.START
                    if status == event.session_log.STOP:
                        why = event.session_log.msg or None
            if started:
                return why
        return None
    except Exception:  # pylint: disable=broad-except
        logger.warning("Could not read why the last session on %s stopped.", logdir,
                       exc_info=True)
        return None


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


class Scalars(NamedTuple):
    """What ``read_scalars`` found: ``series`` by tag, and ``reached``, the highest step the
    newest session (the events from its START on) recorded, or None."""
    series: Dict[str, Series]
    reached: Optional[int]


def _surviving_points(tb, logdir: str, limit: float, reached: list) -> Iterator:
    """(tag, step, value, wall time) of every scalar point in ``logdir``'s event files that no
    later session's START purges, with step <= ``limit``, in the files' order; ``reached[0]``
    is set to the highest step the newest session recorded."""
    start = tb.event_pb2.SessionLog.START
    # First pass: where TensorBoard purges (EventAccumulator._MaybePurgeOrphanedData). Files
    # older than version 2 have no START; TensorBoard drops, per tag, the points a lower step
    # supersedes, which the callers do with every point anyway.
    restarts = _Restarts()
    file_version = None
    for position, event in enumerate(_events(tb, logdir)):
        if event.HasField("file_version"):
            file_version = _file_version(event.file_version)
        if (file_version is not None and file_version >= 2 and event.HasField("session_log")
                and event.session_log.status == start):
            restarts.add(position, event.step)
    # Second pass: the points no later START purges. A step counter's record at or before the
    # step its session records from (its START's) measured the start-up (tracing, restoring),
    # not training: skipped, as the live history skips it (_on_step_rate).
    started_at = -1
    for position, event in enumerate(_events(tb, logdir)):
        if event.HasField("session_log") and event.session_log.status == start:
            started_at = event.step
            reached[0] = None
        if event.HasField("summary") or (event.HasField("session_log")
                                         and event.session_log.status != start):
            reached[0] = event.step if reached[0] is None else max(reached[0], event.step)
        if (not event.HasField("summary") or event.step > limit
                or event.step >= restarts.cut(position)):
            continue
        for tag, value in events.scalar_values(event.summary, tb.tensor_util.make_ndarray):
            if names.is_rate(tag) and event.step <= started_at:
                continue
            yield tag, int(event.step), value, float(event.wall_time)


def read_scalars(logdir: str, upto_step: Optional[int], max_points: int) -> Scalars:
    """The scalars in ``logdir``'s event files that no later session's START purges, with
    step <= ``upto_step`` (all when None), and the step the newest session reached."""
    tb = _tensorboard_reader()
    reached = [None]
    series: Dict[str, Series] = {}
    limit = math.inf if upto_step is None else upto_step
    for tag, step, value, wall in _surviving_points(tb, logdir, limit, reached):
        target = series.get(tag)
        if target is None:
            target = series[tag] = Series(max_points)
        target.add(step, value, wall)
    return Scalars(series, reached[0])


class Points(NamedTuple):
    """One tag's points at full resolution, oldest first: lists of equal length."""
    steps: List[int]
    values: List[float]
    walls: List[float]


def read_points(logdir: str, tags: Sequence[str]) -> Dict[str, Points]:
    """Every point of ``tags`` in ``logdir``'s event files, as TensorBoard shows them (START
    purges applied, and per tag a lower step drops the points at and after it), none merged:
    what a chart's download holds. A tag without points is left out."""
    tb = _tensorboard_reader()
    wanted = set(tags)
    out: Dict[str, Points] = {}
    for tag, step, value, wall in _surviving_points(tb, logdir, math.inf, [None]):
        if tag not in wanted:
            continue
        points = out.get(tag)
        if points is None:
            points = out[tag] = Points([], [], [])
        if points.steps and step < points.steps[-1]:
            keep = bisect.bisect_left(points.steps, step)
            for column in points:
                del column[keep:]
        points.steps.append(step)
        points.values.append(value)
        points.walls.append(wall)
    return out
