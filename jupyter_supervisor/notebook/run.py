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

The registry of runs (``registry.py``: ``get_run``, ``runs``) refuses a second live run on the same name, logdir
or graph.
"""
import functools
import logging
import threading
import time
from typing import Callable, List, Optional

import tensorflow as tf

from .. import capabilities, events, stops, storage
from .._validate import invalid
from ..backend import Backend, RunConflictError, clean_up
from ..config import RunConfig
from ..checkpoints import checkpoint_paths
from ..eager.eager_supervisor import EagerSupervisor
from ..graph.graph_backend import GraphBackend
from ..checkpoints import CheckpointMismatchError, describe_error
from ..lockfile import LogdirLockedError, note_stop
from ..names import (ACTIVE_STATUSES, FAILED, FINAL_STATUSES, FINISHED, RUNNING, STARTING,
                     STOPPED, STOPPING, checkpoint_step)
from ..view import eventfiles
from ..view.history import RunHistory
from . import routing, shutdown
from .body import Body, default_compile, default_format, unchanged
from .registry import REGISTRY, RunStateError, get_run, runs, stop_all

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
        # The session's; its stop is recorded there (stop_record), and read from there.
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
        "the kernel was restarted", "a stop on worker 1"); None otherwise. Also the msg of the
        event file's SessionLog.STOP record and the ``why`` of the Stopped event."""
        record = self.stop_record
        return None if record is None else record.why

    @property
    def stop_record(self) -> Optional[stops.StopRecord]:
        """The current (or last) session's stop: who asked, why, at which step and when
        (``stops.StopRecord``); None when none was asked."""
        backend = self._backend
        return None if backend is None else backend.stop_record

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
        record = self.stop_record
        if self._status != STOPPING or record is None:
            return 0.0
        return time.monotonic() - record.at

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
        REGISTRY.check_free(self, graph)
        backend = EagerSupervisor(self.config) if eager else GraphBackend(self.config, graph)
        first = self._status is None
        if first:
            self._body.pin(graph)  # as the names are when the cell executes, also on resume
            # Once per run (a resume keeps them): what this TensorFlow and Keras cannot keep,
            # and a logdir on a disk that vanishes with the runtime.
            self._version_notes = (capabilities.start_notes(capabilities.EAGER if eager
                                                            else capabilities.GRAPH)
                                   + storage.start_notes(self.logdir))

        with self._lock:  # a stop() from now on asks this session's backend
            self._exception = None
            self._backend = backend
            self._graph = graph
            self._transition(STARTING)
        self.history.set_restoring(self._newest_checkpoint())
        self.history.set_error("")
        REGISTRY.add(self)
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
        """The session is open: True if the body should run (no stop came meanwhile: the
        backend holds one asked while it prepared the session). A graph session is ready here:
        its SessionReady record, delivered before the body runs, makes the run 'running' (an
        eager one does that later, from the body)."""
        backend.flush_events(timeout=10)
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
                # Another worker of a multi-worker run stopped it: stopped, not finished (its
                # stop_reason is the peer's, in the backend's record).
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
            asking = self._status in (STARTING, RUNNING)
            if asking:
                self._transition(STOPPING, step=asked_at)
            elif self._status != STOPPING:
                raise RunStateError(f"Run {self.name!r} is {self._status}: nothing to stop.")
            backend = self._backend
        if why is not None and self.logdir is not None:
            # Cleared with the lock: a lock file still holding it says this stop was cut.
            note_stop(self.logdir, why, shutdown.cut_advice(why))
        if asking or why is not None:
            # The stop's one record is the session's; asked again while stopping, it keeps the
            # first ask and takes this why if none came before.
            backend.request_stop(why=why, by=stops.RUN, step=asked_at)
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
