"""TrainingRun: one supervised run of one notebook cell, in a background thread.

A run builds a ``Supervisor`` around the default graph in the calling (main) thread, then
restores or initializes the model and executes the cell body in a thread of its own, inside
``managed_session()``, with ``sv`` and ``sess`` bound in the notebook's namespace. The cell
returns at once; the run is watched and steered through this object (``stop``, ``resume``,
``save_now``, ``wait``) and reported to a ``RunHistory`` that the panel displays.

Its life is a small state machine, kept in ``_TRANSITIONS`` and changed only by ``_transition``
under one lock:

    starting -> running -> stopping -> stopped
        |          |          +------> failed
        |          +--> finished | failed
        +--> stopping | failed
    stopped | finished | failed -> starting     (resume)

'stopped' means stopped on request; 'finished' means the body returned, ``max_steps`` was
reached or the input ran out (OutOfRangeError); 'failed' means an exception (in the body, in a
service, in restoring).

The registry of runs (``get_run``, ``runs``) refuses a second live run on the same name, logdir
or graph.
"""
import atexit
import logging
import os
import re
import sysconfig
import threading
import time
import traceback
import types
from typing import Callable, Dict, List, Optional, Tuple

import tensorflow as tf
from tensorflow.python.client import session as tf_session

from .. import events, finite
from .._validate import invalid
from ..backend import RunConfig
from ..checkpoints import checkpoint_paths
from ..graph import cluster
from ..graph.supervisor import (CheckpointMismatchError, LogdirLockedError, Supervisor,
                                WaitCancelledError, checkpoint_misfit, describe_error)
from ..view.history import RunHistory
from . import output

logger = logging.getLogger("jupyter_supervisor")

_v1 = tf.compat.v1

STARTING, RUNNING, STOPPING = "starting", "running", "stopping"
STOPPED, FINISHED, FAILED = "stopped", "finished", "failed"
TERMINAL = frozenset((STOPPED, FINISHED, FAILED))
LIVE = frozenset((STARTING, RUNNING, STOPPING))

# Every legal change of state; None is a run that never started.
_TRANSITIONS = {
    None: {STARTING},
    STARTING: {RUNNING, STOPPING, FAILED},
    RUNNING: {STOPPING, FINISHED, FAILED},
    STOPPING: {STOPPED, FAILED},
    STOPPED: {STARTING},
    FINISHED: {STARTING},
    FAILED: {STARTING},
}

# How often the step watcher reads the global step (the live step count, and --max-steps).
WATCH_SECS = 0.25


class IllegalTransitionError(RuntimeError):
    """A run was asked to change state in a way its state machine does not allow."""


class RunConflictError(RuntimeError):
    """A live run already uses the name, logdir or graph a new run asks for."""


class RunStateError(RuntimeError):
    """The run's state does not allow what was asked (e.g. saving a run that ended)."""


class GraphModeError(RuntimeError):
    """Eager execution is on; a Supervisor needs graph mode."""


def _same_dir_key(logdir: str) -> str:
    return logdir if "://" in logdir else os.path.realpath(logdir)


# ------------------------------------------------------------------------------- the cell body

class _BodyLocals(dict):
    """The local namespace a cell body executes in.

    It holds only the run's own ``sv`` and ``sess``, so that a body keeps using its own
    Supervisor even when a later run binds those names in the notebook; every assignment of the
    body goes to the notebook namespace, as in a normal cell. Names it lacks fall through to the
    notebook namespace (exec's globals) at C speed.
    """

    __slots__ = ("_notebook",)

    def __init__(self, notebook: dict, own: dict):
        super().__init__(own)
        self._notebook = notebook

    def __setitem__(self, key, value):
        self._notebook[key] = value
        if dict.__contains__(self, key):
            dict.__setitem__(self, key, value)

    def __delitem__(self, key):
        found = dict.__contains__(self, key)
        if found:
            dict.__delitem__(self, key)
        if key in self._notebook:
            del self._notebook[key]
        elif not found:
            raise KeyError(key)


