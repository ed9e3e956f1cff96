"""SupervisorCallback: ``model.fit(..., callbacks=[sv.callback])`` under the eager backend.

At the start of fit it tracks the model and its optimizer (as ``model`` and ``optimizer`` in the
checkpoint) and restores the newest checkpoint: weights, optimizer state (moments,
``iterations``, the learning rate: ``learning_rates``), the global step, where fit was (the
epoch and the batches done in it), the state of fit's callbacks (``callback_state``) and the
epoch's running metrics. A model whose variables appear only at its first step (a subclassed
model not built before fit) is built first from the data's shapes, as Keras does under a
distribution strategy (``_build_for_fit``).

Step boundaries. For the duration of fit, ``model.train_function`` (what fit calls once per
batch, or per ``steps_per_execution`` batches) is wrapped: before each call, the batches of the
previous call are counted, and a due or asked checkpoint, summaries, max_steps and the stop are
handled there, in the training thread, between two batches. The callback itself has no
batch-end hook, since Keras converts every batch's logs to Python numbers (waiting for the step)
as soon as any callback has one; so fit keeps its asynchronous batch dispatch. So during fit
``sv.read_step()`` (and the batch count in Progress records) trail the batch in flight by one
call. An epoch has two more boundaries: once its batches are all trained (before its
validation, or its end without one: the epoch's end is then pending), and once every callback's
``on_epoch_end`` ran (the epoch ended: its position is the next epoch's start; a new best of
``--keep-best`` is saved there, holding what the callbacks decided at that end). During the
validation, each validation batch is a boundary too (the weights do not change there), so a
checkpoint asked for, or a stop, does not wait for the validation's end.

A stop (the Stop button, ``%supervise stop``, a signal, max_steps) found at a boundary inside
an epoch writes the final checkpoint at once, and ends fit as Keras' ``stop_training`` does,
except that the half epoch is not taken for an epoch: its validation and the callbacks'
``on_epoch_end`` do not run (no "best" decided on half an epoch, no epoch values in the event
file or the panel), and a resume runs them when that epoch is complete. Then fit ends as it
does: the other callbacks' ``on_train_end`` run (with the half epoch's training logs, which
Keras gives them), and the body goes on after ``fit``. The one exception: max_steps reached
with the epoch's batches all trained lets that epoch end (validation, callbacks) before fit
stops. The checkpoint that ends a fit is written before the optimizer's
``finalize_variable_values`` (EMA: ``use_ema=True`` swaps the averages into the model there):
it holds the training state, the raw weights and the averages, never the swapped values.

Resuming mid-epoch. Keras' ``BackupAndRestore`` resumes at an epoch: it sets
``model._initial_epoch``, which fit reads right after ``on_train_begin``; with an integer
``save_freq`` it records the batch too, but does not use it, so the finished batches of that
epoch are trained again. This callback sets the epoch the same way, and skips the finished
batches: until they are consumed it stands in for ``model.train_function`` with a function that
draws the batches from fit's iterator without training on them (``steps_per_execution`` at a
time), then puts the real one back. The epoch's running metrics (the mean loss fit reports at
the epoch's end) are restored after fit resets them, so the epoch's values and the callbacks'
decisions on them are the uninterrupted run's. A checkpoint whose epoch's end was pending
resumes by skipping all of its batches, then ends that epoch.

``initial_epoch`` means what it means to Keras: where the first run of the fit starts. On a
re-run, a checkpoint of that fit (at or after ``initial_epoch``) wins; one before it was
written by a fit that started earlier, and is refused with what to do. A fit that a callback
ended (EarlyStopping) is over: re-running it trains nothing. The random state that training
advances (the seed generators of Dropout, GaussianNoise, the random augmentation layers) is in
every checkpoint (``checkpointer``), so with the same seeds and deterministic ops a resumed fit
ends bit for bit where an uninterrupted one does. Limits:

* The skipped batches are drawn from a new input (the re-run cell builds it), put where the
  run's was first (``data_position``: a ``tf.data`` shuffle's epoch order, a generator's
  earlier draws, a PyDataset's epoch hooks); where the order cannot be replayed (arrays
  shuffled with no global seed, an unseeded ``Dataset.shuffle``), or the input changed since
  (another batch size...), the run's output says so once.
* Skipping reads the skipped batches (input cost, no training), and other callbacks see them
  as batches whose logs are the restored running means (the progress bar counts them); the
  call that ends fit on a stop is seen as a batch too, with the logs of the batch before.
* With ``steps_per_execution`` > 1 a checkpoint, a stop and max_steps fall on execution
  boundaries (every N batches), not on every batch.
* Several fits in one cell body are told apart by their order: a resume skips the fits that
  had finished, and continues the one that was running.
"""
import logging
from typing import Optional

