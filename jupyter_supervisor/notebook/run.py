"""TrainingRun: one supervised run of one notebook cell, in a background thread.

A run builds its backend (``backend.Backend``: the graph Supervisor, or the eager one) in the
calling (main) thread, so that bad input fails the cell at once; then, in a thread of its own,
the backend restores or initializes the model and the cell body executes with ``sv`` (and, on
the graph, ``sess``) bound in the notebook's namespace. The cell returns at once; the run is
steered through this object (``stop``, ``resume``, ``save_now``, ``wait``) and reported to a
``RunHistory`` (fed by the backend's events) that the panel and ``%supervise`` display.

Its life is a small state machine, kept in ``_TRANSITIONS`` and changed only by ``_transition``
under one lock:

    starting -> running -> stopping -> stopped
        |          |          +------> failed
        |          +--> finished | failed
        +--> stopping | finished | failed
    stopped | finished | failed -> starting     (resume)

'running' begins when the session restored or initialized the model (graph: before the body
runs; eager: at the body's ``sv.track``, the start of a fit with ``sv.callback``, or its first
``sv.step``), and ``global_step`` then holds the step it starts from. An eager body that never
does either stays 'starting' (and saves nothing) until it ends.

'stopped' means stopped on request; 'finished' means the body returned, ``max_steps`` was
reached or the input ran out (OutOfRangeError); 'failed' means an exception (in the body, in a
service, in restoring).

The registry of runs (``get_run``, ``runs``) refuses a second live run on the same name, logdir
or graph.
"""
import functools
import logging
import os
import threading
import time
from typing import Callable, Dict, List, Optional

import tensorflow as tf

from .. import capabilities, events, storage
from .._validate import invalid
from ..backend import Backend, RunConflictError, clean_up
from ..config import RunConfig
from ..checkpoints import checkpoint_paths
from ..eager.supervisor import EagerSupervisor
from ..graph.backend import GraphBackend
from ..checkpoints import CheckpointMismatchError, describe_error
from ..lockfile import LogdirLockedError, note_stop
from ..names import (ACTIVE_STATUSES, FAILED, FINAL_STATUSES, FINISHED, RUNNING, STARTING,
                     STOPPED, STOPPING, checkpoint_step)
from ..view import eventfiles
from ..view.history import RunHistory
from . import routing, shutdown
from .body import Body, default_compile, default_format, unchanged

logger = logging.getLogger("jupyter_supervisor")

# Every legal change of state; None is a run that never started.
_TRANSITIONS = {
    None: {STARTING},
    STARTING: {RUNNING, STOPPING, FINISHED, FAILED},
    RUNNING: {STOPPING, FINISHED, FAILED},
    STOPPING: {STOPPED, FAILED},
    STOPPED: {STARTING},
    FINISHED: {STARTING},
    FAILED: {STARTING},
}

# How often the history learns the live step (for the panel; --max-steps does not depend on it).
WATCH_SECS = 0.5

__all__ = ["TrainingRun", "RunConflictError", "RunStateError",
           "IllegalTransitionError", "LogdirLockedError",
           "CheckpointMismatchError", "get_run", "runs",
           "stop_all"]


class IllegalTransitionError(RuntimeError):
    """A run was asked to change state in a way its state machine does not allow."""


class RunStateError(RuntimeError):
    """The run's state does not allow what was asked (e.g. saving a run that ended)."""


def _same_dir_key(logdir: str) -> str:
    return logdir if "://" in logdir else os.path.realpath(logdir)


# --------------------------------------------------------------------------------- the run

