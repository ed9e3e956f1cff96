"""What an eager run reports: ``events`` records to the listeners and, with a logdir, an event
file that TensorBoard reads (the session's start and stop, checkpoints, rollbacks, scalars, the
step rate), as the graph Supervisor writes them.
"""
import time
import types
from typing import Callable, Dict, Optional

import numpy as np
import tensorflow as tf
from tensorflow.core.util import event_pb2
from tensorflow.python.summary.writer.event_file_writer import EventFileWriter

from .. import events, names, services

_Summary = tf.compat.v1.Summary
_SessionLog = tf.compat.v1.SessionLog

# Tag of the step rate in the event files, as the graph Supervisor writes it.


class _EventFile:
    """An event file of its own name (unique, sorting after earlier ones: see
    ``services.event_file_suffix``), with the FileWriter methods this module and the step
    counter service call. TF1's FileWriter refuses eager mode; its file writer does not."""

    def __init__(self, logdir: str):
        self._writer = EventFileWriter(logdir, filename_suffix=services.event_file_suffix())

    def add_summary(self, summary, step) -> None:
        self._writer.add_event(event_pb2.Event(summary=summary, wall_time=time.time(),
                                               step=int(step)))

    def add_session_log(self, session_log, step=None) -> None:
        event = event_pb2.Event(session_log=session_log, wall_time=time.time())
        if step is not None:
            event.step = int(step)
        self._writer.add_event(event)

    def close(self) -> None:
        self._writer.close()


class _NoEventFile:
    """Without a logdir: the step rate still reaches the listeners, no file is written."""

    def add_summary(self, summary, step) -> None:
        pass


def to_float(value) -> Optional[float]:
    """A number or a scalar tensor as a float (waiting for a tensor's step); None for what
    is not one."""
    try:
        return float(np.asarray(value).reshape(()))
    except (TypeError, ValueError):
        return None


def _progress_record(step, epoch, epochs, batch, batches, scalars, wall_time):
    numbers = {tag: to_float(value) for tag, value in scalars.items()}
    return events.Progress(step, epoch, epochs, batch, batches, types.MappingProxyType(
        {tag: value for tag, value in numbers.items() if value is not None}), wall_time)


class Reporter:
    """The records and the event file of one session. ``event_file`` is None without a logdir
    (until ``open``, and after ``close``)."""

    def __init__(self, hub: events.EventHub):
        self.hub = hub
        self.event_file: Optional[_EventFile] = None

    def open(self, logdir: Optional[str]) -> None:
        """Opens the session's event file (none without ``logdir``)."""
        if logdir:
            self.event_file = _EventFile(logdir)

    def started(self, step: int, restored: Optional[str]) -> None:
        """The session is ready at ``step`` (restored from ``restored``, or initialized)."""
        if self.event_file is not None:
            self.event_file.add_session_log(_SessionLog(status=_SessionLog.START), step)
        self.hub.emit(events.SessionReady, step, restored, True, time.time())

    def step_counter(self, coord, secs: float, read: Callable[[], int]):
        """The service writing the step rate every ``secs`` (not started)."""
        return services.StepCounterService(coord, secs, tag=names.STEP_RATE_TAG, read=read,
                                           writer=self.event_file or _NoEventFile(),
                                           hub=self.hub)

    def saved(self, step, path, wall_time, seconds, kept) -> None:
        """The writer thread: the checkpoint ``path`` is written (``kept``: newest first)."""
        event_file = self.event_file  # the session's end may close it meanwhile
        if event_file is not None:
            event_file.add_session_log(_SessionLog(
                status=_SessionLog.CHECKPOINT, checkpoint_path=path), step)
        self.hub.emit(events.CheckpointSaved, step, path, wall_time, seconds, kept)

    def scalars(self, scalars: Dict[str, object], step: int, prefix: str = "") -> None:
        """Writes the numbers of ``scalars`` (tensors are converted here) at ``step``."""
        values = {}
        for tag, value in scalars.items():
            number = to_float(value)
            if number is not None:
                values[prefix + tag] = number
        if not values:
            return
        if self.event_file is not None:
            self.event_file.add_summary(_Summary(value=[
                _Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()]),
                step)
        self.hub.emit(events.SummaryWritten, step, types.MappingProxyType(values), time.time())

    def progress(self, step: int, progress: Optional[tuple],
                 scalars: Dict[str, object]) -> None:
        """A Progress record: ``progress`` is fit's (epoch, epochs, batch, batches), or None."""
        epoch = epochs = batch = batches = None
        if progress is not None:
            epoch, epochs, batch, batches = progress
        # Tensors are converted on the dispatcher thread, and only when someone listens.
        self.hub.emit(_progress_record, step, epoch, epochs, batch, batches, dict(scalars),
                      time.time())

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
        """Closes the event file (without marking the session's end)."""
        if self.event_file is not None:
            self.event_file.close()
            self.event_file = None
