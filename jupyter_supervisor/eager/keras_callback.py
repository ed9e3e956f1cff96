"""SupervisorCallback: ``model.fit(..., callbacks=[sv.callback])`` under the eager backend.

At the start of fit it tracks the model and its optimizer (as ``model`` and ``optimizer`` in the
checkpoint) and restores the newest checkpoint: weights, optimizer state (moments,
``iterations``), the global step, and where fit was: the epoch and the batches done in it.

Step boundaries. For the duration of fit, ``model.train_function`` (what fit calls once per
batch, or per ``steps_per_execution`` batches) is wrapped: before each call, the batches of the
previous call are counted, and a due or asked checkpoint, summaries, max_steps and the stop are
handled there, in the training thread, between two batches. A stop found there trains no
further batch: the call returns the previous logs and sets ``model.stop_training``, so fit ends
after it. The callback itself has no batch-end hook, since Keras converts every batch's logs to
Python numbers (waiting for the step) as soon as any callback has one; so fit keeps its
asynchronous batch dispatch. The last batch of an epoch is counted at ``on_epoch_end``. So
during fit ``sv.read_step()`` (and the batch count in Progress records) trail the batch in
flight by one call.

Resuming mid-epoch. Keras' ``BackupAndRestore`` resumes at an epoch: it sets
``model._initial_epoch``, which fit reads right after ``on_train_begin``; with an integer
``save_freq`` it records the batch too, but does not use it, so the finished batches of that
epoch are trained again. This callback sets the epoch the same way, and skips the finished
batches: until they are consumed it stands in for ``model.train_function`` with a function that
draws the batches from fit's iterator without training on them (``steps_per_execution`` at a
time), then puts the real one back.

``initial_epoch`` means what it means to Keras: where the first run of the fit starts. On a
re-run, a checkpoint of that fit (at or after ``initial_epoch``) wins; one before it was
written by a fit that started earlier, and is refused with what to do. The random state that
training advances (the seed generators of Dropout, GaussianNoise, the random augmentation
layers) is in every checkpoint (``checkpointer``), so with the same seeds and deterministic ops
a resumed fit ends bit for bit where an uninterrupted one does. Limits:

* The skipped batches are drawn from a new input (the re-run cell builds it), put where the
  run's was first (``data_position``: a ``tf.data`` shuffle's epoch order, a generator's
  earlier draws, a PyDataset's epoch hooks); where the order cannot be replayed (arrays
  shuffled with no global seed, an unseeded ``Dataset.shuffle``), or the input changed since
  (another batch size...), the run's output says so once.
* Skipping reads the skipped batches (input cost, no training), and other callbacks see them
  as batches with empty logs (the progress bar counts them); the call that ends fit on a stop
  is seen as a batch too, with the logs of the batch before.
* The epoch's running means (the loss in the progress bar and in History for that epoch)
  cover the batches trained after the resume only.
* With ``steps_per_execution`` > 1 a checkpoint, a stop and max_steps fall on execution
  boundaries (every N batches), not on every batch.
* A stop or a crash after an epoch's last batch but before its ``on_epoch_end`` (during its
  validation) resumes at the next epoch: that epoch's validation and epoch-end callbacks do
  not run again.
* A dataset of unknown length (fit's ``steps`` is None): the boundary after an epoch's last
  batch comes when fit asks for one more batch, before the data says it ran out, so a
  checkpoint there records "epoch e, all its batches done" as "epoch e, batch M". A resume
  from it skips the M batches, finds the data exhausted and ends epoch e again: no batch is
  trained twice, but that epoch's validation and epoch-end callbacks run again.
* Several fits in one cell body are told apart by their order: a resume skips the fits that
  had finished, and continues the one that was running.
"""
import logging
from typing import Optional

import keras

from .. import compat
from .._validate import invalid
from .data_position import FitInput

logger = logging.getLogger("jupyter_supervisor")


