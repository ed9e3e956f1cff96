"""What a Supervisor reports, as small immutable records, delivered to any number of listeners.

The Supervisor (and its services) call ``EventHub.emit`` from the training and service threads.
``emit`` only queues a factory and its arguments; a dispatcher thread builds the record (this is
where scalars are extracted from Summary protos, once) and calls the listeners. So the training
loop never waits for a listener, and a failing listener is logged, never raised into training.

Records:
  SessionReady     the session is usable: restored from a checkpoint, or initialized
  WaitingForChief  a non-chief waits for the chief to initialize or restore the model
  CheckpointSaved  a checkpoint was written (step, path, wall time, seconds taken, and the
                   checkpoints retention keeps, newest first)
  BestKept         the checkpoint retention keeps as the best of a metric (--keep-best)
  SummaryWritten   a summary went to the event file (step, scalar values by tag)
  StepRate         the step counter measured steps per second
  RolledBack       the model was not finite, so it was restored from the newest good checkpoint
  Progress         where training is (eager backend): step, and epoch i/N and batch j/M of a
                   Keras fit at that step; a few times a second at most, and at the end
  WriteStalled     a checkpoint's write has made no progress for longer than its size explains
                   (eager backend): the step, the path and since when
  Stopped          the Supervisor stopped (reason, exception or None, and why: what asked
                   for the stop, e.g. "the kernel received SIGTERM", or "")

Which tags of the event file reach listeners, and how: every scalar of the summaries the run
writes (its summary op, ``summary_computed``, the eager backend's scalars) comes as a
SummaryWritten, by tag; the step counter's ``<global step>/sec`` (TensorFlow's
``global_step/sec``) comes only as a StepRate, whose ``tag`` names it. Both are what TensorBoard
reads back from the file: a listener that plots them draws what TensorBoard draws.
"""
import dataclasses
import itertools
import logging
import os
import queue
import threading
import time
import types
from typing import Callable, Iterator, Mapping, Optional, Tuple

import numpy as np

from . import names

logger = logging.getLogger("jupyter_supervisor")

# A session (or a rollback) that starts from the checkpoint of step S writes its SessionLog.START
# at S + START_AFTER: TensorBoard then drops what was recorded after S, which the restore undid,
# and keeps what was recorded at S (TensorFlow's Supervisor writes it at S, which drops the
# values of S that the session before recorded at its end).
START_AFTER = 1

# Why a run stopped, as Stopped.reason gives it.
REQUESTED = "requested"        # request_stop()/stop() without an error, or the block ended
OUT_OF_RANGE = "out_of_range"  # the input was exhausted (OutOfRangeError): a normal end
ERROR = "error"                # an exception in the block, a service or a loop target


@dataclasses.dataclass(frozen=True)
class SessionReady:
    """The managed session is ready at ``step``; ``restored_from`` is the checkpoint path, or
    None. Its event file's SessionLog.START is at ``step + 1``, the first step it trains:
    TensorBoard drops from there on what earlier sessions recorded (the steps trained after
    the restored checkpoint, lost), and keeps the restored step's values, the last an earlier
    session recorded of the state the checkpoint holds (see ``START_AFTER``)."""
    step: Optional[int]
    restored_from: Optional[str]
    is_chief: bool
    wall_time: float


@dataclasses.dataclass(frozen=True)
class WaitingForChief:
    """A non-chief started waiting for the chief on ``master``."""
    master: str
    wall_time: float


@dataclasses.dataclass(frozen=True)
class CheckpointSaved:
    """A checkpoint was written at ``path`` for ``step``, taking ``seconds``; ``kept`` is what
    retention keeps after it, newest first (empty when the saver does not say)."""
    step: Optional[int]
    path: str
    wall_time: float
    seconds: float
    kept: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class BestKept:
    """The checkpoint ``path`` of ``step`` holds the best ``value`` of ``metric`` so far
    (``mode``: "min" or "max"), at the end of fit's ``epoch`` (0-based; None outside fit);
    retention keeps it beside the newest. Sent once a new best is listed, and when a session
    restored a state that names its best."""
    metric: str
    mode: str
    value: float
    step: int
    epoch: Optional[int]
    path: str
    wall_time: float

    def text(self) -> str:
        """'val_loss 0.2311 (min) at step 300, the end of epoch 3' (``describe_best``)."""
        return describe_best(self.metric, self.mode, self.value, self.step, self.epoch)


