"""SupervisorCallback: ``model.fit(..., callbacks=[sv.callback])`` under the eager backend.

At the start of fit it tracks the model and its optimizer (as ``model`` and ``optimizer`` in the
checkpoint) and restores the newest checkpoint: weights, optimizer state (moments,
``iterations``), the global step, and where fit was: the epoch and the batches done in it.

Resuming mid-epoch. Keras' ``BackupAndRestore`` resumes at an epoch: it sets
``model._initial_epoch``, which fit reads right after ``on_train_begin``; with an integer
``save_freq`` it records the batch too, but does not use it, so the finished batches of that
epoch are trained again. This callback sets the epoch the same way, and skips the finished
batches: until they are consumed it stands in for ``model.train_function`` with a function that
draws the batches from fit's iterator without training on them (``steps_per_execution`` at a
time), then puts the real one back. Limits:

* The skipped batches are the first j of the epoch's order. With ``shuffle=True`` (fit's
  default for arrays) the resumed epoch is reshuffled, so its remaining batches are not
  exactly the samples the crashed epoch had left (each sample is still seen once per epoch
  only if the order is the same: pass ``shuffle=False`` or a seeded, deterministic dataset).
  A ``tf.data`` input restarts from its beginning; its own state is not checkpointed.
* Skipping reads the skipped batches (input cost, no training), and other callbacks see them
  as batches with empty logs (the progress bar counts them).
* The epoch's running means (the loss in the progress bar and in History for that epoch)
  cover the batches trained after the resume only.
* With ``steps_per_execution`` > 1 a checkpoint, a stop and max_steps fall on execution
  boundaries (every N batches), not on every batch.
* A fit without ``epochs``/``steps`` known in advance (a dataset of unknown length): a
  checkpoint at an epoch's last batch resumes into that epoch, skips all of it, and runs its
  ``on_epoch_end`` (validation) again.
* Several fits in one cell body are told apart by their order: a resume skips the fits that
  had finished, and continues the one that was running.
"""
import inspect
import logging
from typing import Optional

import keras

from .._validate import invalid
from ..backend import StopBody

logger = logging.getLogger("jupyter_supervisor")


class _SkipBatches:
    """Stands in for ``model.train_function`` until ``batches`` batches were drawn from fit's
    iterator untrained; then the real function is back in place."""

    def __init__(self, model, batches: int):
        self.model = model
        self.original = model.train_function
        self.remaining = batches
        self.per_call = max(1, int(getattr(model, "steps_per_execution", 1) or 1))
        self.skipped_last = False  # the last call skipped (its batch end is not a step)

    def __call__(self, iterator):
        if self.remaining <= 0:
            self.uninstall()
            return self.original(iterator)
        count = min(self.per_call, self.remaining)
        for _ in range(count):
            next(iterator)
        self.remaining -= count
        self.skipped_last = True
        if self.remaining <= 0:
            self.uninstall()
        return {}

    def uninstall(self) -> None:
        if self.model.train_function is self:
            self.model.train_function = self.original