import keras
import numpy as np

from .. import capabilities, compat
from .._validate import invalid
from .callback_state import CallbackStates
from .data_position import FitInput
from .fit_seam import FitSide

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
        if not self.callback.side.trains_here():
            self.uninstall()  # a fit outside the session that installed it
            return self.original(iterator)
        if self.fit_input is not None:  # data_position: which iterator fit draws from
            self.fit_input.used(iterator)
        if self.skip > 0:
            count = min(self.per_call, self.skip)
            for _ in range(count):
                next(iterator)
            self.skip -= count
            # The epoch's running means (restored): fit takes them for the epoch's logs when
            # the skip ends it (a checkpoint whose epoch's end was pending).
            return self.model.get_metrics_result()
        if self.pending is not None and self.callback.end_batches(self.begin):
            return self.logs  # stopped: this call trains nothing, and fit ends after it
        self.logs = self.original(iterator)
        self.pending = self.begin
        return self.logs

    def uninstall(self) -> None:
        if self.model.train_function is self:
            self.model.train_function = self.original


def _build_for_fit(model, metrics: bool = False) -> None:
    """Makes the variables of ``model``'s running fit before its first step (the model's and
    the optimizer's; with ``metrics``, the compiled metrics' too) from the element spec of
    fit's data, as Keras does under a distribution strategy: no batch is drawn for it."""
    if not capabilities.holds("build before restore"):  # said at the run's start
        return
    if model.built and not (metrics and compat.compiled_unbuilt(model)):
        return
    spec = compat.fit_data_spec(model)
    if spec is not None:
        compat.symbolic_build(model, keras.tree.map_structure(
            lambda s: None if s is None else keras.KerasTensor(s.shape, s.dtype.name), spec))


def _metric_values(model) -> list:
    """The values of the model's metric variables (the running means of the epoch)."""
    return [np.asarray(v.numpy()).tolist() for v in model.metrics_variables]


def _set_metric_values(model, values) -> bool:
    """Puts back ``values`` (``_metric_values``); False when they do not fit the metrics."""
    variables = model.metrics_variables
    arrays = [np.asarray(v) for v in values]
    if len(arrays) != len(variables) or any(
            a.shape != tuple(v.shape) for a, v in zip(arrays, variables)):
        return False
    for variable, array in zip(variables, arrays):
        variable.assign(array.astype(variable.dtype))
    return True