class _TrainFunction:
    """Stands in for ``model.train_function`` during one fit: skips the batches a resume must
    not train again, and before each call ends the previous one at a step boundary."""

    def __init__(self, callback, model, skip: int, fit_input=None):
        self.callback = callback
        self.model = model
        self.original = model.train_function
        self.skip = skip
        self.fit_input = fit_input  # data_position.FitInput: where fit's input is
        self.per_call = max(1, int(getattr(model, "steps_per_execution", 1) or 1))
        self.begin = 0                    # the first batch of the coming call (batch_begin)
        self.pending: Optional[int] = None  # the first batch of a call trained, not counted
        self.logs = {}

    def __call__(self, iterator):
        if not self.callback.sv.trains_here():
            self.uninstall()  # a fit outside the session that installed it
            return self.original(iterator)
        if self.fit_input is not None:  # data_position: which iterator fit draws from
            self.fit_input.used(iterator)
        if self.skip > 0:
            count = min(self.per_call, self.skip)
            for _ in range(count):
                next(iterator)
            self.skip -= count
            return {}
        if self.pending is not None and self.callback.end_batches(self.begin):
            return self.logs  # stopped: this call trains nothing, and fit ends after it
        self.logs = self.original(iterator)
        self.pending = self.begin
        return self.logs

    def uninstall(self) -> None:
        if self.model.train_function is self:
            self.model.train_function = self.original