class _StepLimitedSession(tf_session.SessionInterface):
    """The managed session, as the body sees it under ``max_steps`` or ``on_nan="rollback"``:
    requests the stop exactly when a ``run`` brought the global step to the limit, and makes a
    pending rollback (``step_boundary``) before a ``run``, between two steps of the body.

    Reading the step costs a session call, so it is done after each ``run`` only once the step
    watcher saw the limit come near (``observe``); far from it, ``run`` adds one attribute test.
    """

    def __init__(self, sess, read_step: Callable[[], Optional[int]], limit: Optional[int],
                 on_reached: Callable[[int], None],
                 step_boundary: Optional[Callable[[], object]] = None):
        self._sess = sess
        self._read_step = read_step
        self._limit = limit
        self._on_reached = on_reached
        self._step_boundary = step_boundary
        self._precise = False
        self._last = None        # (step, time) of the previous observe()

    @property
    def graph(self):
        return self._sess.graph

    @property
    def sess_str(self):
        return self._sess.sess_str

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if self._step_boundary is not None:
            self._step_boundary()
        result = self._sess.run(fetches, feed_dict=feed_dict, options=options,
                                run_metadata=run_metadata)
        if self._precise:
            step = self._read_step()
            if step is not None and step >= self._limit:
                self._on_reached(step)
        return result

    def partial_run_setup(self, fetches, feeds=None):
        return self._sess.partial_run_setup(fetches, feeds)

    def partial_run(self, handle, fetches, feed_dict=None):
        return self._sess.partial_run(handle, fetches, feed_dict)

    def observe(self, step: int, now: float) -> None:
        """The watcher's periodic reading: stops at the limit, checks exactly near it."""
        if self._limit is None:
            return
        if step >= self._limit:
            self._on_reached(step)
            return
        if self._last is None:
            self._precise = True  # no rate known yet: exact until there is one
            self._last = (step, now)
            return
        last_step, last_time = self._last
        if now - last_time < WATCH_SECS / 2:
            return  # too soon after the last reading for a rate
        rate = max(step - last_step, 0) / (now - last_time)
        # Four watcher periods of margin: a burst of speed must not carry it past the limit.
        self._precise = self._limit - step <= rate * WATCH_SECS * 4 + 1
        self._last = (step, now)

    def __getattr__(self, name):
        return getattr(self._sess, name)

    def __repr__(self):
        if self._limit is None:
            return f"<managed session, rolls back when not finite: {self._sess!r}>"
        return f"<managed session, stops at step {self._limit}: {self._sess!r}>"


def _default_compile(source: str, name: str):
    return compile(source, f"<supervise {name}>", "exec", dont_inherit=True)