def describe_best(metric: str, mode: str, value: float, step: int,
                  epoch: Optional[int]) -> str:
    """A best value as the panel, the logs and the event file say it: 'val_loss 0.2311 (min)
    at step 300, the end of epoch 3' (epochs 1-based, as Keras prints them)."""
    where = f"step {step:,}" + ("" if epoch is None else f", the end of epoch {epoch + 1}")
    return f"{metric} {value:.5g} ({mode}) at {where}"


@dataclasses.dataclass(frozen=True)
class SummaryWritten:
    """A summary was written for ``step``; ``scalars`` maps each scalar tag to its value."""
    step: Optional[int]
    scalars: Mapping[str, float]
    wall_time: float


@dataclasses.dataclass(frozen=True)
class StepRate:
    """The step counter measured ``steps_per_sec`` at ``step``, written as ``tag``."""
    step: int
    steps_per_sec: float
    wall_time: float
    tag: str = names.STEP_RATE_TAG


@dataclasses.dataclass(frozen=True)
class RolledBack:
    """The model was not finite at ``step`` (``problem`` says what), so it was restored from
    the checkpoint ``path`` (``restored_step``): rollback ``count`` of at most ``limit``."""
    step: Optional[int]
    restored_step: Optional[int]
    path: str
    problem: str
    count: int
    limit: int
    wall_time: float


@dataclasses.dataclass(frozen=True)
class Progress:
    """Where training is at ``step``: in a Keras ``fit``, ``epoch`` (0-based) of ``epochs``
    and ``batch`` batches done of ``batches`` per epoch (None when the data does not say), all
    read at the same step boundary. Outside ``fit`` the epoch fields are None."""
    step: int
    epoch: Optional[int]
    epochs: Optional[int]
    batch: Optional[int]
    batches: Optional[int]
    wall_time: float


@dataclasses.dataclass(frozen=True)
class WriteStalled:
    """The write of the checkpoint of ``step`` to ``path``, started at ``since`` (epoch
    seconds), has not ended in far longer than its size takes at the recent writes' speed (a
    file system that stopped answering). Training goes on; a ``CheckpointSaved`` after it
    ends the stall."""
    step: int
    path: str
    since: float
    wall_time: float


@dataclasses.dataclass(frozen=True)
class Stopped:
    """The Supervisor stopped: ``reason`` is REQUESTED, OUT_OF_RANGE or ERROR; ``why`` is
    what asked for the stop when it said (the event file's SessionLog.STOP ``msg``), else ""."""
    reason: str
    exception: Optional[BaseException]
    step: Optional[int]
    wall_time: float
    why: str = ""


_writer_numbers = itertools.count()  # of the event files this process opened


def event_file_suffix() -> str:
    """The suffix of a new event file's name: unique, and sorting after every earlier file's.

    TensorFlow names event files by the second and the host; TensorBoard reads a logdir's files
    in name order (and purges a restarted session's orphaned points by that order). A file
    opened later in the same second, by this process or a restarted one, must sort later: the
    wall clock in nanoseconds, zero-padded, does that (a counter's 9 -> 10 would not)."""
    return f".{time.time_ns():020d}.{os.getpid()}.{next(_writer_numbers)}"