def _fit_argument(model, name: str):
    """The value of fit's argument ``name`` in the fit call of ``model`` running now (Keras
    does not give its arguments to callbacks), or None."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            code = frame.f_code
            if code.co_name == "fit" and frame.f_locals.get("self") is model and \
                    name in code.co_varnames[:code.co_argcount]:
                return frame.f_locals.get(name)
            frame = frame.f_back
    finally:
        del frame
    return None


class SupervisorCallback(keras.callbacks.Callback):
    """Checkpoints, resumes, reports and stops a ``model.fit`` for an EagerSupervisor. Get it
    as ``sv.callback``; see the module docstring."""

    def __init__(self, sv):
        super().__init__()
        self._sv = sv
        self._skipper: Optional[_SkipBatches] = None
        self._fit_index = -1
        self._epoch = 0
        self._begin = 0
        self._done_in_epoch = 0
        self._epochs = None
        self._batches = None
        self._stopped_in_epoch = False
        self._set_initial_epoch = False

    # ---------------------------------------------------------------------------- begin / end

    def on_train_begin(self, logs=None):
        sv = self._sv
        sv._check_active("model.fit(..., callbacks=[sv.callback])")  # pylint: disable=protected-access
        model = self.model
        if isinstance(model.train_function, _SkipBatches):  # an earlier fit raised mid-skip
            model.train_function.uninstall()
        self._fit_index = sv._fit_started()  # pylint: disable=protected-access
        sv._track_fit(model)  # pylint: disable=protected-access
        if sv._stop_requested:  # pylint: disable=protected-access
            # Stopped before this fit (a stop during an earlier fit, max_steps restored):
            # the body did not look, so it ends here.
            raise StopBody()
        self._epochs = self.params.get("epochs")
        self._batches = self.params.get("steps")
        epoch, batch = self._resume_point()
        if epoch:
            model._initial_epoch = epoch  # pylint: disable=protected-access
            self._set_initial_epoch = True
        if batch:
            self._skipper = _SkipBatches(model, batch)
            model.train_function = self._skipper
            logger.info("Resuming fit at epoch %d, batch %d (skipping the %d finished "
                        "batches of that epoch).", epoch + 1, batch, batch)
        self._epoch, self._done_in_epoch = epoch, batch
        sv._fit_position = (self._fit_index, epoch, batch)  # pylint: disable=protected-access
        sv._set_stepping(True)  # pylint: disable=protected-access
        if self._epochs is not None and epoch >= self._epochs:
            logger.info("The checkpoint is at the end of this fit (epoch %d of %d): nothing "
                        "to train.", epoch, self._epochs)

    def _resume_point(self):
        """(epoch, batches done in it) where this fit starts, from the restored checkpoint."""
        sv = self._sv
        position = sv._restored_position  # pylint: disable=protected-access
        user_epoch = _fit_argument(self.model, "initial_epoch") or 0
        if position is None or self._fit_index > position[0]:
            return int(user_epoch), 0
        if self._fit_index < position[0]:  # this fit had ended before that checkpoint
            return (self._epochs or 0), 0
        _, epoch, batch = position
        if self._batches is not None and batch >= self._batches:
            epoch, batch = epoch + 1, 0
        if user_epoch not in (0, epoch):
            raise ValueError(invalid(
                "initial_epoch", user_epoch,
                f"0 or {epoch}: the checkpoint {sv.restored_from} resumes this fit at epoch "
                f"{epoch} (0-based), batch {batch}, and fit continues from there by itself. "
                "Leave initial_epoch out, or train from another epoch in a new logdir"))
        return epoch, batch

    def on_train_end(self, logs=None):
        sv = self._sv
        if self._skipper is not None:
            self._skipper.uninstall()
            self._skipper = None
        if self._set_initial_epoch:
            self.model._initial_epoch = None  # pylint: disable=protected-access
            self._set_initial_epoch = False
        sv._save_if_moved()  # pylint: disable=protected-access
        sv._set_stepping(False)  # pylint: disable=protected-access

    # ---------------------------------------------------------------------------- epochs

    def on_epoch_begin(self, epoch, logs=None):
        if self._set_initial_epoch:  # fit has read it; later fits must not see it
            self.model._initial_epoch = None  # pylint: disable=protected-access
            self._set_initial_epoch = False
        if epoch != self._epoch:
            self._done_in_epoch = 0
        self._epoch = epoch
        self._stopped_in_epoch = False
        self._sv._fit_position = (self._fit_index, epoch, self._done_in_epoch)  # pylint: disable=protected-access

    def on_epoch_end(self, epoch, logs=None):
        sv = self._sv
        partial = self._stopped_in_epoch or (
            self._batches is not None and self._done_in_epoch < self._batches)
        if not partial:
            self._epoch, self._done_in_epoch = epoch + 1, 0
            sv._fit_position = (self._fit_index, epoch + 1, 0)  # pylint: disable=protected-access
        if logs:
            sv._write_scalars(logs, sv._step, prefix="epoch_")  # pylint: disable=protected-access

    # ---------------------------------------------------------------------------- batches

    def on_train_batch_begin(self, batch, logs=None):
        self._begin = batch

    def on_train_batch_end(self, batch, logs=None):
        sv = self._sv
        self._done_in_epoch = batch + 1
        sv._fit_position = (self._fit_index, self._epoch, batch + 1)  # pylint: disable=protected-access
        skipper = self._skipper
        if skipper is not None and skipper.skipped_last:
            skipper.skipped_last = False
            return
        if sv._fit_batches(batch - self._begin + 1, logs or {},  # pylint: disable=protected-access
                           (self._epoch, self._epochs, batch + 1, self._batches)):
            self.model.stop_training = True
            self._stopped_in_epoch = True
