"""The standard services of the graph Supervisor: checkpoints, summaries and the step counter
(the eager backend does all three at step boundaries in its training thread), and how the graph
side reads a global step.

Each service is a TensorFlow ``LooperThread`` on the Supervisor's Coordinator: it runs once at
start, then every ``interval`` seconds, waits on the Coordinator's stop event (never sleeps), and
an exception it raises is reported to the Coordinator, which stops the run and re-raises it from
``join()``. A service is given only what it needs (a callable that saves, a summary writer, a step
reader), never the Supervisor itself.
"""
import logging
import time
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from .. import events

logger = logging.getLogger("jupyter_supervisor")

_Summary = tf.compat.v1.Summary


def read_step(sess, step_tensor) -> int:
    """Returns the value of a global step tensor of shape [] or [1] as a Python int.

    TensorFlow's own ``training_util.global_step`` calls ``int()`` on the fetched value, which
    NumPy 2 refuses for a one-element array; this reads both shapes.
    """
    return step_value(sess.run(step_tensor))


def step_value(value) -> int:
    """The int in a fetched global step of shape [] or [1]."""
    array = np.asarray(value)
    if array.size != 1:
        raise ValueError(
            f"The global step must hold one integer; it has shape {list(array.shape)}.")
    return int(array.reshape(()))


class CheckpointService(tf.compat.v1.train.LooperThread):
    """Calls ``save()`` at start and then every ``interval`` seconds."""

    def __init__(self, coord, interval: float, save: Callable[[], object]):
        super().__init__(coord, interval)
        self.name = "jupyter_supervisor-checkpoint"
        self._save = save

    def run_loop(self):
        self._save()


class SummaryService(tf.compat.v1.train.LooperThread):
    """Computes the summary op and writes it every ``interval`` seconds.

    ``compute()`` returns ``(serialized_summary, step_or_None)``; ``write(summary, step)`` writes
    it to the event file and reports it.
    """

    def __init__(self, coord, interval: float, compute: Callable[[], tuple],
                 write: Callable[[object, Optional[int]], None]):
        super().__init__(coord, interval)
        self.name = "jupyter_supervisor-summary"
        self._compute = compute
        self._write = write

    def run_loop(self):
        summary, step = self._compute()
        logger.debug("Recording summary at step %s.", step)
        self._write(summary, step)


class StepCounterService(tf.compat.v1.train.LooperThread):
    """Measures steps per second of the global step and writes it as ``<step op name>/sec``, as
    TensorFlow's does. With ``complete`` (the notebook's runs): from the session's first step
    on (TensorFlow's writes a 0 as it starts, measured over no time, which would draw a drop at
    every resume), and when it stops, once more for the steps since its last record, so that a
    session shorter than ``interval`` has a rate too (the Supervisor stops it before the final
    checkpoint, which it does not measure)."""

    def __init__(self, coord, interval: float, tag: str, read: Callable[[], int],
                 writer, hub: events.EventHub, clock: Callable[[], float] = time.time,
                 complete: bool = False):
        super().__init__(coord, interval)
        self.name = "jupyter_supervisor-step-counter"
        self._tag = tag
        self._read = read
        self._writer = writer
        self._hub = hub
        self._clock = clock
        self._complete = complete
        self._last_time = 0.0
        self._last_step = 0
        self._before_first_step = True   # with ``complete``, until then nothing is written

    def start_loop(self):
        self._last_time = self._clock()
        self._last_step = self._read()
        self._before_first_step = True

    def run_loop(self):
        self._record(self._read())

    def stop_loop(self):
        if not self._complete:
            return
        step = self._read()
        if step > self._last_step:
            self._record(step)

    def _record(self, step: int) -> None:
        now = self._clock()
        elapsed = now - self._last_time
        if step < self._last_step or (self._complete and (
                elapsed <= 0 or (self._before_first_step and step == self._last_step))):
            # A rollback (or a restore) took the step back; with ``complete``, no time was
            # measured, or no step was made since the start: measured from here.
            self._last_step, self._last_time = step, now
            return
        self._before_first_step = False
        rate = (step - self._last_step) / elapsed if elapsed > 0 else float("inf")
        rate = float(np.float32(rate))  # as the event file holds it
        self._last_step, self._last_time = step, now
        self._writer.add_summary(
            _Summary(value=[_Summary.Value(tag=self._tag, simple_value=rate)]), step)
        self._hub.emit(events.StepRate, step, rate, now, self._tag)