class SupervisorCallback(keras.callbacks.Callback):
    """Checkpoints, resumes, reports and stops a ``model.fit`` for an EagerSupervisor. Get it
    as ``sv.callback``; see the module docstring."""

    def __init__(self, sv):
        super().__init__()
        self.sv = sv
        self._function: Optional[_TrainFunction] = None
        self._input: Optional[FitInput] = None  # data_position
        self._start = None   # the supervisor's FitStart of the running fit
        self._epoch = 0
        self._done_in_epoch = 0
        self._epochs = None
        self._batches = None
        self._stopped_in_epoch = False
        self._set_initial_epoch = False

    # ---------------------------------------------------------------------------- begin / end

    def on_train_begin(self, logs=None):
        model = self.model
        # First: it raises RunConflictError when another live run trains this model (whose
        # train_function is then that run's, not to be touched), and StopBody when stopped
        # before this fit (a stop during an earlier fit, max_steps restored): the body did not
        # look, so it ends here.
        self._start = self.sv.fit_begin(model)
        if isinstance(model.train_function, _TrainFunction):  # an earlier fit raised
            model.train_function.uninstall()
        self._epochs = self.params.get("epochs")
        self._batches = self.params.get("steps")
        epoch, batch = self._resume_point()
        # -- data_position: the input resumes where the run's was (or says why it cannot).
        self._input = FitInput(model)
        index, position = self._start
        if position is not None and index == position[0] and \
                (self._epochs is None or epoch < self._epochs):
            first = compat.fit_argument(model, "initial_epoch") or 0
            epoch, batch = self._input.resume(self.sv.restored_input, position[1:], epoch,
                                              batch, first, self.sv.restored_from)
        self.sv.fit_input(self._input.saved)
        # --
        if epoch:
            compat.set_initial_epoch(model, epoch)  # as BackupAndRestore
            self._set_initial_epoch = True
        if batch:
            logger.info("Resuming fit at epoch %d, batch %d (skipping the %d finished "
                        "batches of that epoch).", epoch + 1, batch, batch)
        self._function = _TrainFunction(self, model, batch, self._input)
        model.train_function = self._function
        self._epoch, self._done_in_epoch = epoch, batch
        self._stopped_in_epoch = False
        self.sv.fit_at(epoch, batch)
        if self._epochs is not None and epoch >= self._epochs:
            logger.info("The checkpoint is at the end of this fit (epoch %d of %d): nothing "
                        "to train.", epoch, self._epochs)

    def _resume_point(self):
        """(epoch, batches done in it) where this fit starts, from the restored checkpoint."""
        index, position = self._start
        user_epoch = compat.fit_argument(self.model, "initial_epoch") or 0
        if position is None or index > position[0]:
            return int(user_epoch), 0
        if index < position[0]:  # this fit had ended before that checkpoint
            return (self._epochs or 0), 0
        _, epoch, batch = position
        if self._batches is not None and batch >= self._batches:
            epoch, batch = epoch + 1, 0
        # As in Keras, initial_epoch is where the first run of this fit starts: a checkpoint
        # of this fit is at or after it, and wins. One before it was written by a fit that
        # started earlier (another initial_epoch, or another cell in this logdir).
        if user_epoch > epoch:
            raise ValueError(invalid(
                "initial_epoch", user_epoch,
                f"at most {epoch}: the checkpoint {self.sv.restored_from} is at epoch {epoch} "
                f"(0-based), batch {batch} of this fit, before the epoch it is told to start "
                "at, so it was written by a fit that started earlier. Give the "
                "initial_epoch that fit had (re-running it continues from the checkpoint), "
                "or start this fit in a new logdir"))
        return epoch, batch

    def on_train_end(self, logs=None):
        self._end_pending()
        self.uninstall()
        self.sv.fit_end()

    def uninstall(self) -> None:
        """Gives the model its own train_function back, and forgets the resume epoch."""
        if self._function is not None:
            self._function.uninstall()
            self._function = None
        self._input = None
        if self._set_initial_epoch:
            compat.set_initial_epoch(self.model, None)
            self._set_initial_epoch = False

    # ---------------------------------------------------------------------------- epochs

    def on_epoch_begin(self, epoch, logs=None):
        if self._set_initial_epoch:  # fit has read it; later fits must not see it
            compat.set_initial_epoch(self.model, None)
            self._set_initial_epoch = False
        if epoch != self._epoch:
            self._done_in_epoch = 0
        self._epoch = epoch
        self._stopped_in_epoch = False
        self.sv.fit_at(epoch, self._done_in_epoch)

    def on_epoch_end(self, epoch, logs=None):
        function = self._function
        pending = function is not None and function.pending is not None
        done = self._done_in_epoch
        if pending:
            done = function.pending + function.per_call
            if self._batches is not None:
                done = min(done, self._batches)
        if self._batches is not None:
            complete = done >= self._batches
        else:  # the data ran out, unless a stop broke the epoch off
            complete = not self._stopped_in_epoch and not self.model.stop_training
        if complete and self._input is not None:  # data_position: where the next one starts
            self._input.epoch_ended(done)
        if pending:
            self.end_batches(done, mid_epoch=False, epoch_complete=complete)
        if complete:
            self._epoch, self._done_in_epoch = epoch + 1, 0
            self.sv.fit_at(epoch + 1, 0)
        if logs:
            self.sv.fit_epoch_end(logs)

    # ---------------------------------------------------------------------------- batches

    def on_train_batch_begin(self, batch, logs=None):
        if self._function is not None:
            self._function.begin = batch

    def _end_pending(self) -> None:
        """The last call of an epoch (or of fit) is counted once it is over."""
        function = self._function
        if function is None or function.pending is None:
            return
        end = function.pending + function.per_call
        if self._batches is not None:
            end = min(end, self._batches)
        self.end_batches(end, mid_epoch=False)

    def end_batches(self, done: int, mid_epoch: bool = True,
                     epoch_complete: bool = False) -> bool:
        """The step boundary after the call that began at ``pending``, with ``done`` batches of
        the epoch done (``epoch_complete``: all of them; a checkpoint here resumes at the next
        epoch). True: fit must stop (``model.stop_training`` is set)."""
        function = self._function
        count = max(1, done - function.pending)
        function.pending = None
        self._done_in_epoch = done
        if epoch_complete:
            self.sv.fit_at(self._epoch + 1, 0)
        else:
            self.sv.fit_at(self._epoch, done)
        if self.sv.fit_batches(count, function.logs,
                               (self._epoch, self._epochs, done, self._batches)):
            self.model.stop_training = True
            self._stopped_in_epoch = mid_epoch
            return True
        return False
