"""EagerSupervisor: the eager backend (TensorFlow 2 loops and Keras 3 ``fit``) of a run.

The same promises as the graph Supervisor, for code that runs eagerly::

    # a custom loop                                   # Keras
    sv.track(model=model, optimizer=opt)              model.fit(x, y, epochs=50,
    while not sv.should_stop():                                 callbacks=[sv.callback])
        loss = train_step(next(batches))
        sv.step(loss=loss)

``track()`` names what to checkpoint and restores the newest checkpoint of the logdir (falling
back to an older one when the newest is unreadable), or calls ``RunConfig.init_fn()`` (no
argument) when there is none. ``step()`` counts the global step and is the loop's step boundary:
there a checkpoint is written when one is due (every ``save_model_secs``) or asked for
(``save_now()`` from another thread), the scalars go to the event file every
``save_summaries_secs``, ``max_steps`` requests the stop, and a stop that the body never looks at
raises ``backend.StopBody``. ``sv.callback`` does all that for ``model.fit`` (see
``keras_callback``). Leaving ``session()`` writes a final checkpoint at the last step.

A checkpoint is taken only at a step boundary in the training thread, so it never holds half of
a step; the training thread waits for the copy of the variables to host memory, a writer thread
writes the files (``saving``). Everything is reported as ``events`` records.

A model that is not finite is never saved (``finite``): the run stops (``on_nan="stop"``), or
(``"rollback"``) the newest good checkpoint is restored at that step boundary (model, optimizer,
global step; a save asked from another thread rolls back at the next boundary, and one whose
weights the writer found not finite at the first boundary after the write: it checks them
beside the write) and training goes on from it, at most ``max_rollbacks`` times. Inside
``fit`` the data goes on where it was (the batches are not replayed) and the model's running
metrics restart.
"""
import contextlib
import inspect
import logging
import math
import numbers
import os
import threading
import time
import types
import weakref
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf
from tensorflow.core.util import event_pb2
from tensorflow.python.summary.writer.event_file_writer import EventFileWriter

from .. import events, finite, services
from ..checkpoints import (CheckpointWriteError, describe_error, prepare_logdir,
                           remove_partial_saves)
from .._validate import check_checkpoint_path, invalid
from ..backend import RunConfig, StopBody
from ..lockfile import LogdirLock
from . import saving

logger = logging.getLogger("jupyter_supervisor")

_Summary = tf.compat.v1.Summary
_SessionLog = tf.compat.v1.SessionLog

# The checkpoint name of the run's own state (global step, where fit is), beside the user's.
STATE_NAME = "jupyter_supervisor"
# Tag of the step rate in the event files, as the graph Supervisor writes it.
STEP_RATE_TAG = "global_step/sec"
# At most this often a Progress record (twice a second: what a panel shows).
PROGRESS_SECS = 0.5

class _RunState(tf.Module):
    """What the run itself checkpoints: the global step, and where a Keras fit is (the index
    of the fit call in the cell body, the epoch, the batches done in that epoch)."""

    def __init__(self):
        super().__init__(name=STATE_NAME)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.fit = tf.Variable(0, dtype=tf.int64, trainable=False, name="fit")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.batch = tf.Variable(0, dtype=tf.int64, trainable=False, name="batch")


class _EventFile:
    """An event file of its own name (unique, sorting after earlier ones: see
    ``services.event_file_suffix``), with
    the FileWriter methods the step counter service calls. TF1's FileWriter refuses eager mode;
    its file writer does not."""

    def __init__(self, logdir: str):
        self._writer = EventFileWriter(
            logdir, filename_suffix=services.event_file_suffix())

    def add_summary(self, summary, step) -> None:
        self._writer.add_event(event_pb2.Event(summary=summary, wall_time=time.time(),
                                               step=int(step)))

    def add_session_log(self, session_log, step=None) -> None:
        event = event_pb2.Event(session_log=session_log, wall_time=time.time())
        if step is not None:
            event.step = int(step)
        self._writer.add_event(event)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class _NoEventFile:
    """Without a logdir: the step rate still reaches the listeners, no file is written."""

    def add_summary(self, summary, step) -> None:
        pass


class _SaveRequest:
    """A save_now() from another thread, done by the training thread at its next boundary."""

    def __init__(self):
        self.done = threading.Event()
        self.path: Optional[str] = None
        self.error: Optional[BaseException] = None


def _trackable(value) -> bool:
    return isinstance(value, tf.__internal__.tracking.Trackable)