class TrainingRun:
    """One supervised run of a cell body; see the module docstring.

    Arguments:
      config: the RunConfig.
      body: the cell's source (the training loop, or with ``config.repeat`` one step).
      namespace: the notebook namespace the body executes in; ``sv`` and ``sess`` are bound
        there.
      transform_source: ``source -> Python source``: IPython's input transformations (what
        it raises is raised by ``start``).
      compile_source: ``(python, run_name) -> code``; IPython's compiler makes tracebacks show
        the cell's own lines. A SyntaxError fails the run.
      format_exception: ``exc -> str`` for the error shown to the user; it gets the exception
        with its traceback trimmed to start at the body.
    """

    def __init__(self, config: RunConfig, body: str, namespace: dict, *,
                 transform_source: Callable[[str], str] = unchanged,
                 compile_source: Callable[[str, str], object] = default_compile,
                 format_exception: Callable[[BaseException], str] = default_format):
        if not isinstance(config, RunConfig):
            raise TypeError(invalid("config", config, "a RunConfig"))
        self.config = config
        self._body = Body(body, namespace, config.name, transform_source=transform_source,
                          compile_source=compile_source, format_exception=format_exception)
        self.history = RunHistory(format_error=self._body.format, stall_secs=config.stall_secs)
        self._version_notes: List[str] = []  # said once, at the first start

        # _lock guards the fields below it; _changed is notified on every transition.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._status: Optional[str] = None
        self._exception: Optional[BaseException] = None
        self._stop_requested = False     # by stop(): the run ends 'stopped'
        self._stop_requested_at: Optional[float] = None   # time.monotonic() of that stop()
        self._stop_why: Optional[str] = None  # what asked for the stop, when stop() said
        self._backend: Optional[Backend] = None
        self._graph = None               # what the graph backend trains (kept for resume)
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------------- what it shows

    @property
    def body(self) -> str:
        """The cell's source."""
        return self._body.source

    @property
    def name(self) -> str:
        """The run's name (``--name``, by default the logdir's last component)."""
        return self.config.name

    @property
    def logdir(self) -> Optional[str]:
        """Where checkpoints and event files go; None when nothing is saved (or a worker)."""
        return self.config.logdir if self.config.is_chief else None

    @property
    def status(self) -> Optional[str]:
        """'starting', 'running', 'stopping', 'stopped', 'finished' or 'failed'."""
        return self._status

    @property
    def global_step(self) -> Optional[int]:
        """The last known global step: from 'running' on, the step the session restored (or
        initialized: 0), then each step it trained. While 'starting': None in the run's first
        session, the step it ended at on a resume; None for a graph without a global step."""
        return self.history.step

    @property
    def stop_reason(self) -> Optional[str]:
        """Why the run was stopped, when the stop said (e.g. "the kernel received SIGTERM",
        "the kernel was restarted"); None otherwise. Also the msg of the event file's
        SessionLog.STOP record and the ``why`` of the Stopped event."""
        return self._stop_why

    @property
    def exception(self) -> Optional[BaseException]:
        """What failed the run, or None."""
        return self._exception

    @property
    def error_text(self) -> Optional[str]:
        """The formatted traceback of a failed run (pointing at the cell's lines), or None."""
        return self.history.error or None

    @property
    def error_line(self) -> Optional[str]:
        """One line for a failed run: the error's type and what went wrong, or None."""
        error = self._exception
        if error is None:
            return None
        return f"{type(error).__name__}: {describe_error(error)}"

    @property
    def max_steps(self) -> Optional[int]:
        """The step at which the run finishes, or None."""
        return self.config.max_steps

    @property
    def role(self) -> str:
        """'local', 'chief' or 'worker'."""
        return self.config.role

    @property
    def role_text(self) -> str:
        """The role as shown: "chief on grpc://...", "worker 1 of 2"; '' for a local run."""
        return self.config.role_text

    @property
    def master(self) -> str:
        """The TensorFlow master ('' for an in-process session)."""
        return self.config.master

    @property
    def restored_from(self) -> Optional[str]:
        """The checkpoint the current session was restored from, or None."""
        return self.history.restored_from

    @property
    def best_checkpoint(self) -> Optional[events.BestKept]:
        """The checkpoint kept as the best (``--keep-best METRIC``): its ``path``, ``step``,
        ``metric``, ``value``, ``mode`` and fit ``epoch`` (0-based); None when none is kept."""
        return self.history.snapshot().best

    def restore_best(self, **objects) -> str:
        """Loads the best checkpoint (``best_checkpoint``, kept with ``--keep-best METRIC``)
        into the objects the run tracked, or into ``objects``.

        For a run that ended: stop a live one first. Without ``objects``, what the run tracked
        (``model`` and ``optimizer`` for a fit with ``sv.callback``) must still exist: the run
        holds it weakly.

        Args:
            **objects: what to load into, by the names it was tracked under
                (``model=model``); a part of them is enough (the model alone, to export it).

        Returns:
            The path of the checkpoint loaded.

        Raises:
            RunStateError: the run is live, or it kept no best checkpoint (started without
                ``--keep-best``, or no value of the metric came).
            ValueError: no ``objects`` given, and what the run tracked no longer exists.
            CheckpointMismatchError: the objects do not fit the checkpoint.

        Example::

            run = jupyter_supervisor.get_run("fit")
            run.restore_best()              # the model (and optimizer) fit trained
            model.save("best.keras")
        """
        with self._lock:
            status, backend = self._status, self._backend
        if status in ACTIVE_STATUSES:
            raise RunStateError(
                f"Run {self.name!r} is {status}: it would train on over what its best "
                f"checkpoint restores. Stop it first (`%supervise stop {self.name}`), or wait "
                "for its end.")
        best = self.best_checkpoint
        if best is None:
            why = ("it does not keep one: start it with --keep-best METRIC (e.g. val_loss)"
                   if self.config.keep_best is None else
                   f"no value of {self.config.keep_best} came yet")
            raise RunStateError(f"Run {self.name!r} has no best checkpoint: {why}.")
        return backend.restore_into(best.path, **objects)

    @property
    def supervisor(self):
        """What the body sees as ``sv`` in the current (or last) session."""
        backend = self._backend
        return None if backend is None else backend.supervisor

    @property
    def notes(self) -> List[str]:
        """What the run does differently from what its options suggest."""
        backend = self._backend
        return list(self._version_notes) + ([] if backend is None else backend.notes())

    @property
    def stopping_secs(self) -> float:
        """Seconds since a stop was requested while the run is still stopping, else 0."""
        since = self._stop_requested_at
        if self._status != STOPPING or since is None:
            return 0.0
        return time.monotonic() - since

    @property
    def can_stop(self) -> bool:
        """True while a stop can be requested."""
        return self._status in (STARTING, RUNNING)

    @property
    def can_resume(self) -> bool:
        """True when the run ended and has something to resume from."""
        return self._status in FINAL_STATUSES and (self.logdir is not None
                                                   or self.role == "worker")

    @property
    def can_save(self) -> bool:
        """True while a checkpoint can be written now."""
        return self._status == RUNNING and self.logdir is not None

    @property
    def is_live(self) -> bool:
        """True from start until the run's thread has finished its work."""
        return self._status in ACTIVE_STATUSES

    def __repr__(self):
        step = "" if self.global_step is None else f", step {self.global_step}"
        return f"<TrainingRun {self.name!r}: {self._status}{step}>"

    # ------------------------------------------------------------------------ state machine

    def _transition(self, new: str, step: Optional[int] = None) -> None:
        """Changes the status (``step``: where it happened, default the history's)."""
        with self._lock:
            old = self._status
            if new not in _TRANSITIONS[old]:
                raise IllegalTransitionError(
                    f"Run {self.name!r} cannot go from {old or 'new'!r} to {new!r}.")
            self._status = new
            self.history.set_status(new, active=new in ACTIVE_STATUSES,
                                    new_session=new == STARTING, step=step)
            self._changed.notify_all()

    # ---------------------------------------------------------------------------- starting

    def start(self, graph=None) -> None:
        """Starts the run and returns at once; the body runs in a background thread.

        With eager execution (TensorFlow 2's default) the run is on the eager backend, where the
        body names what to checkpoint (``sv.track``, ``sv.callback``); in graph mode, on
        ``graph``. The backend checks and builds everything it needs here, in the calling
        thread, so that bad input fails the caller at once; then, in the run's thread, it
        restores the newest checkpoint (or initializes) and the body runs. A body that does
        not compile (SyntaxError) does not raise here: the run fails, and says why. Also used
        by ``resume()``, with the run's own graph.

        Args:
            graph: the ``tf.Graph`` to train in graph mode (None: the calling thread's default
                graph); with eager execution and None, the eager backend.

        Raises:
            RunStateError: the run is live.
            RunConflictError: another live run has this run's name, or trains this graph.
            LogdirLockedError: another run (live here, or in another process) writes to this
                logdir.
            ValueError, TypeError, RuntimeError: what the backend refuses in the config, the
                graph or the mode (the message names the argument and what it expects).
            CheckpointMismatchError: on the graph backend, when the newest checkpoint does not
                fit the graph.
        """
        with self._lock:
            if self._status not in (None, *FINAL_STATUSES):
                raise RunStateError(f"Run {self.name!r} is {self._status}; it cannot start again "
                                   "until it ended.")
        # The mode as TensorFlow decides it for the calling thread (tf.executing_eagerly()).
        eager = graph is None and tf.executing_eagerly()
        if not eager and graph is None:
            graph = tf.compat.v1.get_default_graph()
        code = self._body.compiled()   # before the backend: a refused magic raises
        _REGISTRY.check_free(self, graph)
        backend = EagerSupervisor(self.config) if eager else GraphBackend(self.config, graph)
        first = self._status is None
        if first:
            self._body.pin(graph)  # as the names are when the cell executes, also on resume
            # Once per run (a resume keeps them): what this TensorFlow and Keras cannot keep,
            # and a logdir on a disk that vanishes with the runtime.
            self._version_notes = (capabilities.start_notes(capabilities.EAGER if eager
                                                            else capabilities.GRAPH)
                                   + storage.start_notes(self.logdir))

        self._transition(STARTING)
        self.history.set_restoring(self._newest_checkpoint())
        with self._lock:
            self._stop_requested = False
            self._stop_why = None
            self._exception = None
            self._backend = backend
            self._graph = graph
        self.history.set_error("")
        _REGISTRY.add(self)
        if first:
            for note in self._version_notes:
                self.history.append_output(f"Note: {note}\n")
        if isinstance(code, SyntaxError):
            self._finish(code)
            return
        backend.add_listener(self.history.on_event)
        backend.add_listener(functools.partial(self._on_record, backend))  # after the history
        self._body.bind({"sv": backend.supervisor})
        # What the run's threads still send to the frontend goes as the output of the request
        # that started it (this cell, or the Resume button's message).
        self._thread = threading.Thread(target=self._train,
                                        args=(backend, routing.current_parent()),
                                        name=f"jupyter_supervisor-run-{self.name}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------------- the run thread

    def _train(self, backend: Backend, parent: Optional[dict]) -> None:
        error = None
        try:
            with routing.routed_to(self.history.outputs, parent), \
                    routing.threads_routed_to(backend.owns_thread, self.history.outputs):
                try:
                    self._load_earlier_history()
                    noted = len(backend.notes())  # the cell printed these when it returned
                    with backend.session() as names:
                        if self._enter_running(backend) and names:
                            self._body.bind(names)
                            with _StepWatcher(backend, self.history):
                                self._body.execute(
                                    {"sv": backend.supervisor, **names},
                                    repeat=self.config.repeat, should_stop=backend.should_stop)
                    for note in backend.notes()[noted:]:  # e.g. fit ran without sv.callback
                        self.history.append_output(f"Warning: {note}\n")
                except BaseException as e:  # pylint: disable=broad-except
                    error = e
                finally:
                    # The listeners (history, panel) see the final checkpoint and the Stopped
                    # record before wait() returns.
                    backend.flush_events(timeout=10)
        finally:
            self._finish(error)

    def _enter_running(self, backend: Backend) -> bool:
        """The session is open: True if the body should run (no stop came meanwhile). A graph
        session is ready here: its SessionReady record, delivered before the body runs, makes
        the run 'running' (an eager one does that later, from the body)."""
        backend.flush_events(timeout=10)
        with self._lock:
            stopping, why = self._stop_requested, self._stop_why
        if stopping:
            backend.request_stop(why=why)  # asked while the session was being prepared
        return not backend.should_stop()

    def _on_record(self, backend: Backend, record) -> None:
        # The session restored or initialized the model: 'running' from here, with the
        # history (the listener before this one) already holding the step it starts from.
        if isinstance(record, events.SessionReady):
            with self._lock:
                if self._backend is backend and self._status == STARTING:
                    self._transition(RUNNING)

    def _newest_checkpoint(self) -> Optional[str]:
        """The checkpoint a new session will try first, or None."""
        if not self.logdir:
            return None
        try:
            return next(iter(checkpoint_paths(self.logdir, self.config.checkpoint_basename)),
                        None)
        except Exception:  # pylint: disable=broad-except  (the backend reports it when it restores)
            logger.debug("Could not list the checkpoints of %s.", self.logdir, exc_info=True)
            return None

    def _load_earlier_history(self) -> None:
        """Continues the plots of an earlier session from the logdir's event files, up to the
        step the newest checkpoint restores (later points were lost with that session)."""
        newest = self._newest_checkpoint()
        if newest is None:
            return
        step = checkpoint_step(newest)
        why = eventfiles.last_stop(self.logdir)
        if why:
            self.history.append_output(f"The last session on this logdir stopped: {why}.\n")
        try:
            # Up to the checkpoint's step: what the session after it recorded was lost with it
            # (the history still learns how far that session got, to say what was lost).
            self.history.load_event_files(self.logdir, upto_step=step)
        except Exception:  # pylint: disable=broad-except
            logger.warning("Could not read the earlier event files of %s; the plots start "
                           "empty.", self.logdir, exc_info=True)

    def _finish(self, error: Optional[BaseException]) -> None:
        """The end of every start: records the outcome and leaves the graph usable again."""
        backend = self._backend
        if backend is not None:
            error = clean_up(error, "closing the run's backend", backend.close)
        if error is not None:
            logger.debug("Run %r failed.", self.name, exc_info=error)
            self.history.set_failure(error)
        with self._lock:
            self._exception = error
            if error is not None:
                final = FAILED
            elif self._status == STOPPING:
                final = STOPPED
            elif backend is not None and backend.stopped_by_peer:
                # Another worker of a multi-worker run stopped it: stopped, not finished.
                self._stop_why = self._stop_why or backend.stopped_by_peer
                self._transition(STOPPING)
                final = STOPPED
            else:
                final = FINISHED
            self._transition(final)
        shutdown.release()  # the kernel's own ways to end, back once no run is live

    # --------------------------------------------------------------------------- steering

    def stop(self, wait: bool = True, timeout: Optional[float] = None,
             why: Optional[str] = None) -> bool:
        """Asks the run to stop at its next step boundary, where it writes a final checkpoint.

        The run is 'stopping' at once, and 'stopped' when its thread has ended. A body that
        checks ``sv.should_stop()`` ends its loop; one that does not is ended at its next step
        (``sess.run`` on the graph; ``sv.step()`` or fit's next batch when eager; ``--repeat``
        checks for you). Asking a run that is stopping already changes nothing but records
        ``why`` if none was given before.

        Args:
            wait: block until the run ended (or ``timeout``).
            timeout: with ``wait``, the most seconds to wait (None: no limit).
            why: what asked for the stop ("the kernel received SIGTERM"): the first one given
                is kept as ``stop_reason``, and, with a logdir, noted in its lock file until
                the run ends (a lock left with the note says that stop was cut short).

        Returns:
            True if the run has ended: with ``wait``, whether it ended within ``timeout``;
            without it, whether it had ended already (usually False).

        Raises:
            RunStateError: the run never started, or it ended already.

        Example::

            run = jupyter_supervisor.get_run("fit")
            if run.stop(timeout=60):
                print(run.status, run.global_step)   # stopped 1200
        """
        asked_at = self._step_now(self._backend)  # read before the lock: a session run
        with self._lock:
            if self._status in (STARTING, RUNNING, STOPPING) and self._stop_why is None:
                self._stop_why = why
            if self._status in (STARTING, RUNNING):
                self._stop_requested = True
                self._stop_requested_at = time.monotonic()
                backend = self._backend
                self._transition(STOPPING, step=asked_at)
            elif self._status == STOPPING:
                backend = None
            else:
                raise RunStateError(f"Run {self.name!r} is {self._status}: nothing to stop.")
        if why is not None and self.logdir is not None:
            # Cleared with the lock: a lock file still holding it says this stop was cut.
            note_stop(self.logdir, why, shutdown.cut_advice(why))
        if backend is not None:
            backend.request_stop(why=why)
        if not wait:
            return self._status in FINAL_STATUSES
        return self.wait(timeout)

    def _step_now(self, backend: Optional[Backend]) -> Optional[int]:
        """The step the training is at now (for the timeline: where a stop was asked), or None
        (the history's, the last one heard of). Not asked of a session on a remote master,
        which may hang when a task is gone: the stop must return at once."""
        if backend is None or self.config.master:
            return None
        try:
            return backend.read_step()
        except Exception:  # pylint: disable=broad-except  (the session is closing)
            logger.debug("Reading the step failed.", exc_info=True)
            return None

    def resume(self) -> None:
        """Starts the run again from its newest checkpoint, as ``start`` does, on the run's own
        graph; returns at once. Call it from the main thread (the Resume button's callback is
        the other caller).

        Raises:
            RunStateError: the run is live, or it has nothing to resume from (it never started,
                or it ran without a ``--logdir``).
            What ``start`` raises (another live run on the same logdir, a config the backend
                refuses...).
        """
        with self._lock:
            status = self._status
        if status in ACTIVE_STATUSES:
            raise RunStateError(f"Run {self.name!r} is {status}: nothing to resume.")
        if not self.can_resume:
            raise RunStateError(
                f"Run {self.name!r} has no --logdir, so nothing was saved to resume from. "
                "Re-run its cell to start afresh.")
        # The run's own graph: TensorFlow's default graph is per thread, and a Resume button's
        # callback may run on another thread than the cells (whose default graph it would miss).
        self.start(graph=self._graph)

    def save_now(self) -> Optional[str]:
        """Writes a checkpoint now (from another thread: the training thread writes it at its
        next step boundary) and returns once its files are written.

        Returns:
            The checkpoint's path; None when nothing was saved: nothing to save yet (an eager
            body that tracked nothing; a graph Supervisor without a Saver), or (``--on-nan
            rollback``) the model was not finite and the run rolls back instead.

        Raises:
            RunStateError: the run is not 'running', or it has no ``--logdir``.
            TimeoutError: an eager body reached no step boundary within ``--stop-grace-secs``.
            NonFiniteError: the model is not finite (``--on-nan stop``, the default): nothing
                was written, and the run stops.
            CheckpointWriteError: the files could not be written.
        """
        with self._lock:
            if self._status != RUNNING:
                raise RunStateError(f"Run {self.name!r} is {self._status}: a checkpoint is "
                                    "written only while it runs.")
            backend = self._backend
        if self.logdir is None:
            raise RunStateError(f"Run {self.name!r} has no --logdir: there is nowhere to save.")
        return backend.save_now()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the run ended, and its thread with it.

        Args:
            timeout: the most seconds to wait (None: no limit).

        Returns:
            True if the run ended ('stopped', 'finished' or 'failed') within ``timeout``.
        """
        with self._changed:
            ended = self._changed.wait_for(lambda: self._status in FINAL_STATUSES, timeout)
            thread = self._thread
        if ended and thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        return ended


class _StepWatcher:
    """While the body runs, tells the history the live step every WATCH_SECS (a thread that
    waits on an Event, so leaving the block ends it at once)."""

    def __init__(self, backend: Backend, history: RunHistory):
        self._backend = backend
        self._history = history
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="jupyter_supervisor-step-watcher")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()

    def _loop(self):
        while True:
            try:
                step = self._backend.read_step()
            except Exception:  # pylint: disable=broad-except  (the session is closing)
                logger.debug("Reading the step failed.", exc_info=True)
                step = None
            if step is not None:
                self._history.note_step(step)
            if self._done.wait(WATCH_SECS):
                return


# ---------------------------------------------------------------------------------- registry

class _Registry:
    """The runs of this kernel by name, in start order."""

    def __init__(self):
        # Re-entrant: a signal handler may ask for the live runs while the main thread, which
        # it interrupted, holds it.
        self._lock = threading.RLock()
        self._runs: Dict[str, TrainingRun] = {}

    def check_free(self, run: TrainingRun, graph) -> None:
        """Raises RunConflictError when a live run other than ``run`` uses its name, logdir or
        graph."""
        with self._lock:
            others = [r for r in self._runs.values() if r is not run and r.is_live]
        for other in others:
            if other.status == STOPPING:
                how = (f"It is writing its final checkpoint: `%supervise wait {other.name}` "
                       "waits for it.")
            else:
                how = (f"Stop it first with `%supervise stop {other.name}` (or "
                       f"jupyter_supervisor.get_run({other.name!r}).stop()).")
            # The logdir first: another --name would not help there.
            if run.logdir and other.logdir and \
                    _same_dir_key(run.logdir) == _same_dir_key(other.logdir):
                raise LogdirLockedError(
                    f"Run {other.name!r} is {other.status} on logdir {other.logdir!r}: one run "
                    f"writes to a logdir at a time. {how}")
            if other.name == run.name:
                raise RunConflictError(
                    f"A run named {run.name!r} is {other.status}. {how} Or pass another --name.")
            if graph is not None and other._graph is graph:  # pylint: disable=protected-access
                raise RunConflictError(
                    f"Run {other.name!r} is {other.status} on this graph (it is finalized while "
                    f"a run trains it). {how} Or build the new model in a fresh graph "
                    "(tf.compat.v1.reset_default_graph()).")

    def add(self, run: TrainingRun) -> None:
        """Registers ``run`` under its name (replacing an ended run of that name)."""
        with self._lock:
            self._runs.pop(run.name, None)
            self._runs[run.name] = run
        shutdown.guard(_stop_for_kernel_end, _any_live)

    def get(self, name: Optional[str]) -> TrainingRun:
        """The run named ``name``; without a name, the only run, or else the only live one."""
        with self._lock:
            runs = list(self._runs.values())
            found = self._runs.get(name) if name is not None else None
        if name is None:
            live = [r for r in runs if r.is_live]
            if len(runs) == 1 or len(live) == 1:
                return runs[0] if len(runs) == 1 else live[0]
            if not runs:
                raise KeyError("There is no run yet: start one with %%supervise.")
            raise KeyError("There are several runs: name one of "
                           + ", ".join(repr(r.name) for r in runs) + ".")
        if found is None:
            known = ", ".join(repr(r.name) for r in runs) or "none yet"
            raise KeyError(f"There is no run named {name!r} (runs: {known}).")
        return found

    def all(self) -> List[TrainingRun]:
        with self._lock:
            return list(self._runs.values())


_REGISTRY = _Registry()


def get_run(name: Optional[str] = None) -> TrainingRun:
    """The run of this kernel named ``name``.

    Args:
        name: the run's name (``--name``, by default the logdir's last component). None: the
            only run of the kernel, or else the only live one.

    Returns:
        The ``TrainingRun``.

    Raises:
        KeyError: no run has that name; without a name, there is no run yet, or there are
            several and not exactly one is live.
    """
    return _REGISTRY.get(name)


def runs() -> List[TrainingRun]:
    """Every run of this kernel, live or ended, one per name.

    Returns:
        A new list of the ``TrainingRun``s, in the order they were last started: a resume, or
        a new run under an ended run's name, moves that name to the end.
    """
    return _REGISTRY.all()


def stop_all(timeout: Optional[float] = None, why: Optional[str] = None) -> List[TrainingRun]:
    """Stops every live run (each writes a final checkpoint; ``why`` is its ``stop_reason``)
    and waits for their threads; returns the runs that had not ended within ``timeout``
    seconds."""
    live = [r for r in _REGISTRY.all() if r.is_live]
    for run in live:
        try:
            run.stop(wait=False, why=why)
        except RunStateError:
            pass  # it ended meanwhile
    deadline = None if timeout is None else time.monotonic() + timeout
    late = []
    for run in live:
        left = None if deadline is None else max(deadline - time.monotonic(), 0)
        if not run.wait(left):
            late.append(run)
    return late


def _any_live() -> bool:
    return any(r.is_live for r in _REGISTRY.all())


def _stop_for_kernel_end(why: str, timeout: float) -> List[TrainingRun]:
    late = stop_all(timeout=timeout, why=why)
    for run in late:
        logger.warning("Run %r did not stop within %g s (%s); its newest checkpoint is the "
                       "last complete one.", run.name, timeout, why)
    return late
