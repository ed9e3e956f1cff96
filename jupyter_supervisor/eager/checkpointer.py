"""What an eager run checkpoints, and when: ``Checkpointer``.

A checkpoint is taken only at a step boundary of the training thread, so it never holds half of
a step: when one is due (``timer.Timer``), asked for from another thread (``save_now``: the
training thread serves the request at its next boundary), when a better value of the kept
metric came (``--keep-best``: ``best``), or ends a fit or the session. The
snapshot is ``snapshot``'s and the files are ``writer``'s; what a model that is not finite
leads to is ``finite.Policy``'s, and the Checkpointer performs the rollback it is told to: the newest good
checkpoint restored (model, optimizer, global step) at a step boundary of the training thread.
"""
import json
import logging
import math
import os
import threading
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from .. import finite
from ..checkpoints import CheckpointWriteError, restore_candidates
from ..timer import Timer
from . import restore as restoring
from .best import Best, BestKeeper
from .data_position import InputState, SavedInput
from .learning_rates import LearningRates
from .reporting import Reporter, to_float
from .variables import RANDOM_STATE, STATE_NAME, base_variable, is_variable
from .write_stall import WriteStall
from .writer import CheckpointWriter, WriteStalledError

logger = logging.getLogger("jupyter_supervisor")



class _RunState(tf.Module):
    """What the run itself checkpoints: the global step, where a Keras fit is (the index
    of the fit call in the cell body, the epoch, the batches done in that epoch), the
    random state that training advances outside the models' weights (``random``), where
    the fit's input is (``input``, ``data_position``), and the training state that is no
    variable (``training``: JSON). A checkpoint written before one of these existed restores
    with that one at its initial value."""

    def __init__(self, random: Dict[str, object]):
        super().__init__(name=STATE_NAME)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.fit = tf.Variable(0, dtype=tf.int64, trainable=False, name="fit")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.batch = tf.Variable(0, dtype=tf.int64, trainable=False, name="batch")
        if random:
            setattr(self, RANDOM_STATE, dict(random))
        # -- The position of a fit's input (data_position): which of fit's iterators of it the
        # next batch comes from, how far it was drawn, and what the input was.
        self.input = InputState()
        # --
        # -- The training state beside the variables: the learning rates the code set, the
        # fit's callbacks and metrics, as one JSON text (``Checkpointer.parts``).
        self.training = tf.Variable("", dtype=tf.string, trainable=False, name="training")
        # --


def _seed_states(items: Dict[str, object]) -> Dict[str, object]:
    """{name: variable} of the seed-generator states of the tracked Keras layers and models
    (Dropout, GaussianNoise, the random augmentation layers: a ``keras.random.SeedGenerator``
    each, whose state advances at every training step). Keras lists them in a layer's
    ``variables`` but not in its ``weights``, and they are no trackable children, so a
    checkpoint of the model alone misses them: a resume would draw the masks of the first
    steps again. Named by the item and their index in ``variables`` (an order that depends on
    the model's structure only, not on the auto-numbered names of this process)."""
    found, seen = {}, set()
    for name in sorted(items):
        obj = items[name]
        if not (hasattr(obj, "weights") and hasattr(obj, "variables")):
            continue
        weights = {id(w) for w in obj.weights}
        index = 0
        for variable in obj.variables:
            if id(variable) in weights:
                continue
            if id(variable) not in seen:
                seen.add(id(variable))
                found[f"{name}_{index}"] = variable
            index += 1
    return found


class Where:
    """Where the run is, written by the training thread: the global step, where fit is
    (fit index, epoch, batches done in it), the newest scalars (numbers or tensors) and the
    record of fit's input."""

    def __init__(self):
        self.step = 0
        self.fit = (0, 0, 0)
        self.scalars: Dict[str, object] = {}
        # The running fit's input record at (epoch, batch) (FitInput.saved), or None.
        self.input: Optional[Callable[[int, int], SavedInput]] = None


class _SaveRequest:
    """A save_now() from another thread, done by the training thread at its next boundary."""

    def __init__(self):
        self.done = threading.Event()
        self.path: Optional[str] = None
        self.error: Optional[BaseException] = None