def _scalar(name: str, value) -> object:
    """``value`` if it is a number or a scalar tensor (kept as is: converting it would wait for
    the step to finish); ValueError otherwise."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return value
    shape = getattr(value, "shape", None)
    if shape is not None and tuple(shape) in ((), (1,)) and \
            getattr(getattr(value, "dtype", None), "is_bool", False) is False:
        return value
    raise ValueError(invalid(name, value, "a number or a scalar tensor, such as the step's loss",
                             shown=_short(value)))


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _callable_without_arguments(fn) -> bool:
    try:
        inspect.signature(fn).bind()
    except TypeError:
        return False
    except ValueError:  # no signature to inspect (a builtin): let the call tell
        return True
    return True


def _to_float(value) -> Optional[float]:
    try:
        return float(np.asarray(value).reshape(()))
    except (TypeError, ValueError):
        return None


def _trainable_variables(objects) -> list:
    """The trainable tf.Variables of what a run tracks (models, layers, modules, variables)."""
    found, seen = [], set()
    for obj in objects:
        if isinstance(obj, tf.Variable):
            candidates = [obj] if obj.trainable else []
        else:
            candidates = list(getattr(obj, "trainable_variables", None) or ())
        for variable in candidates:
            if saving.is_variable(variable):
                variable = saving.base_variable(variable)  # a Keras 3 variable wraps one
            if id(variable) not in seen:
                seen.add(id(variable))
                found.append(variable)
    return found


def _learning_rates(objects: Dict[str, object]) -> List[tuple]:
    """[(name, variable, value now)] for the tracked optimizers whose learning rate is a
    variable (a Keras optimizer given a number; a schedule is computed from the step)."""
    found = []
    for name, obj in objects.items():
        rate = getattr(obj, "learning_rate", None) if hasattr(obj, "apply_gradients") else None
        if rate is not None and saving.is_variable(rate):
            found.append((name, rate, float(np.asarray(rate.numpy()))))
    return found


def _keep_learning_rates(rates: List[tuple], path: str) -> None:
    """After a restore from ``path``: puts back each learning rate of ``rates`` (from
    ``_learning_rates`` before the restore) that the checkpoint changed. The rate in memory is
    the one the notebook set (a lower one after a divergence, the usual fix) or the one
    training reached; the checkpoint's would silently undo it."""
    for name, variable, value in rates:
        restored = float(np.asarray(variable.numpy()))
        if restored != value:
            variable.assign(value)
            logger.warning("The checkpoint %s holds the learning rate %g for %r; the run keeps "
                           "%g, the value the optimizer had (it is saved with the next "
                           "checkpoint).", path, restored, name, value)


def _finite_values(scalars) -> Dict[str, float]:
    values = {}
    for tag, value in (scalars or {}).items():
        number = _to_float(value)
        if number is not None:
            values[tag] = number
    return values


def _progress_record(step, epoch, epochs, batch, batches, scalars, wall_time):
    numbers_ = {tag: _to_float(value) for tag, value in scalars.items()}
    return events.Progress(step, epoch, epochs, batch, batches, types.MappingProxyType(
        {tag: value for tag, value in numbers_.items() if value is not None}), wall_time)