def _default_format(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


# --------------------------------------------------------------------------------- the run

class TrainingRun:
    """One supervised run of a cell body; see the module docstring.

    Arguments:
      config: the RunConfig.
      body: the cell's source (the training loop, or with ``config.repeat`` one step).
      namespace: the notebook namespace the body executes in; ``sv`` and ``sess`` are bound
        there.
      compile_source: ``(source, run_name) -> code``; IPython's compiler makes tracebacks show
        the cell's own lines. A SyntaxError fails the run.
      format_exception: ``exc -> str`` for the error shown to the user; it gets the exception
        with its traceback trimmed to start at the body.
    """

    def __init__(self, config: RunConfig, body: str, namespace: dict, *,
                 compile_source: Callable[[str, str], object] = _default_compile,
                 format_exception: Callable[[BaseException], str] = _default_format):
        if not isinstance(config, RunConfig):
            raise TypeError(invalid("config", config, "a RunConfig"))
        self.config = config
        self.body = body
        self.history = RunHistory()
        self._namespace = namespace
        self._compile_source = compile_source
        self._format_exception = format_exception

        # _lock guards the fields below it; _changed is notified on every transition.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._status: Optional[str] = None
        self._exception: Optional[BaseException] = None
        self._error_text: Optional[str] = None
        self._stop_requested = False     # by stop(): the run ends 'stopped'
        self._sv: Optional[Supervisor] = None
        self._graph = None
        self._thread: Optional[threading.Thread] = None
        self._code = None                # the compiled body (or its SyntaxError)
        # Last known global step; written by the run's threads, read anywhere (an int is atomic).
        self._global_step: Optional[int] = None
        self._restored_from: Optional[str] = None

    # ------------------------------------------------------------------------- what it shows

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
        """The last known global step (None before the session is ready or without one)."""
        return self._global_step

    @property
    def exception(self) -> Optional[BaseException]:
        """What failed the run, or None."""
        return self._exception

    @property
    def error_text(self) -> Optional[str]:
        """The formatted traceback of a failed run (pointing at the cell's lines), or None."""
        return self._error_text

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
    def master(self) -> str:
        """The TensorFlow master ('' for an in-process session)."""
        return self.config.master

    @property
    def restored_from(self) -> Optional[str]:
        """The checkpoint the current session was restored from, or None."""
        return self._restored_from

    @property
    def supervisor(self) -> Optional[Supervisor]:
        """The Supervisor of the current (or last) session."""
        return self._sv

    @property
    def can_stop(self) -> bool:
        """True while a stop can be requested."""
        return self._status in (STARTING, RUNNING)

    @property
    def can_resume(self) -> bool:
        """True when the run ended and has something to resume from."""
        return self._status in TERMINAL and (self.logdir is not None or self.role == "worker")

    @property
    def can_save(self) -> bool:
        """True while a checkpoint can be written now."""
        return self._status == RUNNING and self.logdir is not None

    @property
    def is_live(self) -> bool:
        """True from start until the run's thread has finished its work."""
        return self._status in LIVE

    def __repr__(self):
        step = "" if self._global_step is None else f", step {self._global_step}"
        return f"<TrainingRun {self.name!r}: {self._status}{step}>"

    # ------------------------------------------------------------------------ state machine

    def _transition(self, new: str) -> None:
        with self._lock:
            old = self._status
            if new not in _TRANSITIONS[old]:
                raise IllegalTransitionError(
                    f"Run {self.name!r} cannot go from {old or 'new'!r} to {new!r}.")
            self._status = new
            self.history.set_status(new)
            self._changed.notify_all()

    # ---------------------------------------------------------------------------- starting

    def start(self, graph=None) -> None:
        """Starts the run on ``graph`` (default: the default graph of the calling thread).

        Checks and builds everything that touches the graph here (so errors are raised to the
        caller, early), then restores or initializes and runs the body in a background thread.
        Also used by ``resume()``, with the run's own graph.
        """
        if graph is None and tf.executing_eagerly():
            raise GraphModeError(
                "%%supervise drives a TensorFlow graph, but eager execution is on (TensorFlow "
                "2's default). Call tf.compat.v1.disable_eager_execution() at the top of the "
                "notebook, before building the model, then rebuild the model.")
        with self._lock:
            if self._status not in (None, *TERMINAL):
                raise RunStateError(f"Run {self.name!r} is {self._status}; it cannot start again "
                                   "until it ended.")
        if graph is None:
            graph = _v1.get_default_graph()
        _REGISTRY.check_free(self, graph)
        if not self.config.is_chief and not self.config.master:
            raise ValueError(
                "This task is not the chief (--task-index above 0, or --no-chief), and it has "
                "no cluster to join: a worker waits for its chief's model, which an in-process "
                "session never gets. Give the cluster (--cluster CLUSTER --job worker, or "
                "--master grpc://HOST:PORT), or leave out --task-index/--no-chief to train "
                "here.")
        if not graph.get_operations():
            raise ValueError(
                "%%supervise trains the default graph, and it is empty. Run the cells that "
                "build the model first (again after a kernel restart or "
                "tf.compat.v1.reset_default_graph()).")
        if _check_global_step(graph) is None and self.config.max_steps is not None:
            raise ValueError(
                "--max-steps needs a global step, and the graph has none. Create it before "
                "the model: global_step = tf.compat.v1.train.get_or_create_global_step(), and "
                "pass it to the optimizer (minimize(loss, global_step=global_step)).")
        if self.logdir:
            _check_checkpoint_matches(self.logdir, self.config.checkpoint_basename, graph)
        if self._code is None:
            # Once, from the cell that started the run: tracebacks name that cell, also after
            # a resume from a later one.
            try:
                self._code = self._compile_source(self.body, self.name)
            except SyntaxError as e:
                self._code = e
        code = self._code

        self._transition(STARTING)
        with self._lock:
            self._stop_requested = False
            self._exception = self._error_text = None
            self._restored_from = None
            self._graph = graph
        self.history.set_error("")
        _REGISTRY.add(self)
        if isinstance(code, SyntaxError):
            self._finish(code)
            return
        try:
            sv = self._build_supervisor(graph)
        except BaseException as e:
            self._finish(e, brief=True)
            raise
        self._sv = sv
        self._namespace["sv"] = sv
        self._thread = threading.Thread(target=self._train, args=(sv, code),
                                        name=f"jupyter_supervisor-run-{self.name}", daemon=True)
        self._thread.start()

    def _build_supervisor(self, graph) -> Supervisor:
        """Builds fresh init/ready/saver/summary ops for the graph as it is now, and the
        Supervisor. Ops kept in the graph's collections by an earlier run would miss the
        variables added since, so none is taken from there."""
        cfg = self.config
        if graph.finalized:
            graph._unsafe_unfinalize()  # pylint: disable=protected-access  (no live run has it)
        with graph.as_default():
            saveables = _v1.global_variables() + _v1.get_collection(
                _v1.GraphKeys.SAVEABLE_OBJECTS)
            saver = (_v1.train.Saver(max_to_keep=cfg.keep)
                     if saveables and self.logdir else None)
            sv = Supervisor(
                graph=graph,
                ready_op=_v1.report_uninitialized_variables(),
                is_chief=cfg.is_chief,
                init_op=_v1.global_variables_initializer(),
                local_init_op=tf.group(_v1.local_variables_initializer(),
                                       _v1.tables_initializer()),
                logdir=cfg.logdir,
                summary_op=_v1.summary.merge_all(),
                saver=saver,
                save_summaries_secs=cfg.save_summaries_secs,
                save_model_secs=cfg.save_model_secs,
                recovery_wait_secs=cfg.recovery_wait_secs,
                stop_grace_secs=cfg.stop_grace_secs,
                checkpoint_basename=cfg.checkpoint_basename,
                init_fn=cfg.init_fn,
                save_on_stop=True,
                on_nan=cfg.on_nan,
                max_rollbacks=cfg.max_rollbacks)
        sv.add_listener(self.history.on_event)
        sv.add_listener(self._on_event)
        return sv

    def _on_event(self, event) -> None:
        if isinstance(event, events.SessionReady):
            self._restored_from = event.restored_from
        if isinstance(event, (events.SessionReady, events.Stopped)) and event.step is not None:
            self._global_step = event.step
        if isinstance(event, events.RolledBack) and event.restored_step is not None:
            self._global_step = event.restored_step

    # ---------------------------------------------------------------------- the run thread

    def _train(self, sv: Supervisor, code) -> None:
        error = None
        try:
            with output.routed_to(self.history.append_output), \
                    output.threads_routed_to(sv.owns_thread, self.history.append_output):
                try:
                    self._load_earlier_history()
                    services = bool(self.logdir) or not self.config.is_chief
                    # Graph mode is per thread, and the notebook may make another graph the
                    # default meanwhile: the body runs with the run's graph as its default.
                    with self._graph.as_default(), sv.managed_session(
                            self.config.master, config=self.config.session_config,
                            start_standard_services=services) as sess:
                        if not services:
                            sv.start_queue_runners(sess)
                        self._run_session(sv, sess, code)
                except WaitCancelledError:
                    pass  # stopped while waiting for the chief: a clean stop
                except BaseException as e:  # pylint: disable=broad-except
                    error = _with_hint(e)
                finally:
                    # The listeners (history, panel) see the final checkpoint and the Stopped
                    # record before wait() returns.
                    sv.flush_events(timeout=10)
        finally:
            self._finish(error)

    def _load_earlier_history(self) -> None:
        """Continues the plots of an earlier session from the logdir's event files, up to the
        step the newest checkpoint restores (later points were lost with that session)."""
        if not self.logdir:
            return
        newest = next(iter(checkpoint_paths(self.logdir, self.config.checkpoint_basename)), None)
        if newest is None:
            return
        match = re.search(r"-(\d+)$", newest)
        step = int(match.group(1)) if match else None
        try:
            # The new session records the restored step again, and TensorBoard drops the old
            # session's points from that step on: keep only those before it.
            self.history.load_event_files(
                self.logdir, upto_step=None if step is None else step - 1)
        except Exception:  # pylint: disable=broad-except
            logger.warning("Could not read the earlier event files of %s; the plots start "
                           "empty.", self.logdir, exc_info=True)

    def _run_session(self, sv: Supervisor, sess, code) -> None:
        step = sv.read_global_step(sess)
        if step is not None:
            self._global_step = step
        bound = sess
        limited = None
        rollback = self.config.on_nan == finite.ROLLBACK
        if self.config.max_steps is not None or rollback:
            limited = _StepLimitedSession(sess, lambda: sv.read_global_step(sess),
                                          self.config.max_steps,
                                          lambda step: self._reach_max_steps(sv, step),
                                          (lambda: sv.step_boundary(sess)) if rollback else None)
            bound = limited
        self._namespace["sess"] = bound
        with self._lock:
            if self._status == STARTING:
                self._transition(RUNNING)
            stopping = self._stop_requested
        if stopping:
            sv.request_stop()
            return
        if sv.global_step is not None:
            sv.loop(WATCH_SECS, self._watch_step, args=(sv, sess, limited))
        if limited is not None:
            limited.observe(step, time.monotonic())
            if sv.should_stop():
                return  # restored at or past max_steps: nothing to do
        local_ns = _BodyLocals(self._namespace, {"sv": sv, "sess": bound})
        if not self.config.repeat:
            exec(code, self._namespace, local_ns)  # pylint: disable=exec-used  (the cell body)
            return
        while not sv.should_stop():
            exec(code, self._namespace, local_ns)  # pylint: disable=exec-used  (the cell body)

    def _watch_step(self, sv: Supervisor, sess, limited: Optional[_StepLimitedSession]) -> None:
        step = sv.read_global_step(sess)
        self._global_step = step
        self.history.note_step(step)
        if limited is not None:
            limited.observe(step, time.monotonic())

    def _reach_max_steps(self, sv: Supervisor, step: int) -> None:
        self._global_step = step
        sv.request_stop()  # a clean stop: the run ends "finished"

    def _finish(self, error: Optional[BaseException], brief: bool = False) -> None:
        """The end of every start: records the outcome and makes the graph usable again.
        ``brief``: the error was raised to the caller already; its message is enough."""
        graph = self._graph
        if graph is not None and graph.finalized:
            graph._unsafe_unfinalize()  # pylint: disable=protected-access
        text = None
        if error is not None:
            text = f"{type(error).__name__}: {error}\n" if brief else self._format(error)
            self.history.set_error(text)
        with self._lock:
            self._exception = error
            self._error_text = text
            if error is not None:
                final = FAILED
            elif self._status == STOPPING:
                final = STOPPED
            else:
                final = FINISHED
            self._transition(final)

    def _format(self, error: BaseException) -> str:
        """The error as the user sees it: its traceback starts at the cell body's own frame
        (our machinery above it is noise); a SyntaxError of the body has no frames at all."""
        if isinstance(error, SyntaxError) and error is self._code:
            error = error.with_traceback(None)
        else:
            start = error.__traceback__
            while start is not None and start.tb_frame.f_code is not self._code:
                start = start.tb_next
            if start is None:  # raised outside the body (an --init-fn): from the user's code
                start = error.__traceback__
                while start is not None and not _is_user_code(start.tb_frame.f_code.co_filename):
                    start = start.tb_next
            if start is None:  # raised by ours or a library's code (a restore, a service)
                logger.debug("Run %r failed.", self.name, exc_info=error)
                return f"{type(error).__name__}: {error}\n"
            error = error.with_traceback(_without_our_frames(start))
        try:
            return self._format_exception(error)
        except Exception:  # pylint: disable=broad-except
            return _default_format(error)

    # --------------------------------------------------------------------------- steering

    def stop(self, wait: bool = True, timeout: Optional[float] = None) -> bool:
        """Asks the run to stop after the current step; it writes a final checkpoint.

        The body must check ``sv.should_stop()`` (``--repeat`` does it for you). With ``wait``,
        blocks until the run ended (or ``timeout``) and returns True if it did. Raises
        RunStateError for a run that already ended.
        """
        with self._lock:
            if self._status in (STARTING, RUNNING):
                self._stop_requested = True
                self._transition(STOPPING)
                sv = self._sv
            elif self._status == STOPPING:
                sv = None
            else:
                raise RunStateError(f"Run {self.name!r} is {self._status}: nothing to stop.")
        if sv is not None:
            sv.request_stop()
        if not wait:
            return self._status in TERMINAL
        return self.wait(timeout)

    def resume(self) -> None:
        """Starts the run again from its newest checkpoint (from the main thread)."""
        with self._lock:
            status = self._status
        if status in LIVE:
            raise RunStateError(f"Run {self.name!r} is {status}: nothing to resume.")
        if not self.can_resume:
            raise RunStateError(
                f"Run {self.name!r} has no --logdir, so nothing was saved to resume from. "
                "Re-run its cell to start afresh.")
        # The run's own graph: TensorFlow's default graph is per thread, and a Resume button's
        # callback may run on another thread than the cells (whose default graph it would miss).
        self.start(graph=self._graph)

    def save_now(self) -> Optional[str]:
        """Writes a checkpoint now and returns its path (None when there is nothing to save)."""
        with self._lock:
            if self._status != RUNNING:
                raise RunStateError(f"Run {self.name!r} is {self._status}: a checkpoint is "
                                    "written only while it runs.")
            sv = self._sv
        if self.logdir is None:
            raise RunStateError(f"Run {self.name!r} has no --logdir: there is nowhere to save.")
        path = sv.save_checkpoint()
        sv.flush_events(timeout=10)
        return path

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the run ended (or ``timeout`` seconds); True if it ended."""
        with self._changed:
            ended = self._changed.wait_for(lambda: self._status in TERMINAL, timeout)
            thread = self._thread
        if ended and thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        return ended


# ------------------------------------------------------------------------------- checkpoints

def _check_checkpoint_matches(logdir: str, basename: str, graph) -> None:
    """Raises CheckpointMismatchError when the newest checkpoint lacks variables of the graph or
    holds them with another shape (an unreadable one passes: the Supervisor falls back to an
    older one, or says why it cannot)."""
    newest = next(iter(checkpoint_paths(logdir, basename)), None)
    problem = None if newest is None else checkpoint_misfit(newest, graph)
    if problem is None:
        return
    raise CheckpointMismatchError(
        f"The newest checkpoint in {logdir!r} ({newest}) does not fit the graph: {problem}. "
        "The model changed since it was saved. Train it in a new --logdir; to warm-start from "
        "this checkpoint, also pass --init-fn NAME with a function that restores the old "
        "variables, e.g. "
        f"`def warm(sess): tf.compat.v1.train.Saver(old_vars).restore(sess, {newest!r})`.")


def _check_global_step(graph):
    """The graph's global step (by collection or by name), or None; raises ValueError for one
    that cannot count steps (TensorFlow's Supervisor would ignore it and count none)."""
    steps = graph.get_collection(_v1.GraphKeys.GLOBAL_STEP) or [
        v for v in graph.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES)
        if v.op.name == "global_step"]
    if not steps:
        try:
            steps = [graph.get_tensor_by_name("global_step:0")]
        except KeyError:
            return None
    step = steps[0]
    shape = step.shape
    if step.dtype.base_dtype not in (tf.int32, tf.int64) or (
            shape.rank is not None and shape.as_list() not in ([], [1])):
        raise ValueError(
            f"The global step {step.name!r} is a {step.dtype.base_dtype.name} of shape "
            f"{shape.as_list() if shape.rank is not None else 'unknown'}: it must be an int64 "
            "(or int32) scalar that counts the training steps. Create it with global_step = "
            "tf.compat.v1.train.get_or_create_global_step() and pass it to the optimizer "
            "(minimize(loss, global_step=global_step)).")
    return step


# Where library code lives (the standard library, site-packages, this package): a traceback
# shown to the user starts at the first frame outside them (a notebook cell, the user's code).
_LIBRARY_DIRS = tuple(sorted({
    os.path.join(os.path.abspath(path), "")
    for path in [os.path.dirname(os.path.dirname(__file__))] + [
        sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    if path}))


def _is_user_code(filename: str) -> bool:
    return not os.path.abspath(filename).startswith(_LIBRARY_DIRS)


_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


def _without_our_frames(tb):
    """The traceback from ``tb`` down to the last frame before the first of this package's own
    (e.g. ``sv.save_checkpoint()`` called by the body ends at the body's line: the error's
    message says what happened). New traceback objects: the original chain is not changed."""
    kept = []
    while tb is not None and not os.path.abspath(
            tb.tb_frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        kept.append(tb)
        tb = tb.tb_next
    if tb is None or not kept:
        return kept[0] if kept else tb
    chain = None
    for frame in reversed(kept):
        chain = types.TracebackType(chain, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return chain


def _with_hint(error: BaseException) -> BaseException:
    """``error``, or for an op created in the body, the same error saying what to do."""
    finalized = str(error).startswith("Graph is finalized")
    # Exactly RuntimeError, as TensorFlow raises it: a subclass is someone else's error.
    if type(error) is RuntimeError and finalized:  # pylint: disable=unidiomatic-typecheck
        hinted = RuntimeError(
            f"{error} %%supervise finalizes the graph while the run trains: create every op "
            "(summaries, assign ops, tf.constant...) in a cell before the %%supervise cell; "
            "the body only runs them with sess.run(...).")
        return hinted.with_traceback(error.__traceback__)
    return error


# ---------------------------------------------------------------------------------- registry

class _Registry:
    """The runs of this kernel by name, in start order."""

    def __init__(self):
        self._lock = threading.Lock()
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
            if other._graph is graph:  # pylint: disable=protected-access
                raise RunConflictError(
                    f"Run {other.name!r} is {other.status} on this graph (it is finalized while "
                    f"a run trains it). {how} Or build the new model in a fresh graph "
                    "(tf.compat.v1.reset_default_graph()).")

    def add(self, run: TrainingRun) -> None:
        """Registers ``run`` under its name (replacing an ended run of that name)."""
        with self._lock:
            self._runs.pop(run.name, None)
            self._runs[run.name] = run
        _register_atexit()

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
_atexit_registered = threading.Event()


def get_run(name: Optional[str] = None) -> TrainingRun:
    """The run named ``name``; without a name, the only run (or the only live one). Raises
    KeyError otherwise."""
    return _REGISTRY.get(name)


def runs() -> List[TrainingRun]:
    """Every run of this kernel, in the order they were first started."""
    return _REGISTRY.all()


def stop_all(timeout: Optional[float] = None) -> List[TrainingRun]:
    """Stops every live run (each writes a final checkpoint) and waits for their threads;
    returns the runs that had not ended within ``timeout`` seconds."""
    live = [r for r in _REGISTRY.all() if r.is_live]
    for run in live:
        try:
            run.stop(wait=False)
        except RunStateError:
            pass  # it ended meanwhile
    deadline = None if timeout is None else time.monotonic() + timeout
    late = []
    for run in live:
        left = None if deadline is None else max(deadline - time.monotonic(), 0)
        if not run.wait(left):
            late.append(run)
    return late


# ----------------------------------------------------------------------------------- servers

_servers_lock = threading.Lock()
# (job, task_index) -> (the cluster as ClusterSpec.as_dict(), its running server)
_SERVERS: Dict[Tuple[str, int], Tuple[dict, tf.distribute.Server]] = {}


def task_server(cluster_def, job: str, task_index: int) -> tf.distribute.Server:
    """This kernel's ``tf.distribute.Server`` for /job:<job>/task:<task_index> of
    ``cluster_def``: started by the first call, the same server on every later one.

    A server holds its port until its process ends, so re-running a cell must reuse it. Raises
    ValueError for a task the cluster lacks, RuntimeError when the port is taken or this kernel
    already serves the task for a different cluster.
    """
    spec = cluster.cluster_spec(cluster_def)
    wanted = spec.as_dict()
    with _servers_lock:
        known = _SERVERS.get((job, task_index))
        if known is not None:
            served, server = known
            if served != wanted:
                raise RuntimeError(
                    f"This kernel already serves /job:{job}/task:{task_index} of another "
                    f"cluster ({served}), not of {wanted}. A TensorFlow server lives until its "
                    "process ends: restart the kernel to serve another cluster.")
            return server
        server = cluster.start_server(spec, job, task_index)
        _SERVERS[(job, task_index)] = (wanted, server)
        return server


def _register_atexit() -> None:
    if not _atexit_registered.is_set():
        _atexit_registered.set()
        atexit.register(_stop_at_exit)


def _stop_at_exit() -> None:
    # A kernel shutdown or restart: save what the live runs learned since their last checkpoint.
    for run in stop_all(timeout=20):
        logger.warning("Run %r did not stop in time at exit; its newest checkpoint is the last "
                       "periodic one.", run.name)