def _trainable_variables(objects) -> list:
    """The trainable tf.Variables of what a run tracks (models, layers, modules, variables)."""
    found, seen = [], set()
    for obj in objects:
        if isinstance(obj, tf.Variable):
            candidates = [obj] if obj.trainable else []
        else:
            candidates = list(getattr(obj, "trainable_variables", None) or ())
        for variable in candidates:
            if is_variable(variable):
                variable = base_variable(variable)  # a Keras 3 variable wraps one
            if id(variable) not in seen:
                seen.add(id(variable))
                found.append(variable)
    return found


class Checkpointer:
    """The checkpoints of one eager session (see the module docstring).

    ``where``: the run's position, shared with the supervisor; ``reporter``: its records;
    ``request_stop(error)``: stops the run (a write that failed, a refusal in another thread
    than the training thread). ``track`` names what is saved and restores it; then
    ``at_boundary`` (training thread) saves when due or asked. ``sweeps``: the logdir's lock
    is held, so the restore at the start may sweep what a save cut short left.
    """

    def __init__(self, config, where: Where, reporter: Reporter,
                 request_stop: Callable[[BaseException], None], *, async_save: bool = True,
                 sweeps: bool = False):
        self._config = config
        self._sweeps = sweeps
        self._logdir = config.logdir if config.saves else None
        # A worker of a multi-worker run restores the chief's checkpoints, and writes none.
        self._restore_dir = config.logdir
        self._where = where
        self._reporter = reporter
        self._request_stop = request_stop
        self._async_save = async_save
        self._policy = finite.Policy(config.on_nan, config.max_rollbacks)
        self.timer = Timer(secs=config.save_model_secs)  # last_step: the newest checkpoint's
        # One save at a time; held also while the training thread starts or ends its loop.
        self._save_lock = threading.RLock()
        # Guards the save request and _stepping (read by other threads).
        self._mutex = threading.Lock()
        self._save_request: Optional[_SaveRequest] = None
        self._stepping = False       # a loop is between steps (set and cleared under _save_lock)
        self._thread: Optional[threading.Thread] = None   # the training thread (begin)
        self.items: Optional[Dict[str, object]] = None
        self._state: Optional[_RunState] = None
        self._root = None                          # tf.train.Checkpoint for restoring
        self._rates: Optional[LearningRates] = None
        # The training state that is no variable, saved as JSON with each checkpoint: {key:
        # a function giving the key's plain JSON value at the save}; and what the restored
        # checkpoint held ({} when nothing, or a checkpoint written before it was saved).
        self.parts: Dict[str, Callable[[], object]] = {}
        self.restored_parts: Dict[str, object] = {}
        # The checkpoint restored, and where its fit and the fit's input were (read at the
        # restore: the run's state moves on from there).
        self.restored_path: Optional[str] = None
        self.restored_position: Optional[tuple] = None   # (fit index, epoch, batch)
        self.restored_input: Optional[SavedInput] = None
        self._arrays: Dict[str, tuple] = {}        # keep_arrays: name -> (arrays, variables)
        # --keep-best: the best value of the metric and its checkpoint (None: not kept).
        self.best: Optional[BestKeeper] = (
            BestKeeper(config.keep_best, config.keep_best_direction)
            if config.keep_best and self._logdir else None)
        self._best_writing: Optional[Best] = None  # the best whose checkpoint is written
        self.writer: Optional[CheckpointWriter] = None
        self.last_path: Optional[str] = None      # the newest checkpoint written (writer thread)
        self._sync_reason: Optional[str] = None   # the writer's, once it is closed
        # The longest write that outlasted the interval (seconds; None: none did).
        self.longest_write: Optional[float] = None
        # A write that makes no progress: said in the panel, given up on by the session's end.
        self.stall = WriteStall(reporter, config.stop_grace_secs)

    def track(self, items: Dict[str, object], newest: bool = True) -> Optional[str]:
        """Names what is saved (``items``, and the run's own state) and restores the newest
        readable checkpoint into it; returns its path (None: none, or no logdir). Where the
        checkpoint was is then in ``where`` and ``restored_position``. ``newest=False`` (a
        worker of a multi-worker run): restores nothing; ``restore`` then restores the
        checkpoint its chief restored."""
        self.items = dict(items)
        self._state = _RunState(_seed_states(self.items))
        self._root = tf.train.Checkpoint(**self.items, **{STATE_NAME: self._state})
        self._rates = LearningRates(self.items)
        self._rates.capture()
        self.parts["learning_rates"] = lambda: self._rates.coded
        if self.best is not None:
            self.parts["best"] = self.best.state
        if not self._restore_dir or not newest:
            return None
        existing = restore_candidates(self._restore_dir, self._config.checkpoint_basename)
        restored = restoring.restore_newest(self._root, self._restore_dir, existing,
                                            basename=self._config.checkpoint_basename,
                                            sweep_unlisted=self._sweeps)
        if restored is not None:
            self._restored_state(restored)
        if not self._logdir:
            return restored
        self.writer = CheckpointWriter(
            {**self.items, STATE_NAME: self._state}, self._logdir,
            self._config.checkpoint_basename, self._config.keep, existing,
            async_save=self._async_save, on_saved=self._on_saved,
            owners=list(self.items.values()),
            checked=(_trainable_variables(self.items.values())
                     if self._policy.checks else ()),
            on_error=self._request_stop)
        if restored is not None:
            self._restored_best(existing)
        return restored

    def begin(self, thread: threading.Thread) -> None:
        """The session starts in ``thread``, its training thread: the only one that saves at
        a step boundary; another thread's ``save_now`` is served there."""
        self._thread = thread

    @property
    def threads(self) -> List[threading.Thread]:
        """The threads it runs: the writer thread of the write in flight, if any."""
        writer = self.writer
        return writer.threads if writer is not None else []

    @property
    def sync_reason(self) -> Optional[str]:
        """Why the checkpoints are written synchronously (None: they are not), for the user."""
        writer = self.writer
        return writer.sync_reason if writer is not None else self._sync_reason

    def close(self) -> None:
        """The session's end (again: nothing more): waits for the write in flight, for at most
        ``stop_grace_secs`` once it counts as stalled (``WriteStall.final_wait``; then a
        CheckpointWriteError says what is not on disk; or the write's own error), lets the
        snapshot's traced functions serve the next run of the same objects, and drops
        the tracked objects. A run's record outlives its session (``%supervise list``), and a
        cell that builds its model again must free the model of its last run, with its
        accelerator memory."""
        with self._save_lock:  # a save asked from another thread sees all or nothing
            writer, ended = self.writer, True
            try:
                if writer is not None:
                    self._sync_reason = writer.sync_reason
                    ended = writer.close(self.stall.final_wait(writer))
                    if not ended:
                        self.stall.give_up(writer, writer.in_flight, self._where.step)
            finally:
                self.items = self._root = self._state = self.writer = self._rates = None
                self.parts, self._arrays = {}, {}
            if self.stall.unwritten is not None:
                raise self.stall.error()
            if not ended:
                raise CheckpointWriteError(
                    f"The last checkpoint was not written within "
                    f"{self._config.stop_grace_secs:g} s (stop_grace_secs); it may be missing.")

    def end_notes(self) -> List[str]:
        """After ``close``: what the checkpoints did differently from what the options
        suggest (written synchronously, further apart than the interval)."""
        notes = [self.sync_reason] if self.sync_reason else []
        longest, secs = self.longest_write, self.timer.secs
        # An interval under a second asks for checkpoints as often as they can be written
        # (the tutorials' 0.000001: one at every step): nothing to say.
        if longest is not None and secs >= 1:
            notes.append(
                f"A checkpoint took up to {longest:.3g} s to write, longer than --save-model-secs "
                f"{secs:g}: the next one was taken {secs:g} s after that write ended, so "
                f"checkpoints came about every {longest + secs:.3g} s. Set --save-model-secs "
                "above a write's time for checkpoints at the interval you set.")
        return notes

    def restore(self, step: int) -> str:
        """Restores the checkpoint of ``step`` of the logdir (the one the chief restored);
        returns its path. RuntimeError when this process cannot read it."""
        path = os.path.join(self._restore_dir or "", f"{self._config.checkpoint_basename}-{step}")
        try:
            restoring.restore(self._root, path)
        except (tf.errors.OpError, ValueError) as e:
            raise RuntimeError(
                f"The chief restored the checkpoint of step {step}, and this worker cannot read "
                f"it at {path} ({type(e).__name__}: {e}). Every worker restores the chief's "
                "checkpoint from the same --logdir: give each worker the same path on a file "
                "system they share.") from e
        self._restored_state(path)
        return path

    def _restored_state(self, path: str) -> None:
        """After the restore of ``path``: the step, the training state's parts
        (``restored_parts``) and the learning rates to train with."""
        self._where.step = int(self._state.step.numpy())
        self.timer.last_step = self._where.step
        text = self._state.training.numpy().decode("utf-8")
        self.restored_parts = json.loads(text) if text else {}
        self.restored_path = path
        self.restored_position = (int(self._state.fit.numpy()), int(self._state.epoch.numpy()),
                                  int(self._state.batch.numpy()))
        self.restored_input = self._state.input.restored()
        self._rates.settle(path, self.restored_parts.get("learning_rates"))

    def keep_arrays(self, name: str, arrays: list) -> None:
        """At a save (training thread), from ``parts``: ``arrays`` (NumPy arrays, such as the
        best weights EarlyStopping keeps) go into this and the next checkpoints, as variables
        of the run's state under ``name``. The same list again costs nothing."""
        kept = self._arrays.get(name)
        if kept is not None and kept[0] is arrays:
            return
        held = getattr(self._state, name, None)
        if held is None or [tuple(v.shape) for v in held] != [np.shape(a) for a in arrays]:
            held = [tf.Variable(a, trainable=False) for a in arrays]
            setattr(self._state, name, held)
            held = getattr(self._state, name)
        else:
            for variable, array in zip(held, arrays):
                variable.assign(array)
        self._arrays[name] = (arrays, held)

    def restored_arrays(self, name: str) -> Optional[list]:
        """The arrays ``keep_arrays`` saved under ``name`` in the restored checkpoint (None:
        it holds none)."""
        if self.restored_path is None:
            return None
        reader = tf.train.load_checkpoint(self.restored_path)
        keys = reader.get_variable_to_shape_map()
        found, prefix = [], f"{STATE_NAME}/{name}/"
        while f"{prefix}{len(found)}/.ATTRIBUTES/VARIABLE_VALUE" in keys:
            found.append(reader.get_tensor(f"{prefix}{len(found)}/.ATTRIBUTES/VARIABLE_VALUE"))
        return found or None

    def _restored_best(self, existing: List[str]) -> None:
        """After a restore, with the writer: the best the restored state names is kept again
        (``existing``: the checkpoints of the logdir), or why not is said."""
        saved = self.restored_parts.get("best")
        if self.best is None:
            # The record goes on in this session's checkpoints (``training_state`` keeps the
            # parts no part replaces): a later --keep-best session takes it while it exists.
            best = Best.from_json(saved)
            if best is not None and best.among(existing):
                logger.warning(
                    "The checkpoints of this logdir kept the best %s; this run has no "
                    "--keep-best, so retention deletes that checkpoint (step %d) as any other, "
                    "once it is not among the newest %d. Add --keep-best %s to keep it.",
                    best.text(), best.step, self._config.keep, best.metric)
            return
        why = self.best.restored(saved, existing)
        if why is not None:
            logger.warning(why)
        self.writer.best = self._path_of(self.best.best)

    def _path_of(self, best: Optional[Best]) -> Optional[str]:
        if best is None:
            return None
        return os.path.join(self._logdir, f"{self._config.checkpoint_basename}-{best.step}")

    def training_state(self) -> str:
        """The JSON text of ``parts`` now (training thread, at a step boundary), and of the
        restored checkpoint's parts that no part of this session replaces (a session that ran
        no fit keeps the fit's)."""
        return json.dumps({**self.restored_parts,
                           **{key: part() for key, part in self.parts.items()}})

    # ------------------------------------------------------------------------ any thread

    def save_now(self, timeout: float, ready: bool) -> Optional[str]:
        """A checkpoint now, once its files are written: from the training thread at once;
        from another while the body steps, by the training thread at its next boundary
        (TimeoutError after ``timeout``); else at once if the run is ``ready``."""
        if threading.current_thread() is self._thread:
            return self._save_and_wait()
        with self._save_lock:
            with self._mutex:
                stepping = self._stepping
                if stepping:
                    request = self._save_request = self._save_request or _SaveRequest()
            if not stepping:
                # Before track() (or fit) restored, there is nothing of this run to save.
                return self._save_and_wait() if ready else None
        if not request.done.wait(timeout):
            with self._mutex:
                if self._save_request is request:
                    self._save_request = None
            if not request.done.is_set():
                raise TimeoutError(
                    f"No step boundary within {timeout:g} s, so no checkpoint was written: the "
                    "body is in a step that long, or it runs code between steps without "
                    "calling sv.step().")
        if request.error is not None:
            raise request.error
        return request.path

    def state_changed(self) -> None:
        """The training state moved on without a step (an epoch's end ran: the callbacks
        decided, fit's position is the next epoch): the next save, due or final, writes it
        even at the step of the newest checkpoint."""
        self.timer.last_step = None

    def save_if_moved(self) -> None:
        """The checkpoint that ends a fit or the session, unless this step is saved; the
        verdicts of the checks of this step's save and of that one."""
        with self._save_lock:
            if self.writer is None or not self.stall.ended(self.writer, True, self._where.step):
                return
            # The verdict of a save made before: that checkpoint was not the final one, so
            # (in the training thread) it may still roll back, and then nothing moved.
            self._settle(final=threading.current_thread() is not self._thread)
            if self.timer.moved(self._where.step) and self._save(final=True) is not None:
                self._settle(final=True)

    @property
    def stepping(self) -> bool:
        """True while a loop steps (between its ``set_stepping(True)`` and ``(False)``)."""
        return self._stepping

    def set_stepping(self, value: bool, error: Optional[BaseException] = None) -> None:
        """A loop starts (True) or ends stepping: a save asked meanwhile is served at its
        boundaries; one still waiting when the loop ends is served now, as the checkpoint
        ending it (or fails with ``error``, the loop's)."""
        with self._save_lock:
            with self._mutex:
                self._stepping = value
                request = self._save_request if not value else None
        if request is None:
            return
        if error is None:
            self._save_at_boundary(request, final=True)
            return
        with self._mutex:
            self._save_request = None
        request.error = RuntimeError(f"No checkpoint was written: the run failed first "
                                     f"({type(error).__name__}: {error}).")
        request.done.set()

    # ------------------------------------------------------------------------ training thread

    def at_boundary(self) -> bool:
        """The step boundary: a verdict or rollback due. True when it rolled back (the state
        here is the newest good checkpoint's now)."""
        rolled_back = False
        if self.writer is not None and self.writer.writing:
            self.stall.report(self.writer)
        if self.writer is not None and self.writer.verdict_known:
            # The writer thread checked the copies of the save before: its verdict, at the
            # first boundary after it is known (before, it would cost this thread a check).
            with self._save_lock:
                rolled_back = not self._settle(final=False, wait=False)
        if self._policy.pending is not None:  # a save from another thread was refused
            with self._save_lock:
                if self._policy.pending is not None:
                    self._roll_back()
                    rolled_back = True
        return rolled_back

    def save_at_boundary(self, due: bool = True) -> None:
        """Saves when a save is asked for, or is due (unless not ``due``: a boundary whose
        state a next one very soon supersedes). The interval counts from the save's start (a
        synchronous write's end: ``_save_at_boundary`` starts it again once ``_save`` returns);
        a write that outlasts it (a large model, a slow disk) starts the next interval when
        it ends (``Timer.ended``), so that the writes of the background do not follow one
        another without a pause, taking a core from training all the time (at 400 MB every
        second, bench/bench_save_interval.py). A write still running when the next save is
        due since one more interval makes this thread wait for it, then save. So training
        does not wait for a write that ends within two intervals (Keras' callbacks make it
        wait for every write), and a crash loses at most two writes and an interval."""
        request = self._save_request
        if request is not None:
            self._save_at_boundary(request)
        elif due and self.writer is not None and self.timer.due() and (
                not self.writer.writing or self.timer.overdue()):
            self._save_at_boundary(None)

    # ------------------------------------------------------------------------ --keep-best

    def offer(self, values, epoch: Optional[int] = None) -> Optional[str]:
        """Training thread, at a step boundary: values of metrics measured on the state here
        (a fit's epoch-end logs, with ``epoch``, once every callback's ``on_epoch_end`` ran;
        ``sv.report``). A better value of the kept metric makes a checkpoint of this state now
        (serving a save asked for meanwhile), even at the step of the newest one (which does
        not record itself as the best): the new best once it is listed. Returns its path (its
        files are written in the background), or None."""
        if self.best is None or self.writer is None:
            return None
        best = self.best.offer(values, self._where.step, epoch)
        if best is None:
            return None
        return self._save_at_boundary(self._save_request, best=best)

    def note(self, scalars) -> None:
        """A loop's step scalars: its value of the kept metric counts at the next checkpoint
        (``BestKeeper.at_save``)."""
        if self.best is not None:
            self.best.note(scalars, self._where.step)

    def settle(self) -> None:
        """Takes the verdict of the newest save now, if one is pending, once its write ended
        (before a stop: a rollback takes the step back)."""
        if self.writer is not None and self.writer.verdict_pending:
            with self._save_lock:
                self._settle(final=False)

    def _save_at_boundary(self, request: Optional[_SaveRequest], final: bool = False,
                          best: Optional[Best] = None) -> Optional[str]:
        """The save of a boundary (``request``: one asked for; ``best``: a new best, see
        ``offer``); returns its path, or None."""
        path = None
        try:
            if request is not None:
                with self._mutex:
                    self._save_request = None
                try:
                    path = request.path = self._save_and_wait(final, best)
                except BaseException as e:  # pylint: disable=broad-except
                    request.error = e
                    raise
                finally:
                    request.done.set()
            elif best is not None or self.timer.moved(self._where.step):
                path = self._save(best=best)
        except WriteStalledError:
            pass  # the panel says so (WriteStall); training goes on without this save
        # else the newest checkpoint holds this very state (a rollback restored it): writing
        # it again would cost a save and put the good checkpoint's files at risk for nothing.
        self.timer.restart()
        return path

    def _save(self, final: bool = False, best: Optional[Best] = None,
              waited: bool = False) -> Optional[str]:
        """Takes a checkpoint of the current step (its files are written in the background).
        None when nothing was saved: the model is not finite and it rolled back (or will, at
        the training thread's next boundary). ``final``: the checkpoint that ends a fit or the
        session, which never rolls back. ``best``: it is the new best (``offer``); a loop's
        step value of the kept metric may make it one too (``BestKeeper.at_save``).
        ``waited``: the caller waits for the write (``CheckpointWriter.save``)."""
        with self._save_lock:
            if self.writer is None or not self.stall.ended(self.writer, final,
                                                           self._where.step):
                return None
            if not self._settle(final):
                return None
            if self._policy.pending is not None and not final:
                if threading.current_thread() is self._thread:
                    self._roll_back()
                return None
            step = self._where.step
            if not self._check_finite(step, final):
                return None
            fit, epoch, batch = self._where.fit
            self._state.step.assign(step)
            self._state.fit.assign(fit)
            self._state.epoch.assign(epoch)
            self._state.batch.assign(batch)
            source = self._where.input
            self._state.input.record(source(epoch, batch) if source is not None else None)
            if best is None and self.best is not None:
                best = self.best.at_save(step)
            if best is not None:
                # The write in flight (a best too?) ends first, as writer.save would have it:
                # its _on_saved must see its own best in _best_writing.
                self.writer.wait()
                self.best.decide(best)  # this checkpoint records itself as the best
                self._best_writing = best
            self._state.training.assign(self.training_state())
            logger.info("Saving checkpoint %s-%d", self._config.checkpoint_basename, step)
            # Every save starts the interval, before its write: the write's end
            # (``_on_saved``) then tells whether it outlasted the interval.
            self.timer.restart()
            pending = self.writer.save(step, final=final, best=best is not None,
                                       waited=waited)
            self.timer.last_step = step
            # A check made before the write has its verdict now: no step more on a bad model.
            if pending.checked_before and not self._settle(final):
                return None
            return pending.path

    def _save_and_wait(self, final: bool = False, best: Optional[Best] = None) -> Optional[str]:
        with self._save_lock:
            path = self._save(final, best, waited=True)
            if path is not None:
                if not self.stall.ended(self.writer, final, self._where.step):
                    return None   # a final save given up on: the session's end says so
                if not self._settle(final):
                    return None
            return path

    def _check_finite(self, step: int, final: bool) -> bool:
        """With ``_save_lock`` held, before a save: True when the newest value of every
        reported scalar is finite, or with ``on_nan="ignore"``; else ``_refuse``. The trainable
        variables are checked by the writer (``CheckpointWriter``: in the writer thread,
        before the write; its verdict taken by ``_settle``); here only to name them."""
        if self.writer is None or not self.writer.checks:
            return True
        numbers = {tag: to_float(value) for tag, value in self._where.scalars.items()}
        scalars = [finite.NonFiniteScalar(tag, value, None)
                   for tag, value in sorted(numbers.items())
                   if value is not None and not math.isfinite(value)]
        if not scalars:
            return True
        variables = self.writer.non_finite_now()
        if not variables and finite.loss_scale_absorbs(self.items.values()):
            logger.debug("Step %d: %s; the LossScaleOptimizer skipped it (the weights are "
                         "finite).", step, finite.describe_problem([], scalars))
            return True
        return self._refuse(step, finite.describe_problem(variables, scalars), final)

    def _settle(self, final: bool, wait: bool = True) -> bool:
        """With ``_save_lock`` held: takes the verdict of the newest save's check of the
        variables, once. ``wait``: waits for its write first (at most ``stop_grace_secs``;
        then the verdict checks the copies in this thread); else (a step boundary) takes it
        only when it is known without a check here. True when there was none to take or it
        passed; else (the save wrote nothing) ``_refuse`` at the step of that save."""
        writer = self.writer
        if writer is None or not writer.verdict_pending:
            return True
        if not writer.verdict_known:
            if not wait:
                return True
            writer.wait(self._config.stop_grace_secs)
        verdict = writer.verdict()
        if not verdict.variables:
            return True
        self.timer.last_step = None
        return self._refuse(verdict.step, finite.describe_problem(verdict.variables, []), final)

    def _refuse(self, step: int, problem: str, final: bool) -> bool:
        """With ``_save_lock`` held, nothing saved for ``step``: the policy schedules a
        rollback, and this returns False after it (training thread) or with it pending
        (another thread); or it raises NonFiniteError, which also stops the run when raised in
        another thread than the training thread."""
        # A save in flight that passes is the newest good one (a stalled one is not waited for).
        self.writer.wait(self.writer.stall_left() if self.writer.writing else None)
        if self.best is not None:  # a best refused is no best: the one on disk stays
            self._best_writing = None
            self.best.forget(self.best.best)
        kept = self.writer.kept
        try:
            self._policy.refused(step, problem, kept[-1] if kept else None, final=final)
        except finite.NonFiniteError as error:
            if threading.current_thread() is not self._thread:
                self._request_stop(error)
            raise
        if threading.current_thread() is self._thread:
            self._roll_back()
        return False

    def _roll_back(self) -> None:
        """Training thread, ``_save_lock`` held, at a step boundary: restores the newest good
        checkpoint (an older one if it cannot be read) in place of the diverged model, with
        the global step and the optimizer's state, and reports it. Keras models' running
        metrics restart, or fit's mean loss would stay NaN until the epoch ends."""
        rollback = self._policy.take()
        paths = list(reversed(self.writer.kept))
        self._rates.capture()
        try:
            path = restoring.restore_newest(self._root, self._logdir, paths)
        except Exception as e:  # pylint: disable=broad-except
            raise self._policy.rollback_failed(
                rollback._replace(path=paths[0] if paths else None), e) from e
        self._rates.keep(path)
        self._where.step = int(self._state.step.numpy())
        self.timer.last_step = self._where.step
        self._where.scalars = {}
        for value in self.items.values():
            if callable(getattr(value, "reset_metrics", None)):
                value.reset_metrics()
        self._policy.rolled_back(rollback._replace(path=path), self._where.step,
                                 self._reporter.event_file, self._reporter.hub)

    def _on_saved(self, step, path, wall_time, seconds) -> None:
        """Writer thread: the checkpoint's files are under its name, listed (and, for a new
        best, kept as the best)."""
        self.last_path = path
        took = self.timer.ended()
        if took is not None:
            self.longest_write = max(self.longest_write or 0.0, took)
        writer = self.writer  # close() may drop it meanwhile (a write past the grace)
        kept = tuple(reversed(writer.kept)) if writer is not None else ()
        self._reporter.saved(step, path, wall_time, seconds, kept)
        best = self._best_writing
        if best is not None and best.step == step and writer is not None and \
                writer.best == path:
            self._best_writing = None
            self.best.kept(best)
            self._reporter.best(best, path, step)