class EagerSupervisor:
    """The eager backend of one session of a run (``backend.Backend``).

    Built in the kernel's main thread: checks the config, takes the logdir's lock (a second
    writer gets ``LogdirLockedError``). In the run's thread, ``session()`` yields ``{"sv":
    self}`` for the body; the body calls ``track()``/``step()`` or passes ``callback`` to fit.
    """

    def __init__(self, config: RunConfig, *, async_save: bool = True):
        if not isinstance(config, RunConfig):
            raise TypeError(invalid("config", config, "a jupyter_supervisor.backend.RunConfig",
                                    shown=_short(config)))
        if not tf.executing_eagerly():
            raise RuntimeError(
                "The eager backend needs eager execution, and it is off here (graph mode: "
                "tf.compat.v1.disable_eager_execution(), or inside a tf.Graph). Use the graph "
                "Supervisor for graph code.")
        if config.master:
            raise ValueError(invalid(
                "master", config.master, "'' : the eager backend trains in this process (for "
                "several machines use a tf.distribute strategy inside the body)"))
        if not config.is_chief:
            raise ValueError(invalid("is_chief", config.is_chief,
                                     "True: the eager backend has no replicas to wait for"))
        if config.init_fn is not None and not _callable_without_arguments(config.init_fn):
            raise ValueError(invalid(
                "init_fn", config.init_fn, "a function taking no argument: in eager mode it "
                "runs after sv.track(...) (or at the start of fit) when there is no checkpoint, "
                "with no session to pass", shown=_short(config.init_fn)))
        self._config = config
        self._async_save = async_save
        self._hub = events.EventHub()
        self._logdir = config.logdir if config.saves else None
        self._lock: Optional[LogdirLock] = None
        if self._logdir:
            check_checkpoint_path("logdir", self._logdir)
            prepare_logdir(self._logdir)
            if "://" not in self._logdir:
                self._lock = LogdirLock(self._logdir)
                self._lock.acquire()

        # Guards the stop fields, the save request and _stepping (read by other threads).
        self._mutex = threading.Lock()
        self._stop_requested = False
        self._stop_reason: Optional[str] = None
        self._stop_exception: Optional[BaseException] = None
        self._save_request: Optional[_SaveRequest] = None
        self._stepping = False       # a loop is between steps (set and cleared under _save_lock)
        # One save at a time; held also while the training thread starts or ends its loop.
        self._save_lock = threading.RLock()

        # Written by the training thread only.
        self._thread: Optional[threading.Thread] = None
        self._entered = False
        self._active = False
        self._ready = False                        # restored or initialized
        self._restored_from: Optional[str] = None
        self._items: Optional[Dict[str, object]] = None
        self._attached: Optional[str] = None       # "track" or "callback"
        self._state = None                         # _RunState, created by track()
        self._root = None                          # tf.train.Checkpoint for restoring
        self._writer: Optional[saving.CheckpointWriter] = None
        self._event_file = None
        self._step = 0
        self._last_saved_step: Optional[int] = None
        self._looked = False                       # should_stop() was called in this session
        self._stop_pending_at_last_step = False
        self._scalars: Dict[str, object] = {}
        self._next_save = float("inf")
        self._next_summary = float("inf")
        self._next_progress = 0.0
        self._last_progress: Optional[tuple] = None  # fit's position at the last boundary
        self._fit_position = (0, 0, 0)             # (fit index, epoch, batch) now
        self._restored_position: Optional[tuple] = None
        self._coord = tf.compat.v1.train.Coordinator()
        self._threads: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
        self._callback = None
        self._fits = 0
        self._notes: List[str] = []
        self._closed = False
        # on_nan="rollback": (step, problem) of a refused save whose rollback the training
        # thread makes at its next step boundary; under _save_lock.
        self._pending_rollback: Optional[tuple] = None
        self._rollbacks = 0

    # ------------------------------------------------------------------------- Backend

    def add_listener(self, listener: Callable[[object], None]) -> None:
        """``listener(record)`` for every ``events`` record, on a dispatcher thread."""
        self._hub.add_listener(listener)

    def remove_listener(self, listener: Callable[[object], None]) -> None:
        """Stops calling ``listener``."""
        self._hub.remove_listener(listener)

    def flush_events(self, timeout: Optional[float] = None) -> bool:
        """Waits until the listeners have seen every record emitted so far."""
        return self._hub.flush(timeout)

    def owns_thread(self, thread) -> bool:
        """True for the step counter and the checkpoint writer threads."""
        return thread in self._threads or (
            self._writer is not None and thread in self._writer.threads)

    def notes(self) -> List[str]:
        """What this run does differently from what its options suggest (more may come when
        the session ends: a body that never named what to checkpoint)."""
        return list(self._notes)

    @property
    def supervisor(self) -> "EagerSupervisor":
        """What the body sees as ``sv``: this backend."""
        return self

    @property
    def attached(self) -> Optional[str]:
        """How the body told what to checkpoint: "track" (sv.track), "callback" (model.fit
        with sv.callback), or None (not yet, or never: nothing is checkpointed)."""
        return self._attached

    @property
    def restored_from(self) -> Optional[str]:
        """The checkpoint this session restored, or None."""
        return self._restored_from

    @property
    def logdir(self) -> Optional[str]:
        return self._logdir

    def read_step(self) -> Optional[int]:
        """The global step, or None before track() (or the fit) restored or initialized."""
        return self._step if self._ready else None

    def should_stop(self) -> bool:
        """True once a stop was requested, max_steps reached, or the input ran out."""
        self._looked = True
        if self._stop_requested or self._coord.should_stop():
            return True
        return False

    def request_stop(self, ex: Optional[BaseException] = None) -> None:
        """Ends the session at the next step boundary; ``ex`` fails the run (re-raised when the
        session ends), except OutOfRangeError, the normal end of the input."""
        with self._mutex:
            if self._stop_requested:
                return
            self._stop_requested = True
            if ex is None:
                self._stop_reason = events.REQUESTED
            elif isinstance(ex, tf.errors.OutOfRangeError):
                self._stop_reason = events.OUT_OF_RANGE
            else:
                self._stop_reason = events.ERROR
                self._stop_exception = ex

    def save_now(self, timeout: Optional[float] = None) -> Optional[str]:
        """Writes a checkpoint and returns its path once its files are written (None: no logdir,
        nothing tracked, or a model that is not finite rolled back instead, with
        ``on_nan="rollback"``). From another thread while the body trains, the training thread
        saves at its next step boundary (within ``timeout``, default ``stop_grace_secs``, or
        TimeoutError); when it does not train (before, between or after its loops), at once."""
        if not self._logdir:
            return None
        if not self._active:
            raise RuntimeError(
                "save_now() needs a running session: before it there is nothing to save, and "
                "after it the final checkpoint was written"
                + (f" ({self._writer.last_path})." if self._writer and self._writer.last_path
                   else "."))
        timeout = self._config.stop_grace_secs if timeout is None else timeout
        if threading.current_thread() is self._thread:
            return self._save_and_wait()
        with self._save_lock:
            with self._mutex:
                stepping = self._stepping
                if stepping:
                    request = self._save_request = self._save_request or _SaveRequest()
            if not stepping:
                # Before track() (or fit) restored, there is nothing of this run to save.
                return self._save_and_wait() if self._ready else None
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

    @contextlib.contextmanager
    def session(self):
        """In the run's thread: yields ``{"sv": self}`` for the body. Leaving it stops the step
        counter and writes a final checkpoint (unless an error ended the block); the Stopped
        record comes last. StopBody and OutOfRangeError end the block cleanly."""
        if self._entered:
            raise RuntimeError("This backend ran its session already; a resume builds a new "
                               "EagerSupervisor.")
        if self._closed:
            raise RuntimeError("This backend is closed; build a new EagerSupervisor.")
        self._entered = True
        self._thread = threading.current_thread()
        self._active = True
        if self._lock is not None:
            remove_partial_saves(os.path.join(self._logdir, self._config.checkpoint_basename))
        if self._logdir:
            self._event_file = _EventFile(self._logdir)
        error = None
        try:
            yield {"sv": self}
        except StopBody:
            pass
        except tf.errors.OutOfRangeError as e:
            self.request_stop(e)
        except BaseException as e:  # pylint: disable=broad-except
            error = e
        finally:
            self._active = False
            self._end(error)

    def close(self) -> None:
        """After the session (or instead of it): releases the logdir, closes the files."""
        if self._closed:
            return
        self._closed = True
        self._coord.request_stop()
        with contextlib.suppress(Exception):
            self._coord.join(stop_grace_period_secs=self._config.stop_grace_secs)
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.wait(self._config.stop_grace_secs)
        if self._event_file is not None:
            self._event_file.close()
        if self._lock is not None:
            self._lock.release()

    # ------------------------------------------------------------------------- the body's API

    @property
    def callback(self):
        """The Keras callback to pass to ``model.fit`` (``callbacks=[sv.callback]``)."""
        if self._callback is None:
            from .keras_callback import SupervisorCallback  # pylint: disable=import-outside-toplevel
            self._callback = SupervisorCallback(self)
        return self._callback

    def track(self, **objects) -> Optional[str]:
        """Names what to checkpoint (``model=model, optimizer=opt``, any trackable: Keras
        models, layers, optimizers, tf.Variables, tf.Modules) and restores the newest checkpoint
        of the logdir into it; without one, calls ``init_fn()``. Returns the restored path, or
        None. A Keras model must be built (its variables exist); an unbuilt Keras optimizer is
        built for the trainable variables of the tracked models. An optimizer keeps the
        learning rate it has (a lower one set to get past a divergence), not the checkpoint's,
        with a warning when they differ. Calling it again with the same objects does
        nothing."""
        self._check_active("sv.track()")
        return self._track(objects, "track")

    def step(self, **scalars) -> int:
        """Ends a training step: counts the global step, keeps ``scalars`` (numbers or scalar
        tensors: the loss...) for the event file and the panel, and, at this boundary, saves
        when a checkpoint is due or asked for. Requests the stop when the step reaches
        max_steps. Raises StopBody when a stop was requested that the body did not look at
        (it never calls should_stop(), or it stepped again after the stop). Returns the step."""
        self._check_active("sv.step()")
        for name, value in scalars.items():
            _scalar(name, value)
        if not self._ready:
            self._make_ready(None)
        if not self._stepping:
            self._set_stepping(True)
        self._step += 1
        if scalars:
            self._scalars = scalars
        if self._boundary():
            # A body that never looks, or that stepped again after the stop: it ends here,
            # at this boundary (the step it took is counted and saved).
            if not self._looked or self._stop_pending_at_last_step:
                raise StopBody()
            self._stop_pending_at_last_step = True
        return self._step

    # ------------------------------------------------------------------------- for the callback

    def _fit_started(self) -> int:
        """The index of the fit call starting now in this session's body (0, 1, ...)."""
        self._fits += 1
        return self._fits - 1

    def _track_fit(self, model) -> None:
        """Tracks fit's model and optimizer, unless track() named them already."""
        if self._items is None:
            optimizer = model.optimizer
            if getattr(optimizer, "built", True) is False:
                optimizer.build(model.trainable_variables)
            self._track({"model": model, "optimizer": optimizer}, "callback")
        elif not any(value is model for value in self._items.values()):
            raise ValueError(invalid(
                "model", model, "the model this session tracks already ("
                + ", ".join(f"{n}={_short(v)}" for n, v in self._items.items())
                + "): one session checkpoints one set of objects. Fit that model, or train "
                "this one in another run (another logdir)", shown=_short(model)))

    def _fit_batches(self, count: int, logs, progress: tuple) -> bool:
        """``count`` batches of fit ended (a step boundary); True: fit must stop."""
        self._step += count
        self._scalars = logs
        return self._boundary(progress)

    # ------------------------------------------------------------------------- internals

    def _check_active(self, what: str) -> None:
        if not self._active:
            raise RuntimeError(
                f"{what} was called outside a run: it works in the body of a %%supervise cell "
                "(or inside `with backend.session():`), while that run trains.")
        if threading.current_thread() is not self._thread:
            raise RuntimeError(f"{what} must be called from the run's training thread (the "
                               "cell body), not from another thread.")

    def _track(self, objects: Dict[str, object], kind: str) -> Optional[str]:
        if not objects:
            raise ValueError(invalid(
                "objects", objects, "at least one trackable to checkpoint, by name: "
                "sv.track(model=model, optimizer=optimizer)", shown="{} (nothing)"))
        for name, value in objects.items():
            if name == STATE_NAME:
                raise ValueError(invalid(name, value, f"another name: {STATE_NAME!r} is the "
                                         "run's own entry in the checkpoint", shown=_short(value)))
            if not _trackable(value):
                raise ValueError(invalid(
                    name, value, "a trackable TensorFlow object (a Keras model, layer or "
                    "optimizer, a tf.Variable, a tf.Module, a tf.train.Checkpoint)",
                    shown=_short(value)))
        if self._items is None and self._ready:
            raise RuntimeError(
                "sv.track(...) must come before the first sv.step() (and before model.fit): it "
                "restores the checkpoint the steps continue from.")
        if self._items is not None:
            same = set(self._items) == set(objects) and all(
                self._items[n] is objects[n] for n in objects)
            if not same:
                raise ValueError(invalid(
                    "objects", objects, "the objects tracked first in this session "
                    f"({', '.join(f'{n}={_short(v)}' for n, v in self._items.items())}): "
                    "sv.track() is called once per run (with everything at once), and a "
                    "checkpoint always holds the same objects",
                    shown=", ".join(f"{n}={_short(v)}" for n, v in objects.items())))
            return self._restored_from
        self._build_for_restore(objects)
        self._items = dict(objects)
        self._attached = kind
        self._state = _RunState()
        self._root = tf.train.Checkpoint(**self._items, **{STATE_NAME: self._state})
        restored = None
        existing = []
        if self._logdir:
            existing = saving.candidates(self._logdir, self._config.checkpoint_basename)
            rates = _learning_rates(self._items)
            restored = saving.restore_newest(self._root, self._logdir,
                                             self._config.checkpoint_basename, existing)
            if restored is not None:
                _keep_learning_rates(rates, restored)
            self._writer = saving.CheckpointWriter(
                {**self._items, STATE_NAME: self._state}, self._logdir,
                self._config.checkpoint_basename, self._config.keep, existing,
                async_save=self._async_save, on_saved=self._on_saved,
                checked=(_trainable_variables(self._items.values())
                         if self._config.on_nan != finite.IGNORE else ()),
                on_error=self.request_stop)
        if restored is not None:
            self._step = int(self._state.step.numpy())
            self._restored_position = (int(self._state.fit.numpy()),
                                       int(self._state.epoch.numpy()),
                                       int(self._state.batch.numpy()))
            self._last_saved_step = self._step
        elif self._config.init_fn is not None:
            self._config.init_fn()
        self._make_ready(restored)
        return restored

    @staticmethod
    def _build_for_restore(objects) -> None:
        """Keras variables are made when a model is built and when an optimizer first applies
        gradients; a restore needs them now."""
        models = [v for v in objects.values() if hasattr(v, "trainable_variables")
                  and not hasattr(v, "apply_gradients")]
        for name, model in objects.items():
            if any(model is m for m in models) and getattr(model, "built", True) is False \
                    and not model.variables:
                raise ValueError(invalid(
                    name, model, "a built model: its variables must exist to be restored. "
                    "Build it first (model.build(input_shape), or call it on a batch)",
                    shown=_short(model)))
        for value in objects.values():
            if hasattr(value, "apply_gradients") and hasattr(value, "build") and \
                    getattr(value, "built", True) is False:
                variables = [v for m in models for v in m.trainable_variables]
                if variables:
                    value.build(variables)

    def _make_ready(self, restored: Optional[str]) -> None:
        self._ready = True
        self._restored_from = restored
        now = time.monotonic()
        if self._writer is not None and self._config.save_model_secs:
            self._next_save = now + self._config.save_model_secs
        if self._config.save_summaries_secs:
            self._next_summary = now + self._config.save_summaries_secs
        if self._event_file is not None:
            self._event_file.add_session_log(_SessionLog(status=_SessionLog.START), self._step)
        self._hub.emit(events.SessionReady, self._step, restored, True, time.time())
        if self._config.save_summaries_secs:
            counter = services.StepCounterService(
                self._coord, self._config.save_summaries_secs, tag=STEP_RATE_TAG,
                read=lambda: self._step, writer=self._event_file or _NoEventFile(),
                hub=self._hub)
            self._threads.add(counter)
            counter.start()
        if self._config.max_steps is not None and self._step >= self._config.max_steps:
            logger.info("The restored step %d is at or past max_steps=%d: nothing to train.",
                        self._step, self._config.max_steps)
            self.request_stop()

    def _boundary(self, progress: Optional[tuple] = None) -> bool:
        """The step boundary (training thread): max_steps, summaries, progress, due or asked
        saves. Returns True when the loop must stop."""
        if self._writer is not None and self._writer.verdict_known:
            # The check of the save before ran beside its write: its verdict, at the first
            # boundary after the write ended (before, it would cost this thread a check).
            with self._save_lock:
                self._take_verdict(final=False)
        if self._pending_rollback is not None:  # a save from another thread was refused
            with self._save_lock:
                if self._pending_rollback is not None:
                    self._roll_back()
        if progress is not None:
            self._last_progress = progress
        now = time.monotonic()
        if now >= self._next_summary:
            self._next_summary = now + self._config.save_summaries_secs
            self._write_scalars(self._scalars, self._step)
        if now >= self._next_progress:
            self._next_progress = now + PROGRESS_SECS
            self._emit_progress(progress)
        request = self._save_request
        if request is not None or now >= self._next_save:
            self._save_at_boundary(request)
        # After the save, and its verdict: a rollback takes the step back below max_steps.
        max_steps = self._config.max_steps
        if max_steps is not None and self._step >= max_steps:
            if self._writer is not None and self._writer.verdict_pending:
                with self._save_lock:
                    self._take_verdict(final=False)
            if self._step >= max_steps:
                self.request_stop()
        return self._stop_requested or self._coord.should_stop()

    def _save_at_boundary(self, request: Optional[_SaveRequest], final: bool = False) -> None:
        if request is not None:
            with self._mutex:
                self._save_request = None
            try:
                request.path = self._save_and_wait(final)
            except BaseException as e:  # pylint: disable=broad-except
                request.error = e
                raise
            finally:
                request.done.set()
        elif self._step != self._last_saved_step:
            self._save()
        # else the newest checkpoint holds this very state (a rollback restored it): writing
        # it again would cost a save and put the good checkpoint's files at risk for nothing.
        if self._config.save_model_secs and self._writer is not None:
            self._next_save = time.monotonic() + self._config.save_model_secs

    def _save(self, final: bool = False) -> Optional[str]:
        """Takes a checkpoint of the current step (its files are written in the background).
        None when nothing was saved: the model is not finite and it rolled back (or will, at
        the training thread's next boundary). ``final``: the checkpoint that ends a fit or the
        session, which never rolls back."""
        with self._save_lock:
            if self._writer is None:
                return None
            if not self._take_verdict(final):
                return None
            if self._pending_rollback is not None and not final:
                if threading.current_thread() is self._thread:
                    self._roll_back()
                return None
            step = self._step
            if not self._check_finite(step, final):
                return None
            fit, epoch, batch = self._fit_position
            self._state.step.assign(step)
            self._state.fit.assign(fit)
            self._state.epoch.assign(epoch)
            self._state.batch.assign(batch)
            logger.info("Saving checkpoint %s-%d", self._config.checkpoint_basename, step)
            path = self._writer.save(step)
            self._last_saved_step = step
            # A check made before the write has its verdict now: no step more on a bad model.
            if self._writer.checked_before and not self._take_verdict(final):
                return None
            return path

    def _check_finite(self, step: int, final: bool) -> bool:
        """With ``_save_lock`` held, before a save: True when the newest value of every
        reported scalar is finite, or with ``on_nan="ignore"``; else ``_refuse``. The trainable
        variables are checked by the writer (``saving.CheckpointWriter``: beside the write,
        its verdict taken by ``_take_verdict``); here only to name them."""
        if self._writer is None or not self._writer.checks:
            return True
        scalars = [finite.NonFiniteScalar(tag, value, None)
                   for tag, value in sorted(_finite_values(self._scalars).items())
                   if not math.isfinite(value)]
        if not scalars:
            return True
        return self._refuse(step, finite.describe_problem(self._writer.non_finite_now(), scalars),
                            final)

    def _take_verdict(self, final: bool) -> bool:
        """With ``_save_lock`` held: takes the verdict of the newest save's check of the
        variables (waiting for the check, not the write). True when there was none or it
        passed; else (the save wrote nothing) ``_refuse`` at the step of that save."""
        verdict = self._writer.verdict() if self._writer is not None else None
        if verdict is None or not verdict.variables:
            return True
        self._last_saved_step = None
        return self._refuse(verdict.step, finite.describe_problem(verdict.variables, []), final)

    def _refuse(self, step: int, problem: str, final: bool) -> bool:
        """With ``_save_lock`` held, nothing saved for ``step``: with ``on_nan="rollback"``
        (not ``final``, while rollbacks are left) returns False after the rollback (training
        thread) or with it scheduled (another thread); else raises NonFiniteError, which also
        stops the run when raised in another thread than the training thread."""
        self._writer.wait()  # a save in flight that passes is the newest good one
        kept = self._writer.kept
        newest_good = kept[-1] if kept else None
        if (self._config.on_nan == finite.ROLLBACK and not final and newest_good
                and self._rollbacks < self._config.max_rollbacks):
            self._pending_rollback = (step, problem)
            logger.info("Training diverged at step %s: %s. Not saved; rolling back to %s.",
                        step, problem, newest_good)
            if threading.current_thread() is self._thread:
                self._roll_back()
            return False
        error = finite.NonFiniteError(
            finite.non_finite_message(step, problem, newest_good, rollbacks=self._rollbacks,
                                      final=final), step, problem, newest_good)
        logger.error("%s", error)
        if threading.current_thread() is not self._thread:
            self.request_stop(error)
        raise error

    def _roll_back(self) -> None:
        """Training thread, ``_save_lock`` held, at a step boundary: restores the newest good
        checkpoint (an older one if it cannot be read) in place of the diverged model, with
        the global step and the optimizer's state, and reports it. Keras models' running
        metrics restart, or fit's mean loss would stay NaN until the epoch ends."""
        step, problem = self._pending_rollback
        self._pending_rollback = None
        paths = list(reversed(self._writer.kept))
        rates = _learning_rates(self._items)
        try:
            path = saving.restore_newest(self._root, self._logdir,
                                         self._config.checkpoint_basename, paths)
        except Exception as e:  # pylint: disable=broad-except
            path = paths[0] if paths else None
            raise finite.NonFiniteError(
                f"Training diverged at step {step}: {problem}. Rolling back to {path} failed "
                f"({describe_error(e)}), and the run stopped. Nothing was saved for the "
                "diverged state.", step, problem, path) from e
        _keep_learning_rates(rates, path)
        self._step = int(self._state.step.numpy())
        self._last_saved_step = self._step
        self._rollbacks += 1
        self._scalars = {}
        for value in self._items.values():
            if callable(getattr(value, "reset_metrics", None)):
                value.reset_metrics()
        message = finite.rollback_message(step, problem, path, self._step, self._rollbacks,
                                          self._config.max_rollbacks)
        logger.warning("%s", message)
        if self._event_file is not None:
            # Like a restart from the checkpoint: TensorBoard drops the diverged points.
            self._event_file.add_session_log(_SessionLog(status=_SessionLog.START, msg=message),
                                             self._step)
        self._hub.emit(events.RolledBack, step, self._step, path, problem, self._rollbacks,
                       self._config.max_rollbacks, time.time())

    def _save_and_wait(self, final: bool = False) -> Optional[str]:
        with self._save_lock:
            path = self._save(final)
            if path is not None:
                self._writer.wait()
                if not self._take_verdict(final):
                    return None
            return path

    def _save_if_moved(self) -> None:
        """The checkpoint that ends a fit or the session, unless this step is saved; the
        verdicts of the checks of this step's save and of that one."""
        with self._save_lock:
            if self._writer is None:
                return
            # The verdict of a save made before: that checkpoint was not the final one, so
            # (in the training thread) it may still roll back, and then nothing moved.
            self._take_verdict(final=threading.current_thread() is not self._thread)
            if self._step != self._last_saved_step and self._save(final=True) is not None:
                self._take_verdict(final=True)

    def _on_saved(self, step, path, wall_time, seconds) -> None:
        """Writer thread: the checkpoint's files are under its name."""
        event_file = self._event_file  # the session's end may close it meanwhile
        if event_file is not None:
            event_file.add_session_log(_SessionLog(
                status=_SessionLog.CHECKPOINT, checkpoint_path=path), step)
        kept = tuple(reversed(self._writer.kept)) if self._writer is not None else ()
        self._hub.emit(events.CheckpointSaved, step, path, wall_time, seconds, kept)

    def _write_scalars(self, scalars: Dict[str, object], step: int, prefix: str = "") -> None:
        values = {}
        for tag, value in scalars.items():
            number = _to_float(value)
            if number is not None:
                values[prefix + tag] = number
        if not values:
            return
        if self._event_file is not None:
            self._event_file.add_summary(_Summary(value=[
                _Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()]),
                step)
        self._hub.emit(events.SummaryWritten, step, types.MappingProxyType(values), time.time())

    def _emit_progress(self, progress: Optional[tuple]) -> None:
        epoch = epochs = batch = batches = None
        if progress is not None:
            epoch, epochs, batch, batches = progress
        # Tensors are converted on the dispatcher thread, and only when someone listens.
        self._hub.emit(_progress_record, self._step, epoch, epochs, batch, batches,
                       dict(self._scalars), time.time())

    def _set_stepping(self, value: bool, error: Optional[BaseException] = None) -> None:
        with self._save_lock:
            with self._mutex:
                self._stepping = value
                request = self._save_request if not value else None
        if request is None:
            return
        if error is None:
            # The loop ended: a waiting save_now() is served now, as the checkpoint ending it.
            self._save_at_boundary(request, final=True)
            return
        with self._mutex:
            self._save_request = None
        request.error = RuntimeError(f"No checkpoint was written: the run failed first "
                                     f"({type(error).__name__}: {error}).")
        request.done.set()

    def _end(self, error: Optional[BaseException]) -> None:
        """Leaving the session: final checkpoint, services stopped, files closed, Stopped."""
        if self._stop_exception is not None and error is None:
            error = self._stop_exception
        if self._callback is not None:  # a fit that raised leaves its train_function wrapped
            self._callback.uninstall()
        try:
            self._set_stepping(False, error)
        except BaseException as e:  # pylint: disable=broad-except
            error = error or e
        if error is None:
            try:
                self._save_if_moved()
            except BaseException as e:  # pylint: disable=broad-except
                error = e
        self._coord.request_stop()
        try:
            self._coord.join(stop_grace_period_secs=self._config.stop_grace_secs)
        except BaseException as e:  # pylint: disable=broad-except
            error = error or e
        if self._writer is not None:
            try:
                if not self._writer.wait(self._config.stop_grace_secs):
                    error = error or CheckpointWriteError(
                        "The last checkpoint was not written within "
                        f"{self._config.stop_grace_secs:g} s (stop_grace_secs); it may be "
                        "missing.")
            except BaseException as e:  # pylint: disable=broad-except
                error = error or e
        if self._writer is not None and self._writer.sync_reason:
            self._notes.append(self._writer.sync_reason)
        if self._attached is None and self._logdir:
            note = ("The body never called sv.track(...) nor passed sv.callback to model.fit "
                    "(callbacks=[sv.callback]): nothing was checkpointed.")
            # Shown once: the run prints its notes into its output (a log record would be a
            # second copy, in whichever cell runs then).
            logger.debug(note)
            self._notes.append(note)
        if self._event_file is not None:
            self._event_file.add_session_log(_SessionLog(status=_SessionLog.STOP),
                                             self._step if self._ready else None)
            self._event_file.close()
            self._event_file = None
        if self._lock is not None:
            self._lock.release()
        reason = self._stop_reason or events.REQUESTED
        if error is not None:
            reason = events.ERROR
        if self._ready:  # where training really ended, not the last throttled Progress
            self._emit_progress(self._last_progress)
        self._hub.emit(events.Stopped, reason, error, self._step if self._ready else None,
                       time.time())
        if error is not None:
            raise error