class SupervisorCallback(keras.callbacks.Callback):
    """Checkpoints, resumes, reports and stops a ``model.fit`` for an EagerSupervisor. Get it
    as ``sv.callback``; see the module docstring. ``side``: the session's ``fit_seam.FitSide``,
    all that it asks and tells the session; the session asks it only ``fit_seam.FitHooks``."""

    def __init__(self, side: FitSide):
        super().__init__()
        self.side = side
        self._function: Optional[_TrainFunction] = None
        self._input: Optional[FitInput] = None  # data_position
        self._start = None   # the FitStart of the running fit
        self._epoch = 0
        self._done_in_epoch = 0
        self._epochs = None
        self._batches = None
        self._set_initial_epoch = False
        self._list = None            # fit's CallbackList, with two methods of ours on it
        self._states: Optional[CallbackStates] = None
        self._restore = None         # the checkpoint's state of this fit, until given back
        self._ending = False         # the epoch's batches are all trained; its end is pending
        self._metrics: Optional[list] = None   # the epoch's metric values when they were
        self._half = False           # the epoch is cut by a stop: its end does not run
        self._stopped = False        # this fit was stopped (by the run, not by a callback)
        self._stopped_by_callback = False  # ... and a callback ended it: it is over
        self._validating = False
        self._original_evaluate = None

    # ---------------------------------------------------------------------------- begin / end

    def on_train_begin(self, logs=None):
        model = self.model
        callbacks = compat.fit_callbacks(model)
        listed = list(getattr(callbacks, "callbacks", None) or [])
        if any(isinstance(c, keras.callbacks.BackupAndRestore) for c in listed):
            raise ValueError(invalid(
                "callbacks", [type(c).__name__ for c in listed],
                "sv.callback without keras.callbacks.BackupAndRestore: both restore the model "
                "when fit starts (sv.callback from its checkpoints, with the optimizer, the "
                "batch and the callbacks' state), so one would undo the other. Remove "
                "BackupAndRestore"))
        # Variables that Keras would make in the first step must exist to be restored.
        _build_for_fit(model)
        # It raises RunConflictError when another live run trains this model (whose
        # train_function is then that run's, not to be touched), and StopBody when stopped
        # before this fit (a stop during an earlier fit, max_steps restored): the body did not
        # look, so it ends here.
        self._start = self.side.fit_begin(model)
        if isinstance(model.train_function, _TrainFunction):  # an earlier fit raised
            model.train_function.uninstall()
        self._epochs = self.params.get("epochs")
        self._batches = self.params.get("steps")
        self._states = CallbackStates([c for c in listed if c is not self],
                                      self.side.keep_arrays, self.side.restored_arrays)
        self._ending = self._half = self._stopped = self._stopped_by_callback = False
        self._metrics = self._restore = None
        epoch, batch = self._resume_point()
        # -- data_position: the input resumes where the run's was (or says why it cannot).
        self._input = FitInput(model)
        index, position = self._start
        if position is not None and index == position[0] and \
                (self._epochs is None or epoch < self._epochs):
            first = compat.fit_argument(model, "initial_epoch") or 0
            epoch, batch = self._input.resume(self.side.restored_input, position[1:], epoch,
                                              batch, first, self.side.restored_from)
        self.side.fit_input(self._input.saved)
        # --
        if epoch:
            compat.set_initial_epoch(model, epoch)
            self._set_initial_epoch = True
        if batch:
            logger.info("Resuming fit at epoch %d, batch %d (skipping the %d finished "
                        "batches of that epoch).", epoch + 1, batch, batch)
            _build_for_fit(model, metrics=True)  # to take the epoch's means
        self._function = _TrainFunction(self, model, batch, self._input)
        model.train_function = self._function
        self._epoch, self._done_in_epoch = epoch, batch
        self.side.fit_at(epoch, batch)
        self.side.fit_part(self._part)
        self._install(callbacks)

    def _resume_point(self):
        """(epoch, batches done in it) where this fit starts, from the restored checkpoint;
        keeps in ``_restore`` the state to give back to the callbacks and metrics."""
        index, position = self._start
        user_epoch = compat.fit_argument(self.model, "initial_epoch") or 0
        if position is None or index > position[0]:
            return int(user_epoch), 0
        if index < position[0]:  # this fit had ended before that checkpoint
            return (self._epochs or 0), 0
        _, epoch, batch = position
        saved = self.side.restored_part("fit")
        self._restore = saved if saved.get("index") == index else {}
        # As in Keras, initial_epoch is where the first run of this fit starts: a checkpoint
        # of this fit is at or after it, and wins. One before it was written by a fit that
        # started earlier (another initial_epoch, or another cell in this logdir).
        if user_epoch > epoch:
            raise ValueError(invalid(
                "initial_epoch", user_epoch,
                f"at most {epoch}: the checkpoint {self.side.restored_from} is at epoch {epoch} "
                f"(0-based), batch {batch} of this fit, before the epoch it is told to start "
                "at, so it was written by a fit that started earlier. Give the "
                "initial_epoch that fit had (re-running it continues from the checkpoint), "
                "or start this fit in a new logdir"))
        if self._restore.get("stopped_by_callback") and self._epochs is not None:
            logger.info("This fit had ended at epoch %d of %d: a callback stopped it "
                        "(model.stop_training). Nothing to train.", epoch, self._epochs)
            return self._epochs, 0
        if self._epochs is not None and epoch >= self._epochs:
            logger.info("The checkpoint is at the end of this fit (epoch %d of %d): nothing "
                        "to train.", epoch, self._epochs)
        return epoch, batch

    def _install(self, callbacks) -> None:
        """Puts our epoch hooks on fit's CallbackList (they must run before, or after, every
        callback's own), and our evaluate on the model (a validation is a boundary first)."""
        self._list = callbacks
        if callbacks is not None:
            begin, end = callbacks.on_epoch_begin, callbacks.on_epoch_end

            def on_epoch_begin(epoch, logs=None):
                self._give_back()
                begin(epoch, logs)

            def on_epoch_end(epoch, logs=None):
                self._batches_done()
                if self._half:
                    return  # half an epoch: its end runs when a resume completes it
                end(epoch, logs)
                self._epoch_ended(epoch)

            callbacks.on_epoch_begin, callbacks.on_epoch_end = on_epoch_begin, on_epoch_end
        model = self.model
        self._original_evaluate = original = model.evaluate

        def evaluate(*args, **kwargs):
            if not compat.is_fit_validation(kwargs) or not self.side.trains_here():
                return original(*args, **kwargs)  # not fit's validation
            self._batches_done()
            if self._half:
                return {}
            self._validating = True
            try:
                return original(*args, **kwargs)
            finally:
                self._validating = False

        model.evaluate = evaluate

    def on_train_end(self, logs=None):
        final = self._part()
        self.side.fit_part(lambda: final)  # what a save after fit holds of it
        self.uninstall()
        self.side.fit_end()

    def uninstall(self) -> None:
        """Gives the model its own train_function and evaluate back, fit's CallbackList its
        methods, and forgets the resume epoch and the callbacks (an ended run keeps no model
        alive)."""
        self._states = self._restore = None
        if self._function is not None:
            self._function.uninstall()
            self._function = None
        if self._input is not None:
            self._input.ended()
        self._input = None
        if self._original_evaluate is not None:
            if "evaluate" in vars(self.model):
                del self.model.evaluate
            self._original_evaluate = None
        if self._list is not None:
            for name in ("on_epoch_begin", "on_epoch_end"):
                vars(self._list).pop(name, None)
            self._list = None
        if self._set_initial_epoch:
            compat.set_initial_epoch(self.model, None)
            self._set_initial_epoch = False

    def release(self) -> None:
        """Forgets the model (an ended run keeps none alive)."""
        self.set_model(None)

    def before_final_save(self) -> None:
        """Before the checkpoint that ends this fit (the optimizer's finalize_variable_values
        follows): a fit that trained no epoch gives the callbacks their state now (their
        on_train_end may use it)."""
        if self._function is not None:
            self._give_back()

    # ---------------------------------------------------------------------------- state

    def _part(self) -> dict:
        """This fit's share of the checkpoint's training state (see ``callback_state``)."""
        if self._restore:  # not given back yet: the checkpoint's state is still the state
            return self._restore
        return {"index": self._start.index,
                "callbacks": self._states.capture(),
                "metrics": self._metrics if self._ending else (
                    _metric_values(self.model) if self._done_in_epoch else None),
                "stopped_by_callback": self._stopped_by_callback}

    def _give_back(self) -> None:
        """The restored state to the callbacks (after every on_train_begin, which resets
        them) and the epoch's running metrics (after fit reset them), once."""
        saved, self._restore = self._restore, None
        if saved is None:
            return
        notes = self._states.restore(saved.get("callbacks"))
        if self._done_in_epoch and (saved.get("metrics") is None or
                                    not _set_metric_values(self.model, saved["metrics"])):
            notes.append(f"The running means of epoch {self._epoch + 1} (the loss and metrics "
                         "fit reports at its end) cover the batches trained after this "
                         "resume only: the checkpoint holds no values for this model's "
                         "metrics.")
        for note in notes:
            logger.warning(note)

    # ---------------------------------------------------------------------------- epochs

    def on_epoch_begin(self, epoch, logs=None):
        if self._list is None:  # no CallbackList of fit's to hook: give back from here
            self._give_back()
        if self._set_initial_epoch:  # fit has read it; later fits must not see it
            compat.set_initial_epoch(self.model, None)
            self._set_initial_epoch = False
        if epoch != self._epoch:
            self._done_in_epoch = 0
        self._epoch = epoch
        self.side.fit_at(epoch, self._done_in_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if self._list is None:  # no CallbackList of fit's to hook: the boundaries from here
            self._batches_done()
            if self._half:
                return
        if logs:
            self.side.fit_epoch_end(epoch, logs)
        if self._list is None:
            self._epoch_ended(epoch)

    def _batches_done(self) -> None:
        """The boundary once the epoch's batches are all trained (before its validation, or
        its end): its end is pending from here. A stop found here cuts the epoch (its end does
        not run), unless it is max_steps only: then the epoch ends, and fit after it."""
        if self._ending or self._half or self._function is None:
            return
        function = self._function
        done = self._done_in_epoch
        if function.pending is not None:
            done = function.pending + function.per_call
            if self._batches is not None:
                done = min(done, self._batches)
        self._ending = True
        self._metrics = _metric_values(self.model)
        complete = done >= self._batches if self._batches is not None else \
            not self.model.stop_training  # the data ran out, unless a callback stopped it
        if complete and self._input is not None:  # data_position: where the next one starts
            self._input.epoch_ended(done)
        # A checkpoint due here is written at the validation's first batch, or after the
        # epoch's end: the state of the next boundary but one, saved once.
        if self.end_batches(done, cut=False, due=False):
            if self.side.stop_is_max_steps():
                self._stopped = True
                self.model.stop_training = True
            else:
                self._cut()

    def _epoch_ended(self, epoch: int) -> None:
        """The boundary after every callback's on_epoch_end: the epoch is over (its position
        is the next epoch's start)."""
        self._ending = False
        self._metrics = None
        self._epoch, self._done_in_epoch = epoch + 1, 0
        self.side.fit_at(epoch + 1, 0)
        if self.model.stop_training and not self._stopped:
            self._stopped_by_callback = True  # EarlyStopping: this fit is over
        if self.side.fit_paused(moved=True):
            self._stopped = True
            self.model.stop_training = True

    def _cut(self) -> None:
        """A stop inside the epoch: the final checkpoint now; the epoch's end will not run."""
        self._half = self._stopped = True
        self.model.stop_training = True
        self.side.final_save()

    # ---------------------------------------------------------------------------- batches

    def on_train_batch_begin(self, batch, logs=None):
        if self._function is not None:
            self._function.begin = batch

    def on_test_batch_begin(self, batch, logs=None):
        """A boundary of fit's validation: a checkpoint asked for is written; a stop cuts the
        validation (after this batch) and the epoch's end."""
        if self._validating and not self._half and self.side.fit_paused() and \
                not self.side.stop_is_max_steps():
            self._cut()
            self.model.stop_evaluating = True

    def end_batches(self, done: int, cut: bool = True, due: bool = True) -> bool:
        """The step boundary after the call that began at ``pending`` (if any), with ``done``
        batches of the epoch done (not ``due``: no due checkpoint here). True: fit must stop
        (``model.stop_training`` is set; with ``cut``, the epoch is cut there: ``_cut``)."""
        function = self._function
        count = 0
        if function.pending is not None:
            count = max(1, done - function.pending)
            function.pending = None
        self._done_in_epoch = done
        self.side.fit_at(self._epoch, done)
        if not self.side.fit_batches(count, function.logs,
                                   (self._epoch, self._epochs, done, self._batches), due):
            return False
        self.model.stop_training = True
        if cut:
            self._cut()
        return True
