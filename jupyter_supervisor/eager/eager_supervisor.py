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
(``save_now()`` from another thread), the scalars become points of the curves (the panel's and
the event file's, ``reporting``), ``max_steps`` requests the stop, and a stop that the body never
looks at raises ``backend.StopBody``. ``sv.callback`` does all that for ``model.fit`` (see
``keras_callback``). Leaving ``session()`` writes a final checkpoint at the last step.
``report()`` writes a loop's evaluation metrics (between steps); with ``--keep-best METRIC`` a
better value of METRIC there, at a fit's epoch end, or at a checkpoint of the loop's
``step(METRIC=...)`` makes that checkpoint the best, which retention keeps (``best``).

This module is the adapter: the Backend interface, ``track``/``step`` and the step boundary;
``fit_state`` is the fit side that ``keras_callback`` talks to (the seam: ``fit_seam``). A
checkpoint is taken only at a step boundary in the training thread, so it never holds half of a
step (``checkpointer``); the training thread waits for the copy of the variables to host memory
(``snapshot``), a writer thread writes the files (``writer``). Everything is reported as
``events`` records and in the event file (``reporting``).

A model that is not finite is never saved (``finite``): the run stops (``on_nan="stop"``), or
(``"rollback"``) the newest good checkpoint is restored at that step boundary (model, optimizer,
global step; a save asked from another thread rolls back at the next boundary, and one whose
weights the writer found not finite at the first boundary after its check: it checks them in
the background, before it writes them) and training goes on from it, at most
``max_rollbacks`` times. Inside ``fit`` the data goes on where it was (the batches are not
replayed) and the model's running metrics restart.
"""
import contextlib
import inspect
import logging
import numbers
import os
import threading
import weakref
from typing import Dict, List, Optional

import tensorflow as tf

from .. import capabilities, compat, events, finite, stops
from ..backend import StopBody, clean_up
from ..config import RunConfig
from ..checkpoints import prepare_logdir, remove_partial_saves
from .._validate import check_checkpoint_path, invalid, named, short
from ..lockfile import LogdirLock
from . import claims
from . import restore as restoring
from .variables import holds_state
from .checkpointer import STATE_NAME, Checkpointer, Where
from .fit_state import FitState
from .replicas import Replicas
from .reporting import Reporter

logger = logging.getLogger("jupyter_supervisor")

# Said before Keras fails on its own, deep inside fit (converting a PerReplica to a Tensor).
KERAS_MULTI_WORKER = (
    "Keras 3 model.fit does not support tf.distribute.MultiWorkerMirroredStrategy yet "
    "(https://github.com/keras-team/keras/issues/20585). Train with a custom loop instead: "
    "strategy.run(train_step, ...) with sv.track(model=model, optimizer=optimizer) and "
    "sv.step(loss=loss), which runs on every worker (see docs/replicas.md).")




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
                             shown=short(value)))


def _callable_without_arguments(fn) -> bool:
    try:
        inspect.signature(fn).bind()
    except TypeError:
        return False
    except ValueError:  # no signature to inspect (a builtin): let the call tell
        return True
    return True


def _check_config(config) -> None:
    """Raises for what the eager backend cannot do with ``config``."""
    if not isinstance(config, RunConfig):
        raise TypeError(invalid("config", config, "a jupyter_supervisor.config.RunConfig",
                                shown=short(config)))
    if not tf.executing_eagerly():
        raise RuntimeError(
            "The eager backend needs eager execution, and it is off here (graph mode: "
            "tf.compat.v1.disable_eager_execution(), or inside a tf.Graph). Use the graph "
            "Supervisor for graph code.")
    if config.master:
        raise ValueError(invalid(
            "master", config.master, "'' : the eager backend trains in this process (for "
            "several machines use a tf.distribute strategy inside the body)"))
    if not config.is_chief and config.workers == 1:
        raise ValueError(invalid(
            "is_chief", config.is_chief, "True: the eager backend has no replicas to wait for "
            "(a multi-worker run gives each worker's role in TF_CONFIG)"))
    if config.workers > 1 and config.on_nan == finite.ROLLBACK:
        raise ValueError(invalid(
            "on_nan", config.on_nan, f"{finite.STOP!r} or {finite.IGNORE!r} with several "
            "workers (TF_CONFIG): a rollback restores the chief's model alone"))
    if config.init_fn is not None and not _callable_without_arguments(config.init_fn):
        raise ValueError(invalid(
            "init_fn", config.init_fn, "a function taking no argument: in eager mode it "
            "runs after sv.track(...) (or at the start of fit) when there is no checkpoint, "
            "with no session to pass", shown=short(config.init_fn)))


def _check_objects(objects: Dict[str, object]) -> None:
    """Raises ValueError for what ``track`` cannot checkpoint."""
    if not objects:
        raise ValueError(invalid(
            "objects", objects, "at least one trackable to checkpoint, by name: "
            "sv.track(model=model, optimizer=optimizer)", shown="{} (nothing)"))
    for name, value in objects.items():
        if name == STATE_NAME:
            raise ValueError(invalid(name, value, f"another name: {STATE_NAME!r} is the "
                                     "run's own entry in the checkpoint", shown=short(value)))
        if not compat.is_trackable(value) or _holds_no_variables(value):
            raise ValueError(invalid(
                name, value, "a trackable TensorFlow object that holds variables (a Keras "
                "model, layer or optimizer, a tf.Variable, a tf.Module, a "
                "tf.random.Generator, a tf.train.Checkpoint): a function or a number holds no "
                "state to checkpoint", shown=short(value)))


def _holds_no_variables(value) -> bool:
    """True for a trackable with nothing to save, now or once built: a tf.function (a
    checkpoint of it would hold none of the model it trains). Modules, Keras layers and models
    (which make their variables when built: ``_build_for_restore`` says so) and optimizers
    (when they first apply gradients) pass."""
    if hasattr(value, "trainable_variables") or hasattr(value, "apply_gradients"):
        return False
    return not holds_state(value)


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
                shown=short(model)))
    for value in objects.values():
        if hasattr(value, "apply_gradients") and hasattr(value, "build") and \
                getattr(value, "built", True) is False:
            variables = [v for m in models for v in m.trainable_variables]
            if variables:
                value.build(variables)


class EagerSupervisor:
    """The eager backend of one session of a run (``backend.Backend``).

    Built in the kernel's main thread: checks the config, takes the logdir's lock (a second
    writer gets ``LogdirLockedError``). In the run's thread, ``session()`` yields ``{"sv":
    self}`` for the body; the body calls ``track()``/``step()`` or passes ``callback`` to fit,
    which talks to the session through its fit side (``fit_state.FitState``).
    """

    def __init__(self, config: RunConfig, *, async_save: bool = True):
        _check_config(config)
        self._config = config
        self._hub = events.EventHub()
        self._logdir = config.logdir if config.saves else None
        self._lock: Optional[LogdirLock] = None
        if self._logdir:
            check_checkpoint_path("logdir", self._logdir)
            prepare_logdir(self._logdir)
            if "://" not in self._logdir:
                self._lock = LogdirLock(self._logdir)
                self._lock.acquire()

        # With several workers, a stop is asked here and takes effect when all of them agree,
        # at a step boundary (``Replicas.stops``).
        self._replicas = (Replicas(config.task_index, config.workers, bool(config.is_chief))
                          if config.workers > 1 else None)

        # The session's stop, asked from any thread (the one record of it: ``stops``).
        self._stops = stops.Stops(agreed=self._replicas is None)

        # Written by the training thread only.
        self._thread: Optional[threading.Thread] = None
        self._entered = False
        self._active = False
        self._ready = False                        # restored or initialized
        self._attached: Optional[str] = None       # "track" or "callback"
        self._where = Where()                      # the step, fit's position, the scalars
        self._looked = False                       # should_stop() was called in this session
        self._stop_pending_at_last_step = False    # the body looked at the stop: one step more
        # What the session tracked, by weak reference: restore_best() loads into it after the
        # session (a run's record must not keep a model alive).
        self._tracked: Dict[str, "weakref.ref"] = {}
        self._reporter = Reporter(self._hub, config.save_summaries_secs)
        self._checkpointer = Checkpointer(config, self._where, self._reporter,
                                          self.request_stop, async_save=async_save,
                                          sweeps=self._lock is not None)
        self._last_progress: Optional[tuple] = None  # fit's position at the last boundary
        # The fit side: the one thing of this session that sv.callback talks to.
        self._fit = FitState(self._checkpointer, self._where, self._reporter, self._stops,
                             check_active=self._check_active, trains_here=self._trains_here,
                             track=self._track, boundary=self._boundary)
        self._notes: List[str] = []
        self._closed = False

    # ------------------------------------------------------------------------- Backend

    def add_listener(self, listener) -> None:
        """``listener(record)`` for every ``events`` record, on a dispatcher thread."""
        self._hub.add_listener(listener)

    def flush_events(self, timeout: Optional[float] = None) -> bool:
        """Waits until the listeners have seen every record emitted so far."""
        return self._hub.flush(timeout)

    def owns_thread(self, thread) -> bool:
        """True for the checkpoint writer's threads."""
        return thread in self._checkpointer.threads

    def notes(self) -> List[str]:
        """What this run does differently from what its options suggest (more may come when
        the session ends: a body that never named what to checkpoint)."""
        return list(self._notes)

    @property
    def supervisor(self) -> "EagerSupervisor":
        """What the body sees as ``sv``: this backend."""
        return self

    @property
    def stopped_by_peer(self) -> Optional[str]:
        """Why another worker of a multi-worker run stopped this one ("a stop on worker 1"),
        or None: it was not (or this run has no other workers)."""
        record = self._stops.record
        return record.why if record is not None and record.by[0] == stops.PEER else None

    @property
    def stop_record(self) -> Optional[stops.StopRecord]:
        """The session's stop as asked so far (``stops.StopRecord``), or None."""
        return self._stops.record

    @property
    def restored_from(self) -> Optional[str]:
        """The checkpoint this session restored, or None."""
        return self._checkpointer.restored_path

    @property
    def logdir(self) -> Optional[str]:
        """Where the run saves (None: it saves nothing)."""
        return self._logdir

    def read_step(self) -> Optional[int]:
        """The global step, or None before track() (or the fit) restored or initialized."""
        return self._where.step if self._ready else None

    def should_stop(self) -> bool:
        """True once a stop was requested, max_steps reached, or the input ran out."""
        self._looked = True
        return self._stops.requested

    def request_stop(self, ex: Optional[BaseException] = None, why: Optional[str] = None, *,
                     by: str = stops.SESSION, step: Optional[int] = None) -> None:
        """Ends the session at the next step boundary; ``ex`` fails the run (re-raised when the
        session ends), except OutOfRangeError, the normal end of the input. ``why`` (the first
        one given) is the msg of the event file's SessionLog.STOP and the Stopped's ``why``.
        ``by``: who asks (``stops``); ``step``: where it was asked (by default the step now)."""
        reason = (events.REQUESTED if ex is None else events.OUT_OF_RANGE
                  if isinstance(ex, tf.errors.OutOfRangeError) else events.ERROR)
        if step is None and self._ready:
            step = self._where.step
        # A replica's stop takes effect when every worker knows, at the step boundary.
        self._stops.ask(by, why=why, reason=reason, error=ex, step=step)

    def save_now(self, timeout: Optional[float] = None) -> Optional[str]:
        """Writes a checkpoint and returns its path once its files are written (None: no logdir,
        nothing tracked, or a model that is not finite rolled back instead, with
        ``on_nan="rollback"``). From another thread while the body trains, the training thread
        saves at its next step boundary (within ``timeout``, default ``stop_grace_secs``, or
        TimeoutError); when it does not train (before, between or after its loops), at once."""
        if not self._logdir:
            return None
        if not self._active:
            written = self._checkpointer.last_path
            raise RuntimeError(
                "save_now() needs a running session: before it there is nothing to save, and "
                "after it the final checkpoint was written"
                + (f" ({written})." if written else "."))
        timeout = self._config.stop_grace_secs if timeout is None else timeout
        return self._checkpointer.save_now(timeout, self._ready)

    @contextlib.contextmanager
    def session(self):
        """In the run's thread: yields ``{"sv": self}`` for the body. Leaving it writes a final
        checkpoint (unless an error ended the block) and releases what the session holds
        (``_release``); the Stopped record comes last. StopBody and OutOfRangeError end the
        block cleanly. One session per backend."""
        if self._entered:
            raise RuntimeError("This backend ran its session already; a resume builds a new "
                               "EagerSupervisor.")
        if self._closed:
            raise RuntimeError("This backend is closed; build a new EagerSupervisor.")
        self._entered = True
        self._thread = threading.current_thread()
        self._checkpointer.begin(self._thread)
        self._active = True
        if self._lock is not None:  # the unlisted saves go once a listed checkpoint restored
            remove_partial_saves(os.path.join(self._logdir, self._config.checkpoint_basename))
        self._reporter.open(self._logdir)
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
        error = self._release()
        if error is not None:
            raise error

    # ------------------------------------------------------------------------- the body's API

    @property
    def callback(self):
        """The Keras callback to pass to ``model.fit`` (``callbacks=[sv.callback]``).
        RuntimeError in a multi-worker run, where Keras 3 fit fails (KERAS_MULTI_WORKER): the
        body asks for it before fit starts, so this says why first."""
        why = capabilities.off("fit")
        if why is not None:
            raise RuntimeError(
                f"sv.callback needs what this Keras lacks: {why}. Install keras>="
                f"{capabilities.FLOORS['keras']}, or train in a custom loop with sv.track(...) "
                "and sv.step(...) (docs/versions.md).")
        callback = self._fit.callback()
        if self._replicas is not None:
            raise RuntimeError(KERAS_MULTI_WORKER)
        return callback

    def track(self, **objects) -> Optional[str]:
        """Names what to checkpoint and restores the newest checkpoint of the logdir into it;
        without one, calls ``init_fn()`` (``--init-fn``). Call it in the body, before the first
        ``sv.step()``.

        A Keras model must be built (its variables exist); an unbuilt Keras optimizer is built
        for the trainable variables of the tracked models. An optimizer takes the checkpoint's
        learning rate (the one training reached) unless the code now sets another than the
        checkpoint's run did (a lower one to get past a divergence): then the code's; said
        when they differ (``learning_rates``). An unreadable newest checkpoint falls back to
        the next older one. Calling it again with the same objects restores nothing more and
        returns the same path.

        Args:
            **objects: what to checkpoint, by name: Keras models, layers and optimizers,
                tf.Variables, tf.Modules, tf.random.Generators (any trackable that holds
                variables). The names are the checkpoint's keys: keep them across runs.

        Returns:
            The path of the checkpoint restored, or None (none yet, or no logdir).

        Raises:
            RuntimeError: called outside a run's body, from another thread than the body's,
                or after the first ``sv.step()``.
            ValueError: no objects, an object that holds no variables, an unbuilt model, the
                reserved name of the run's own entry, or other objects than this session
                tracked first.
            RunConflictError: another live run trains one of the objects.
            CheckpointMismatchError: the newest checkpoint does not fit the objects (a
                changed model, another optimizer, renamed keys); the message says which.

        Example::

            sv.track(model=model, optimizer=optimizer)
            while not sv.should_stop():
                loss = train_step(next(batches))
                sv.step(loss=loss)
        """
        self._check_active("sv.track()")
        return self._track(objects, "track")

    def step(self, **scalars) -> int:
        """Ends a training step: counts the global step, keeps ``scalars`` for the event file
        and the panel, and, at this step boundary, saves when a checkpoint is due or asked for
        (the files are written in the background). Requests the stop when the step reaches
        ``--max-steps``. Without ``sv.track()`` before, the steps are counted and nothing is
        checkpointed.

        Args:
            **scalars: the step's values by name (the loss...): numbers or scalar tensors,
                kept as they are: the event file's copy is read on the event thread, so the
                step does not wait for it (a save's check of the newest values reads them).

        Returns:
            The global step after this boundary: one more than before, or, when a model that
            was not finite made the run roll back (``--on-nan rollback``), the step of the
            checkpoint it went back to.

        Raises:
            StopBody: a stop was requested and the body did not look (it never calls
                ``sv.should_stop()``, or it stepped again after the stop): the body ends here,
                cleanly, and the run writes its final checkpoint.
            RuntimeError: called outside a run's body or from another thread than the
                body's; in a multi-worker run, before ``sv.track()``.
            ValueError: a scalar that is not a number or a scalar tensor.
            NonFiniteError: a checkpoint was due and the model is not finite (``--on-nan
                stop``, the default).
            CheckpointWriteError: an earlier checkpoint's files could not be written.
        """
        self._check_active("sv.step()")
        for name, value in scalars.items():
            _scalar(name, value)
        if not self._ready:
            if self._replicas is not None:
                raise RuntimeError(
                    "sv.track(model=..., optimizer=...) must come before the first sv.step() "
                    "in a multi-worker run (TF_CONFIG): every worker restores the chief's "
                    "checkpoint into what it tracks, and the workers agree on each stop.")
            self._make_ready(None)
        if not self._checkpointer.stepping:
            self._checkpointer.set_stepping(True)
        self._where.step += 1
        if scalars:
            self._where.scalars = scalars
            self._checkpointer.note(scalars)
        if self._boundary():
            # A body that never looks, or that stepped again after the stop: it ends here,
            # at this boundary (the step it took is counted and saved).
            if not self._looked or self._stop_pending_at_last_step:
                raise StopBody()
            self._stop_pending_at_last_step = True
        return self._where.step

    def report(self, **metrics) -> Optional[str]:
        """Reports metrics measured between steps on the model as it is (an evaluation),
        written at once to the event file and the panel at the current step. With
        ``--keep-best METRIC``, a better value of METRIC makes a checkpoint of this state now,
        kept as the best. For custom loops: in fit, the metrics are those of its epoch-end logs
        (validation included); a callback of yours adds one by setting ``logs[name]`` in its
        ``on_epoch_end``, before ``sv.callback`` in the list.

        Args:
            **metrics: the values by name (``val_loss=...``): numbers or scalar tensors.

        Returns:
            The path of the checkpoint made as the new best (its files are written in the
            background); None when no new best came (or without ``--keep-best`` or a logdir).

        Raises:
            RuntimeError: called outside a run's body, from another thread than the body's,
                inside ``model.fit``, or before ``sv.track()``.
            ValueError: no metrics, or one that is not a number or a scalar tensor.
            NonFiniteError: a new best is due and the model is not finite (``--on-nan stop``).

        Example::

            for epoch in range(epochs):
                for batch in batches:
                    sv.step(loss=train_step(batch))
                sv.report(val_loss=evaluate(model, val_data))
        """
        self._check_active("sv.report()")
        if self._fit.in_fit:
            raise RuntimeError(
                "sv.report() is for custom loops, between steps. In model.fit the metrics are "
                "its epoch-end logs (validation included): a callback of yours adds a value by "
                "setting logs['name'] = value in its on_epoch_end, placed before sv.callback "
                "in the callbacks list.")
        if not metrics:
            raise ValueError(invalid("metrics", metrics, "at least one metric by name: "
                                     "sv.report(val_loss=val_loss)", shown="{} (nothing)"))
        for name, value in metrics.items():
            _scalar(name, value)
        if not self._ready:
            raise RuntimeError("sv.report() reports on the tracked model: call "
                               "sv.track(model=..., optimizer=...) first.")
        self._reporter.scalars(metrics, self._where.step)
        return self._checkpointer.offer(metrics)

    def restore_into(self, path: str, **objects) -> str:
        """Restores the checkpoint ``path`` of this run into ``objects`` (by the names they
        were tracked under: ``model=model``; a part of them too), or without them into what
        this session tracked; returns ``path``. For a session that ended (a live one trains
        on over what it restores). CheckpointMismatchError when the objects do not fit."""
        if self._active:
            raise RuntimeError("restore_into() restores into the tracked objects after the "
                               "session; this one still trains them.")
        if not objects:
            objects = {name: ref() for name, ref in self._tracked.items()}
            gone = [name for name, value in objects.items() if value is None]
            if not objects or gone:
                raise ValueError(invalid(
                    "objects", {}, "the objects to restore into, by the names they were "
                    "tracked under (model=model, optimizer=optimizer): "
                    + ("this session tracked nothing" if not objects else
                       f"what this session tracked ({', '.join(gone)}) no longer exists"),
                    shown="{} (nothing)"))
        _check_objects(objects)
        restoring.restore(tf.train.Checkpoint(**objects), path)
        return path

    # ------------------------------------------------------------------------- internals

    def _trains_here(self) -> bool:
        """True in the training thread while the session runs (a fit elsewhere is not ours)."""
        return self._active and threading.current_thread() is self._thread

    def _check_active(self, what: str) -> None:
        if not self._active:
            raise RuntimeError(
                f"{what} was called outside a run: it works in the body of a %%supervise cell "
                "(or inside `with backend.session():`), while that run trains.")
        if threading.current_thread() is not self._thread:
            raise RuntimeError(f"{what} must be called from the run's training thread (the "
                               "cell body), not from another thread.")

    def _track(self, objects: Dict[str, object], kind: str) -> Optional[str]:
        _check_objects(objects)
        items = self._checkpointer.items
        if items is None and self._ready:
            raise RuntimeError(
                "sv.track(...) must come before the first sv.step() (and before model.fit): it "
                "restores the checkpoint the steps continue from.")
        if items is not None:
            if set(items) != set(objects) or any(items[n] is not objects[n] for n in objects):
                raise ValueError(invalid(
                    "objects", objects, f"the objects tracked first in this session "
                    f"({named(items)}): sv.track() is called once per run (with everything at "
                    "once), and a checkpoint always holds the same objects",
                    shown=named(objects)))
            return self._checkpointer.restored_path
        # Before anything is restored into them: another live run may be training them.
        claims.claim(self, self._config.name, objects)
        _build_for_restore(objects)
        self._attached = kind
        replicas = self._replicas
        if replicas is not None:
            replicas.attach(objects)
        restored = self._checkpointer.track(objects, newest=replicas is None or
                                            replicas.is_chief)
        self._fit.hook_finalize(objects)
        if replicas is not None:
            step = replicas.chief_restored(self._where.step if restored else None)
            if step is not None and not replicas.is_chief:
                restored = self._checkpointer.restore(step)
        if restored is None and self._config.init_fn is not None:
            self._config.init_fn()
        self._tracked = {name: weakref.ref(value) for name, value in objects.items()}
        self._make_ready(restored)
        best = self._checkpointer.best
        if best is not None and best.best is not None:  # the best the restored state names
            self._reporter.best(best.best, self._checkpointer.writer.best, self._where.step)
        return restored

    def _make_ready(self, restored: Optional[str]) -> None:
        self._ready = True
        self._checkpointer.timer.restart()
        self._reporter.started(self._where.step, restored)
        if self._config.max_steps is not None and self._where.step >= self._config.max_steps:
            logger.info("The restored step %d is at or past max_steps=%d: nothing to train.",
                        self._where.step, self._config.max_steps)
            self.request_stop(by=stops.MAX_STEPS)
            self._stops.take_effect()  # every worker restored this step, and stops at it

    def _boundary(self, progress: Optional[tuple] = None, due: bool = True) -> bool:
        """The step boundary (training thread): max_steps, the curves' points, progress, due
        (unless not ``due``) or asked saves. Returns True when the loop must stop."""
        if progress is not None:
            self._last_progress = progress
        self._checkpointer.at_boundary()
        self._reporter.boundary(self._where.step, self._where.scalars, progress)
        try:
            self._checkpointer.save_at_boundary(due)
        except Exception as e:  # pylint: disable=broad-except
            if self._replicas is None:
                raise
            self.request_stop(e)  # every worker stops at this step (the chief's error)
        # After the save, and its verdict: a rollback takes the step back below max_steps.
        max_steps = self._config.max_steps
        if max_steps is not None and self._where.step >= max_steps:
            self._checkpointer.settle()
            if self._where.step >= max_steps:
                self.request_stop(by=stops.MAX_STEPS)
        if self._replicas is not None:
            self._agree_on_stop()
        return self._stops.requested

    def _agree_on_stop(self) -> None:
        """A replica's boundary: stops when any worker asked (each ends at this step)."""
        asked = self._replicas.stops(self._stops.asked)
        if asked and not self._stops.requested:
            others = [i for i in asked if i != self._replicas.index]
            if others and not self._stops.asked:
                self.request_stop(why="a stop on worker " + ", ".join(map(str, others)),
                                  by=stops.PEER)
            self._stops.take_effect()

    def _end(self, error: Optional[BaseException]) -> None:
        """Leaving the session: the final checkpoint, the teardown (``_release``), Stopped."""
        raised = error  # what ended the block (an agreed stop ended every worker's already)
        if error is None:
            error = self._stops.error
        if raised is not None and self._replicas is not None:
            lost = self._replicas.lost(raised, self._where.step if self._ready else None)
            if lost is None:
                self._replicas.report_failure(raised)
            else:
                lost.__cause__ = raised
                error = lost
        self._fit.session_ends()
        try:
            self._checkpointer.set_stepping(False, error)
            if error is None:
                self._fit.final_save()
        except BaseException as e:  # pylint: disable=broad-except
            error = error or e
        self._where.input = None  # a fit that raised left it: it holds the fit's input
        ended = error  # before the teardown's own failures
        error = self._release(error, session_ran=True)
        self._notes.extend(self._checkpointer.end_notes())
        if self._attached is None and self._logdir and ended is None and \
                not self._fit.has_callback:
            note = ("The body never called sv.track(...) nor passed sv.callback to model.fit "
                    "(callbacks=[sv.callback]): nothing was checkpointed.")
            # Shown once: the run prints its notes into its output (a log record would be a
            # second copy, in whichever cell runs then).
            logger.debug(note)
            self._notes.append(note)
        best = self._checkpointer.best
        if best is not None and best.end_note():
            self._notes.append(best.end_note())
        reason = events.ERROR if error is not None else self._stops.reason
        self._reporter.stopped(reason, error, self._where.step if self._ready else None,
                               self._stops.why)
        if error is not None:
            raise error

    def _release(self, error: Optional[BaseException] = None,
                 session_ran: bool = False) -> Optional[BaseException]:
        """The one teardown, run once (by ``_end``; or by ``close`` when no session ran): the
        checkpointer closed (the write in flight waited for, within ``stop_grace_secs``; the
        tracked objects dropped), the callback's model forgotten, the session's last step on
        the curves (``session_ran``), the event file closed (the session's end marked), the
        claims on the objects and the logdir's lock given back. Returns the error that ends
        the run: ``error``, else the first failure here."""
        if self._closed:
            return error
        self._closed = True
        try:
            self._checkpointer.close()   # the final checkpoint written (or past the grace)
        except BaseException as e:  # pylint: disable=broad-except
            error = error or e
        self._fit.release()
        step = self._where.step if self._ready else None
        if session_ran:
            # Whatever ended the session, its last step is on the curves (and in the event
            # file), with where training really ended, not the last throttled Progress.
            self._reporter.end(step, self._where.scalars, self._last_progress)
        # A write given up on is said with the stop, so that the next session says it too.
        why = "; ".join(filter(None, (self._stops.why, self._checkpointer.stall.unwritten)))
        error = clean_up(error, "closing the event file",
                         lambda: self._reporter.end_session(step, why))
        claims.release(self)
        if self._lock is not None:
            error = clean_up(error, "releasing the logdir's lock", self._lock.release)
        return error