def scalar_values(summary, make_ndarray: Callable) -> Iterator[Tuple[str, float]]:
    """(tag, value) of each scalar of a Summary proto: TF1's ``simple_value`` and TF2's scalar
    tensors (converted with ``make_ndarray``: TensorFlow's or TensorBoard's, whichever the
    caller has). The one reading of a Summary, for live records and event files alike."""
    for value in summary.value:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            yield value.tag, float(value.simple_value)
        elif kind == "tensor" and not value.tensor.tensor_shape.dim:
            array = make_ndarray(value.tensor)
            if array.dtype.kind in "fiub":
                yield value.tag, float(array)


def scalars_from_summary(summary) -> Mapping[str, float]:
    """Returns {tag: value} for the scalar values of a Summary proto or its serialized bytes.

    Both forms of scalar are read: TF1's ``simple_value`` and TF2's scalar tensors.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if isinstance(summary, (bytes, bytearray, np.bytes_)):
        proto = tf.compat.v1.Summary()
        proto.ParseFromString(bytes(summary))
    else:
        proto = summary
    return types.MappingProxyType(dict(scalar_values(proto, tf.make_ndarray)))


class EventHub:
    """Delivers events to listeners on a dispatcher thread; ``emit`` never blocks.

    With no listener, ``emit`` returns at once and nothing is built; ``run`` queues work that
    must be done off the caller's thread whether or not anyone listens (writing an event file),
    in order with the records. The dispatcher thread starts with the first queued item and ends
    after ``idle_secs`` without one, so an idle Supervisor holds no thread.
    """

    MAX_QUEUED = 10_000

    def __init__(self, idle_secs: float = 2.0):
        self._idle_secs = idle_secs
        # Protects _listeners (replaced, never mutated, so the dispatcher may iterate a copy),
        # _thread and _dropped.
        self._lock = threading.Lock()
        self._listeners: tuple = ()
        self._failed: set = set()      # listeners whose failure was logged with a traceback
        self._thread: Optional[threading.Thread] = None
        self._dropped = 0
        self._queue: "queue.Queue" = queue.Queue(maxsize=self.MAX_QUEUED)

    def add_listener(self, listener: Callable[[object], None]) -> None:
        """Calls ``listener(event)`` for every event from now on."""
        if not callable(listener):
            raise TypeError(
                f"Invalid value for argument `listener`. Received: listener={listener!r}. "
                "Expected a callable taking one event.")
        with self._lock:
            self._listeners = self._listeners + (listener,)

    def emit(self, factory: Callable[..., object], *args) -> None:
        """Queues ``factory(*args)`` to be built and delivered off the caller's thread (nothing
        is queued while no one listens)."""
        if self._listeners:
            self.run(factory, *args)

    def run(self, work: Callable[..., object], *args) -> None:
        """Queues ``work(*args)`` for the dispatcher thread, listeners or not; what it returns
        (a record, or None) is delivered as ``emit``'s records are. A full queue drops it
        (logged once): only listeners slower than the training can fill it."""
        with self._lock:
            try:
                self._queue.put_nowait((work, args))
            except queue.Full:
                self._dropped += 1
                if self._dropped == 1:
                    logger.warning("Listeners are too slow: dropping events (%d queued).",
                                   self.MAX_QUEUED)
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._dispatch, name="jupyter_supervisor-events", daemon=True)
                self._thread.start()

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until everything queued so far was done and delivered; False on timeout."""
        done = threading.Event()
        self.run(done.set)
        return done.wait(timeout)

    def _dispatch(self) -> None:
        while True:
            try:
                factory, args = self._queue.get(timeout=self._idle_secs)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            try:
                event = factory(*args)
            except Exception:  # pylint: disable=broad-except
                logger.exception("Could not build the event from %r.", factory)
                continue
            if event is None:  # flush() markers
                continue
            for listener in self._listeners:
                try:
                    listener(event)
                except Exception:  # pylint: disable=broad-except
                    if listener in self._failed:
                        logger.debug("Listener %r failed again.", listener, exc_info=True)
                    else:
                        self._failed.add(listener)
                        logger.exception("Listener %r failed on %r; training goes on.",
                                         listener, event)

