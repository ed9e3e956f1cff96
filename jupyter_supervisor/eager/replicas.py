"""The workers of a TensorFlow 2 multi-worker run, as the step boundary sees them: ``Replicas``.

Every worker runs the same cell under ``tf.distribute.MultiWorkerMirroredStrategy`` (its
cluster comes from ``TF_CONFIG``); each step's gradients are all-reduced, so a worker that
stops alone leaves the others blocked in the next step. Two agreements keep them in step,
each an all-reduce over the strategy's own collectives (no channel of our own):

- at the restore: the chief restores its newest checkpoint, then says which one; every
  other worker restores that very checkpoint from the shared logdir (or fails saying so);
- at each step boundary: whether any worker asked to stop. All of them then end at that
  boundary, and the chief writes the final checkpoint of that step.

Only the chief writes checkpoints: writing a ``tf.train.Checkpoint`` of mirrored variables is
local to the process (each worker holds the same values), so the others need not take part.
A worker that dies fails the others through the strategy's coordination service, whose
heartbeat error names the lost task; one whose cell fails tells them through the same service
(``report_failure``), so that none is left waiting in its next all-reduce.
"""
import logging
import re
from typing import Dict, List, Optional

import tensorflow as tf

from .. import compat
from .._validate import invalid
from .variables import base_variable, is_variable


logger = logging.getLogger("jupyter_supervisor")

# Starts the message a failing worker reports to the others (``report_failure``).
_FAILED = "jupyter_supervisor: "

# How TensorFlow names a task in its errors: /job:worker/replica:0/task:1.
_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")


class WorkerLostError(RuntimeError):
    """A worker of a multi-worker run is gone (its process died, or it no longer answers): the
    others cannot take a step without it."""


def _strategies(objects: Dict[str, object]) -> list:
    """The distribution strategies the variables of ``objects`` were made under."""
    found = []
    for obj in objects.values():
        variables = [obj] if is_variable(obj) else list(getattr(obj, "variables", ()))
        for variable in variables:
            if is_variable(variable):
                variable = base_variable(variable)
            strategy = getattr(variable, "distribute_strategy", None)
            if strategy is not None and not any(strategy is s for s in found):
                found.append(strategy)
    return found


class Replicas:
    """This worker (``index`` of ``workers``; the chief is ``is_chief``) among the workers
    of a multi-worker run. ``attach`` finds the strategy of what the run tracks; then
    ``chief_restored`` and ``stops`` run the all-reduces (in the training thread, where every
    worker calls them at the same step)."""

    def __init__(self, index: int, workers: int, is_chief: bool):
        self.index = index
        self.workers = workers
        self.is_chief = is_chief
        self._sum = None
        self._local = 1   # replicas (devices) of each worker: each adds the worker's values

    def attach(self, objects: Dict[str, object]) -> None:
        """Finds the MultiWorkerMirroredStrategy that made the variables of ``objects``;
        ValueError when there is none (each worker would train its own model, silently)."""
        for strategy in _strategies(objects):
            if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
                self._sum = tf.function(
                    lambda values, s=strategy: s.reduce(
                        tf.distribute.ReduceOp.SUM, s.run(tf.identity, args=(values,)),
                        axis=None))
                self._local = len(strategy.extended.worker_devices)
                return
        raise ValueError(invalid(
            "objects", sorted(objects), f"objects made under a "
            f"tf.distribute.MultiWorkerMirroredStrategy scope: TF_CONFIG names {self.workers} "
            "workers, and without the strategy each would train a model of its own. Build "
            "the model and optimizer in `with strategy.scope():`"))

    def _gather(self, value: float) -> List[int]:
        """Each worker's ``value`` (a whole number), by worker index."""
        values = [0.0] * self.workers
        values[self.index] = float(value)
        total = self._sum(tf.constant(values, tf.float64)).numpy()
        return [round(float(v) / self._local) for v in total]

    def chief_restored(self, step: Optional[int]) -> Optional[int]:
        """After the chief's restore: the step of the checkpoint it restored (``step`` on the
        chief, None when it restored none), for every worker. The workers wait here until the
        chief restored, so the checkpoint they then read is complete."""
        restored = self._gather(1.0 if self.is_chief and step is not None else 0.0)
        steps = self._gather(float(step) if self.is_chief and step is not None else 0.0)
        return sum(steps) if any(restored) else None

    def stops(self, stop: bool) -> List[int]:
        """At a step boundary: the workers that asked to stop (every worker gets the same
        list; empty: train on)."""
        return [i for i, v in enumerate(self._gather(1.0 if stop else 0.0)) if v]

    def report_failure(self, error: BaseException) -> None:
        """This worker's cell failed with ``error``: tells the other workers through the
        coordination service, which aborts their collectives (each then fails with a
        WorkerLostError naming this worker, instead of waiting in its next all-reduce)."""
        message = f"{_FAILED}worker {self.index} failed: {type(error).__name__}: {error}"
        try:
            compat.report_error_to_cluster(message[:2000])
        except Exception as e:  # pylint: disable=broad-except
            logger.warning("Could not tell the other workers that this one failed (%s): they "
                           "wait in their next all-reduce until stopped.", e)

    def lost(self, error: BaseException, step: Optional[int]) -> Optional[WorkerLostError]:
        """The WorkerLostError that ``error`` (the collective's, or the coordination
        service's) means, naming the lost task; None for an error of another kind."""
        text = str(error)
        resume = (" Restart the kernels, fix what failed, and re-run the cell on every worker: "
                  "all of them resume from the chief's newest checkpoint"
                  + (f" (this worker stopped at step {step})." if step is not None else "."))
        if _FAILED in text and isinstance(error, tf.errors.OpError):
            failed = text.split(_FAILED, 1)[1].split("\n", 1)[0].strip()
            return WorkerLostError(f"The run ended on every worker: {failed}." + resume)
        if not isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError,
                                  tf.errors.DeadlineExceededError)):
            return None
        tasks = sorted({m.group(0) for m in _TASK.finditer(
            text.split("unhealthy", 1)[1] if "unhealthy" in text else text)})
        who = ", ".join(tasks) if tasks else "a worker"
        return WorkerLostError(
            f"Lost {who} of this {self.workers}-worker run (it stopped answering: its process "
            "died, or its machine is gone), so no worker can take a step. Restart it and re-run "
            "the cell on every worker: all of them resume from the chief's newest checkpoint"
            + (f" (this worker stopped at step {step})." if step is not None else "."))
