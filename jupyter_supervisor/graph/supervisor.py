"""Supervisor: a maintained, observable implementation of TensorFlow's training Supervisor.

Code written for ``tf.compat.v1.train.Supervisor`` runs unchanged with ``Supervisor`` (same
constructor keywords and defaults, properties and methods, graph mode). Beyond it:

* a clean stop writes a final checkpoint, so stopping loses no work (``save_on_stop``);
* with ``complete_curves`` (what ``%%supervise`` uses), every session's end writes a last
  summary and step rate, whatever ended it, so that its last step is on the curves (a session
  shorter than ``save_summaries_secs`` included), one summary per step; a session's
  SessionLog.START is at the step after the restored one (``events.START_AFTER``), so that
  TensorBoard keeps the last values the session before recorded. Without it (the default) the
  event files are TensorFlow's, record for record;
* one chief per logdir: a second live chief on a logdir is refused (``LogdirLockedError``);
* an unreadable newest checkpoint falls back to the next older one;
* the global step may have shape [] or [1] (TensorFlow's reader breaks on [1] with NumPy 2);
* everything it does is reported as ``events`` records to listeners (``add_listener``);
* a model that is not finite (a NaN or an infinity in a trainable variable or in the newest
  value of a scalar summary) is never checkpointed (``on_nan``, ``max_rollbacks``; see
  ``finite``). Retention is the Saver's (``Saver()`` keeps 5; pass your own ``saver``).

This module holds the API; its parts are beside it in ``graph/``: ``sessions`` (the chief's
restore or init, a non-chief's wait), ``saving`` (a save, its finiteness check, the rollback),
``summaries``, ``services`` (the LooperThreads), ``stopping`` (the Coordinator, a session's
close), ``model_checks`` and ``saver_guard``.
"""
import contextlib
import logging
import os
import threading
import time
import weakref
from typing import Callable, Optional

try:
    import tensorflow as tf
except ImportError as error:  # TensorFlow comes through an extra: say which
    raise ImportError(
        "jupyter_supervisor needs TensorFlow >= 2.16. Install it with "
        "`pip install 'jupyter-supervisor[cpu]'` (or `[gpu]`, or your own tensorflow).") from error

from .. import compat, events, finite, names
from .._validate import check_basename, check_checkpoint_path, check_number, invalid
from ..checkpoints import prepare_logdir
from ..lockfile import LogdirLock
from ..backend import clean_up
from ..timer import Timer
from . import services, sessions
from .model_checks import counts_steps, global_step_by_name
from .saver_guard import sharded_where_plain_writes
from .saving import Saving, make_finite_check
from .stopping import StopCoordinator, close_session
from .summaries import ScalarWatch, Summaries

logger = logging.getLogger("jupyter_supervisor")

_v1 = tf.compat.v1
_GraphKeys = _v1.GraphKeys
_SessionLog = _v1.SessionLog

# Variable op types that must carry a device on a non-chief (TF 1 ref variables and TF 2
# resource variables alike).
_VARIABLE_OPS = ("Variable", "VariableV2", "VarHandleOp")


def _check_secs(name: str, value, allow_none: bool = False) -> None:
    # None is TensorFlow's "off", like 0; the message leaves it out as TF's docs do.
    if value is not None or not allow_none:
        check_number(name, value, unit="of seconds")


def _check_arguments(logdir, saver, is_chief, checkpoint_basename, init_fn, on_nan,
                     max_rollbacks, **seconds) -> None:
    """Raises for the Supervisor's arguments that cannot work, before anything is added to the
    graph."""
    if tf.executing_eagerly():
        raise RuntimeError(
            "Supervisors are incompatible with eager execution: the Supervisor drives a "
            "TensorFlow graph. Call tf.compat.v1.disable_eager_execution() at the top of "
            "your program or notebook (or build the model inside "
            "`with tf.Graph().as_default():`).")
    for name in ("save_summaries_secs", "save_model_secs"):
        _check_secs(name, seconds[name], allow_none=True)
    for name in ("recovery_wait_secs", "stop_grace_secs"):
        _check_secs(name, seconds[name])
    if init_fn is not None and not callable(init_fn):
        raise TypeError(invalid("init_fn", init_fn, "a callable taking the session, or None"))
    if saver not in (None, Supervisor.USE_DEFAULT) and not isinstance(saver, _v1.train.Saver):
        raise TypeError(invalid("saver", saver, "a tf.compat.v1.train.Saver, or None"))
    if is_chief and logdir:
        if saver is not None:
            check_checkpoint_path("logdir", os.fspath(logdir))
        check_basename("checkpoint_basename", checkpoint_basename)
    finite.check_policy(on_nan, max_rollbacks)


class Supervisor:
    """A training helper that checkpoints, writes summaries and recovers from crashes.

    The API and behaviour of ``tf.compat.v1.train.Supervisor``; see the module docstring for what
    it adds. Built in graph mode, on ``graph``: the constructor adds its ops (init, ready, saver,
    summary, the finiteness check) and finalizes the graph; a chief with a logdir takes the
    logdir's lock there, and gives it back in ``stop()``.

    Args:
        graph: the graph to train (None: the default graph).
        ready_op, ready_for_local_init_op, init_op, local_init_op, summary_op, saver,
            global_step: as TensorFlow's: ``USE_DEFAULT`` takes the op from its graph
            collection or makes the standard one, None turns it off. ``global_step`` may have
            shape [] or [1].
        is_chief: whether this task initializes or restores the model, saves and writes
            summaries (a non-chief waits for the chief's model).
        init_feed_dict: the feed of ``init_op``.
        logdir: where checkpoints and event files go (None: nowhere).
        save_summaries_secs, save_model_secs: seconds between summaries, between checkpoints
            (0 or None: none).
        recovery_wait_secs: how often a non-chief checks whether the model is ready.
        stop_grace_secs: how long ``stop()`` waits for the threads, and a session's close.
        checkpoint_basename: the name of the checkpoints in the logdir
            (``<basename>-<step>``).
        session_manager: a ``tf.compat.v1.train.SessionManager`` (None: one is made).
        summary_writer: ``USE_DEFAULT`` makes one for the logdir; None writes no events.
        init_fn: ``init_fn(sess)``, called after ``init_op`` when no checkpoint is restored.
        local_init_run_options: the ``RunOptions`` of ``local_init_op``.
        save_on_stop: a clean stop writes a final checkpoint, unless the newest checkpoint
            already holds the current step (keyword-only).
        on_nan: what a due checkpoint of a model that is not finite leads to (checked before
            every save, in one fused TensorFlow op built here). ``"stop"`` (default) writes
            nothing and stops with ``finite.NonFiniteError`` naming the step, what was not
            finite and the newest good checkpoint; ``"rollback"`` writes nothing and restores
            the newest good checkpoint at the training thread's next step boundary (its next
            ``should_stop()`` call, or ``step_boundary()``); ``"ignore"`` checks nothing
            (TensorFlow's behaviour). A checkpoint that was not written never pushes an older
            one out of retention.
        max_rollbacks: with ``"rollback"``, the rollbacks a session may make before it stops
            as with ``"stop"`` (default 3).
        complete_curves: every session's end writes a last summary and step rate (what
            ``%%supervise`` uses); False (default): TensorFlow's event files, record for record.

    Raises:
        RuntimeError: eager execution is on (the Supervisor drives a graph).
        TypeError: ``init_fn`` is not callable, or ``saver`` is not a ``Saver`` (nor None).
        ValueError: a number of seconds, ``checkpoint_basename``, ``logdir``, ``on_nan``,
            ``max_rollbacks`` or ``global_step`` that cannot work; on a non-chief, a variable
            without a device. The message names the argument and what it expects.
        LogdirLockedError: another live chief holds the logdir.

    Example::

        with tf.Graph().as_default():
            step = tf.compat.v1.train.get_or_create_global_step()
            train_op = ...
            sv = Supervisor(logdir="runs/graph", save_model_secs=60)
            with sv.managed_session() as sess:
                while not sv.should_stop():
                    sess.run(train_op)
    """

    USE_DEFAULT = 0

    def __init__(self,
                 graph=None,
                 ready_op=USE_DEFAULT,
                 ready_for_local_init_op=USE_DEFAULT,
                 is_chief=True,
                 init_op=USE_DEFAULT,
                 init_feed_dict=None,
                 local_init_op=USE_DEFAULT,
                 logdir=None,
                 summary_op=USE_DEFAULT,
                 saver=USE_DEFAULT,
                 global_step=USE_DEFAULT,
                 save_summaries_secs=120,
                 save_model_secs=600,
                 recovery_wait_secs=30,
                 stop_grace_secs=120,
                 checkpoint_basename="model.ckpt",
                 session_manager=None,
                 summary_writer=USE_DEFAULT,
                 init_fn=None,
                 local_init_run_options=None,
                 *,
                 save_on_stop=True,
                 on_nan=finite.STOP,
                 max_rollbacks=finite.DEFAULT_MAX_ROLLBACKS,
                 complete_curves=False):
        _check_arguments(logdir, saver, is_chief, checkpoint_basename, init_fn, on_nan,
                         max_rollbacks, save_summaries_secs=save_summaries_secs,
                         save_model_secs=save_model_secs,
                         recovery_wait_secs=recovery_wait_secs, stop_grace_secs=stop_grace_secs)
        if graph is None:
            graph = _v1.get_default_graph()
        self._graph = graph
        with graph.as_default():
            self._build_ops(ready_op, ready_for_local_init_op, init_op, init_feed_dict,
                            local_init_op, saver, summary_op, global_step)
            # Before the meta graph is taken: the check's op is part of the graph written.
            finite_check, saver_guarded = make_finite_check(self._saver, graph, on_nan,
                                                            is_chief, logdir)
            self._meta_graph_def = compat.meta_graph_def(graph, self._saver)

        self._is_chief = is_chief
        self._coord = StopCoordinator()
        # should_stop() runs at every step: the Event's own C method, not a Python call more.
        self._stop_is_set = compat.stop_event_is_set(self._coord)
        self._stop_seen = False
        self._stop_why = None  # what asked for the stop (request_stop's why), until stop() ends
        self._recovery_wait_secs = recovery_wait_secs
        self._stop_grace_secs = stop_grace_secs
        self._init_fn = init_fn
        self._local_init_run_options = local_init_run_options
        self._save_on_stop = save_on_stop
        self._complete_curves = bool(complete_curves)
        self._hub = events.EventHub()

        self._logdir = None
        self._save_summaries_secs = None
        self._save_model_secs = None
        self._save_path = None
        self._summary_writer = None
        self._owns_writer = False     # the writer is ours: replaced, not reopened, after close
        self._writer_closed = False
        self._lock: Optional[LogdirLock] = None
        self._graph_added_to_summary = False
        # The session of the chief's last prepare, for the final checkpoint in stop().
        self._sess = None
        # When to save and write summaries; the save timer's last_step (the step the newest
        # checkpoint holds) is guarded by the Saving's lock.
        self._save_timer = Timer()
        self._summary_timer = Timer()
        # on_nan: what a refused checkpoint leads to (its pending rollback and count are
        # guarded by the Saving's lock; read anywhere).
        self._policy = finite.Policy(on_nan, max_rollbacks)
        self._scalars = ScalarWatch()             # newest value of each scalar summary
        self._summaries = Summaries(self._summary_op, self._global_step, self._hub,
                                    self._scalars, checks=self._policy.checks,
                                    complete_curves=self._complete_curves)
        self._training_thread: Optional[threading.Thread] = None  # the one that prepared
        # Every thread this Supervisor started (services, queue runners, loops), so that the
        # notebook can tell whose output a thread's print is. Weak: finished threads go away.
        self._threads: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()

        if is_chief:
            self._open_logdir(logdir, checkpoint_basename, save_summaries_secs,
                              save_model_secs, summary_writer)
        self._saving = Saving(self._saver, graph, self._logdir, self._save_path,
                              self._save_timer, self._policy, self._scalars, finite_check,
                              saver_guarded, self._global_step, self._hub,
                              self._coord.request_stop)
        try:
            self._session_manager = session_manager or _v1.train.SessionManager(
                local_init_op=self._local_init_op,
                ready_op=self._ready_op,
                ready_for_local_init_op=self._ready_for_local_init_op,
                graph=self._graph,
                recovery_wait_secs=self._recovery_wait_secs,
                local_init_run_options=self._local_init_run_options)
            self._verify_setup()
        except BaseException:
            self._release_lock()
            raise
        graph.finalize()

    def _build_ops(self, ready_op, ready_for_local_init_op, init_op, init_feed_dict,
                   local_init_op, saver, summary_op, global_step) -> None:
        """The ops the Supervisor runs, each given, taken from its graph collection
        (USE_DEFAULT), or made; in the Supervisor's graph, before it is finalized."""
        self._ready_op = self._default(ready_op, _GraphKeys.READY_OP,
                                       _v1.report_uninitialized_variables)
        self._ready_for_local_init_op = (
            self._first_in_collection(_GraphKeys.READY_FOR_LOCAL_INIT_OP)
            if ready_for_local_init_op is Supervisor.USE_DEFAULT else ready_for_local_init_op)
        self._init_op = self._default(init_op, _GraphKeys.INIT_OP,
                                      _v1.global_variables_initializer)
        self._init_feed_dict = init_feed_dict
        self._local_init_op = self._default(local_init_op, _GraphKeys.LOCAL_INIT_OP,
                                            self._make_local_init_op)
        self._saver = self._default(saver, _GraphKeys.SAVERS, self._make_saver)
        self._summary_op = self._default(summary_op, _GraphKeys.SUMMARY_OP,
                                         _v1.summary.merge_all)
        self._global_step = self._init_global_step(global_step)

    def _open_logdir(self, logdir, checkpoint_basename, save_summaries_secs, save_model_secs,
                     summary_writer) -> None:
        """The chief's part: its timers, its logdir (created, locked) and summary writer."""
        self._logdir = os.fspath(logdir) if logdir else logdir
        self._save_summaries_secs = save_summaries_secs
        self._save_model_secs = save_model_secs
        self._save_timer = Timer(secs=save_model_secs)
        self._summary_timer = Timer(secs=save_summaries_secs)
        if self._logdir:
            prepare_logdir(self._logdir)
            self._save_path = os.path.join(self._logdir, checkpoint_basename)
            if "://" not in self._logdir:
                self._lock = LogdirLock(self._logdir)
                self._lock.acquire()
        try:
            if summary_writer is Supervisor.USE_DEFAULT:
                if self._logdir:
                    self._summary_writer = _new_file_writer(self._logdir)
                    self._owns_writer = True
            else:
                self._summary_writer = summary_writer
        except BaseException:
            self._release_lock()
            raise

    # ----------------------------------------------------------------------------- defaults

    def _first_in_collection(self, key):
        found = self._graph.get_collection(key)
        if len(found) > 1:
            logger.info("Found %d %s operations. Returning the first one.", len(found), key)
        return found[0] if found else None

    def _default(self, value, key, make: Callable):
        """``value``, or for USE_DEFAULT the first of collection ``key``, else ``make()``."""
        if value is not Supervisor.USE_DEFAULT:
            return value
        value = self._first_in_collection(key)
        if value is None:
            value = make()
            if value is not None:
                self._graph.add_to_collection(key, value)
        return value

    @staticmethod
    def _make_local_init_op():
        return tf.group(_v1.local_variables_initializer(), _v1.tables_initializer())

    @staticmethod
    def _make_saver():
        # Sharded where that writes the same files: the finiteness guard then runs beside the
        # write (see saver_guard.guard_saver). TensorFlow's Supervisor makes a plain Saver.
        variables = _v1.global_variables()
        return (_v1.train.Saver(sharded=sharded_where_plain_writes(variables))
                if variables else None)

    def _init_global_step(self, global_step):
        if global_step is Supervisor.USE_DEFAULT:
            global_step = self._first_in_collection(_GraphKeys.GLOBAL_STEP)
            if global_step is None:
                global_step = global_step_by_name(self._graph)
                # As TensorFlow's Supervisor: a 'global_step' that cannot count is passed over.
                if global_step is not None and not counts_steps(global_step):
                    logger.warning("Found 'global_step' is not an int type: %s",
                                   global_step.dtype)
                    global_step = None
                if global_step is not None:
                    self._graph.add_to_collection(_GraphKeys.GLOBAL_STEP, global_step)
                return global_step
        if global_step is None:
            return None
        if not counts_steps(global_step, shape=True):
            raise ValueError(invalid(
                "global_step", global_step,
                "an int32 or int64 tensor or variable of shape [] or [1] "
                "(tf.compat.v1.train.get_or_create_global_step() makes one), or None"))
        return global_step

    def _verify_setup(self):
        if self._is_chief:
            return
        for op in self._graph.get_operations():
            if op.type in _VARIABLE_OPS and not op.device:
                raise ValueError(
                    "When using replicas, all Variables must have their device set: "
                    f"{op.name!r} has none. Build the model under "
                    "tf.compat.v1.train.replica_device_setter(...) or tf.device('/job:ps').")

    # ----------------------------------------------------------------------------- properties

    @property
    def is_chief(self):
        """True if this is a chief supervisor."""
        return self._is_chief

    @property
    def session_manager(self):
        """The SessionManager used to create, restore and wait for sessions."""
        return self._session_manager

    @property
    def coord(self):
        """The Coordinator that stops the services and the threads of this Supervisor."""
        return self._coord

    @property
    def init_op(self):
        """The op that initializes the model when it cannot be restored, or None."""
        return self._init_op

    @property
    def init_feed_dict(self):
        """The feed dict used when running ``init_op``, or None."""
        return self._init_feed_dict

    @property
    def ready_op(self):
        """The op that reports uninitialized variables, or None."""
        return self._ready_op

    @property
    def ready_for_local_init_op(self):
        """The op checked before running ``local_init_op``, or None."""
        return self._ready_for_local_init_op

    @property
    def summary_writer(self):
        """The summary FileWriter, or None (non-chief, no logdir, or disabled)."""
        return self._summary_writer

    @property
    def summary_op(self):
        """The op the summary service computes, or None."""
        return self._summary_op

    @property
    def save_summaries_secs(self):
        """Seconds between summaries (None on a non-chief)."""
        return self._save_summaries_secs

    @property
    def global_step(self):
        """The global step tensor, or None."""
        return self._global_step

    @property
    def saver(self):
        """The Saver used for checkpoints, or None."""
        return self._saver

    @property
    def save_model_secs(self):
        """Seconds between checkpoints (None on a non-chief)."""
        return self._save_model_secs

    @property
    def save_path(self):
        """The checkpoint prefix, ``<logdir>/<checkpoint_basename>``, or None."""
        return self._save_path

    @property
    def logdir(self):
        """The chief's logdir, or None."""
        return self._logdir

    # ----------------------------------------------------------------------------- observing

    def add_listener(self, listener: Callable[[object], None]) -> None:
        """Calls ``listener(event)`` for every ``events`` record, on a dispatcher thread."""
        self._hub.add_listener(listener)

    def flush_events(self, timeout: Optional[float] = None) -> bool:
        """Waits until the events emitted so far reached the listeners; False on timeout."""
        return self._hub.flush(timeout)

    def owns_thread(self, thread: threading.Thread) -> bool:
        """True if ``thread`` was started by this Supervisor."""
        return thread in self._threads

    def read_global_step(self, sess=None) -> Optional[int]:
        """The current global step as an int (shape [] or [1]), or None without a global step."""
        sess = sess if sess is not None else self._sess
        if self._global_step is None or sess is None:
            return None
        return services.read_step(sess, self._global_step)

    # ----------------------------------------------------------------------------- sessions

    def _write_graph(self):
        if self._logdir:
            tf.io.write_graph(self._graph.as_graph_def(add_shapes=True), self._logdir,
                              "graph.pbtxt")
        if self._summary_writer and not self._graph_added_to_summary:
            self._summary_writer.add_graph(self._graph)
            self._summary_writer.add_meta_graph(self._meta_graph_def)
            self._graph_added_to_summary = True

    def start_standard_services(self, sess):
        """Starts the checkpoint, summary and step-counter services for ``sess``.

        Returns the list of started threads (join them with ``sv.coord.join``), or None when
        there is no logdir. Raises RuntimeError on a non-chief.
        """
        if not self._is_chief:
            raise RuntimeError("Only chief supervisor can start standard services. "
                               "Because only chief supervisors can write events.")
        if not self._logdir:
            logger.warning("Standard services need a 'logdir' passed to the Supervisor.")
            return None
        if self._global_step is not None and self._summary_writer:
            step = services.read_step(sess, self._global_step)
            start = step + events.START_AFTER if self._complete_curves else step
            self._summary_writer.add_session_log(_SessionLog(status=_SessionLog.START), start)
        threads = []
        writer = self._summary_writer
        if self._summary_timer.enabled and writer:
            if self._summary_op is not None:
                self._summaries.service_started(sess)
                threads.append(services.SummaryService(
                    self._coord, self._summary_timer.secs,
                    compute=lambda: self._summaries.compute(sess),
                    write=lambda summary, step: self._summaries.write(
                        self._summary_writer, summary, step)))
            if self._global_step is not None:
                threads.append(services.StepCounterService(
                    self._coord, self._summary_timer.secs,
                    tag=self._global_step.op.name + names.RATE_SUFFIX,
                    read=lambda: services.read_step(sess, self._global_step),
                    writer=writer, hub=self._hub, complete=self._complete_curves))
        if self._saver and self._save_timer.enabled:
            threads.append(services.CheckpointService(
                self._coord, self._save_timer.secs,
                save=lambda: self._saving.save_if_moved(sess, self._summary_writer)))
        for thread in threads:
            self._threads.add(thread)
            thread.start()
        return threads

    def prepare_or_wait_for_session(self, master="", config=None, wait_for_checkpoint=False,
                                    max_wait_secs=7200, start_standard_services=True):
        """Creates a session on ``master`` with a ready model, restoring or initializing it.

        A chief restores the newest readable checkpoint of its logdir (an unreadable newest one
        falls back to the next older one, with a warning), or runs ``init_op`` and ``init_fn``;
        then it writes the graph and, with ``start_standard_services``, starts the services and
        the queue runners. A non-chief waits (every ``recovery_wait_secs``, up to
        ``max_wait_secs``) for the chief to make the model ready. Either emits
        ``SessionReady``.

        Args:
            master: the TensorFlow master ('' for an in-process session).
            config: the session's ``ConfigProto``.
            wait_for_checkpoint: a chief waits for a checkpoint to appear instead of
                initializing.
            max_wait_secs: the longest wait, for a checkpoint or for the chief's model.
            start_standard_services: start the services (a chief) and the queue runners.

        Returns:
            The session.

        Raises:
            CheckpointMismatchError: the newest checkpoint does not fit the graph.
            DeadlineExceededError: a non-chief's model was not ready within
                ``max_wait_secs``.
            WaitCancelledError: a stop was requested while a non-chief waited.
        """
        # Eager mode is per thread: a TF2 thread that prepares a session must enter the graph.
        with self._graph.as_default():
            return self._prepare_or_wait(master, config, wait_for_checkpoint, max_wait_secs,
                                         start_standard_services)

    def _prepare_or_wait(self, master, config, wait_for_checkpoint, max_wait_secs,
                         start_standard_services):
        self._coord.clear_stop()
        if self._summary_writer and self._writer_closed and self._owns_writer:
            # A reopened writer names its new file by the second, like the closed one: a
            # session prepared within the same second would overwrite the earlier events.
            self._summary_writer = _new_file_writer(self._logdir)
        elif self._summary_writer:
            self._summary_writer.reopen()
        self._writer_closed = False
        if self._is_chief and self._lock is not None:
            self._lock.acquire()
        self._sess = None
        self._training_thread = threading.current_thread()
        self._saving.new_session()
        self._scalars.clear()
        if self._is_chief:
            sess, restored_from = self._prepare_chief_session(
                master, config, wait_for_checkpoint, max_wait_secs)
            self._sess = sess
            self._write_graph()
            step = self.read_global_step(sess)
            self._saving.session_ready(step if restored_from else None)
            self._summaries.session_ready(step if restored_from else None)
            self._hub.emit(events.SessionReady, step, restored_from, True, time.time())
            if start_standard_services:
                logger.info("Starting standard services.")
                self.start_standard_services(sess)
        else:
            self._hub.emit(events.WaitingForChief, master, time.time())
            sess = sessions.wait_for_chief(self._session_manager, self._graph, master, config,
                                           max_wait_secs, self._recovery_wait_secs, self._coord)
            self._sess = sess
            self._hub.emit(events.SessionReady, self.read_global_step(sess), None, False,
                           time.time())
        if start_standard_services:
            logger.info("Starting queue runners.")
            self.start_queue_runners(sess)
        return sess

    def _prepare_chief_session(self, master, config, wait_for_checkpoint, max_wait_secs):
        prepare = lambda **where: self._session_manager.prepare_session(  # noqa: E731
            master, init_op=self._init_op, saver=self._saver, wait_for_checkpoint=wait_for_checkpoint,
            max_wait_secs=max_wait_secs, config=config, init_feed_dict=self._init_feed_dict,
            init_fn=self._init_fn, **where)
        # Only with the logdir's lock held: then no live writer can own what is swept.
        sweeps = self._lock is not None and self._lock.held
        return sessions.prepare_chief(prepare, self._graph, self._saver, self._logdir,
                                      self._save_path, wait_for_checkpoint, sweeps)

    def start_queue_runners(self, sess, queue_runners=None):
        """Starts the graph's QueueRunners (or ``queue_runners``); returns their threads."""
        if queue_runners is None:
            queue_runners = self._graph.get_collection(_GraphKeys.QUEUE_RUNNERS)
        threads = []
        with self._graph.as_default():
            for runner in queue_runners:
                threads.extend(runner.create_threads(sess, coord=self._coord, daemon=True,
                                                     start=False))
        for thread in threads:
            self._threads.add(thread)
            thread.start()
        return threads

    def loop(self, timer_interval_secs, target, args=None, kwargs=None):
        """Starts a LooperThread calling ``target(*args, **kwargs)`` every interval.

        With ``timer_interval_secs=None`` it calls it again and again. It ends when a stop is
        requested; an exception from ``target`` stops the Supervisor and is re-raised by
        ``stop()`` (and so by ``managed_session``).
        """
        _check_secs("timer_interval_secs", timer_interval_secs, allow_none=True)
        if not callable(target):
            raise TypeError(invalid("target", target, "a callable"))
        looper = _v1.train.LooperThread(self._coord, timer_interval_secs, target=target,
                                        args=args, kwargs=kwargs)
        self._threads.add(looper)
        looper.start()
        return looper

    # ----------------------------------------------------------------------------- checkpoints

    def save_checkpoint(self, sess=None) -> Optional[str]:
        """Writes a checkpoint now, of the global step's current value.

        Safe to call from any thread, also while the checkpoint service runs. When the model is
        not finite nothing is written: with ``on_nan="stop"`` it raises, and the run stops with
        it; with ``"rollback"`` it returns None and the training thread rolls back at its next
        step boundary (while rollbacks are left; then as ``"stop"``).

        Args:
            sess: the session to save (None: the one the Supervisor prepared).

        Returns:
            The checkpoint's path; None without a Saver, a logdir or a session (a non-chief),
            while a rollback is pending, or when the model was not finite (``"rollback"``).

        Raises:
            NonFiniteError: the model is not finite (``on_nan="stop"``).
            CheckpointWriteError: the files could not be written; the message names the
                newest checkpoint that was.
        """
        return self._saving.save(sess if sess is not None else self._sess,
                                 self._summary_writer)

    def step_boundary(self, sess=None) -> bool:
        """Called by the training thread between two steps (``should_stop()`` calls it): makes
        a rollback that a failed finiteness check scheduled. True if it rolled back. Does
        nothing on another thread than the one that prepared the session, where a restore
        could interleave with a training step."""
        if self._policy.pending is None or \
                threading.current_thread() is not self._training_thread:
            return False
        sess = sess if sess is not None else self._sess
        if sess is None:
            return False
        return self._saving.roll_back(sess, self._summary_writer)

    def _save_final_checkpoint(self):
        sess = self._sess
        if not self._save_on_stop or not self._saver or not self._save_path or sess is None:
            return
        if compat.session_closed(sess):
            logger.warning("No final checkpoint: the session was closed before sv.stop().")
            return
        self._saving.save_if_moved(sess, self._summary_writer, final=True)

    # ----------------------------------------------------------------------------- stopping

    def stop(self, threads=None, close_summary_writer=True, ignore_live_threads=False):
        """Stops the services and the Coordinator's threads; does not close the session.

        Joins ``threads`` (default: the services, queue runners and ``loop`` threads) for up to
        ``stop_grace_secs``. With ``complete_curves``, the summary service's last summary and
        the step counter's last rate are of the last step (see ``Summaries.write_last``); on a
        clean stop the chief then writes a final checkpoint (see ``save_on_stop``). Releases
        the logdir's lock and emits ``Stopped``.

        Args:
            threads: the threads to join (None: every thread the Coordinator knows).
            close_summary_writer: mark the session's end in the event file (SessionLog.STOP,
                with the stop's ``why``) and close it.
            ignore_live_threads: do not raise for threads still alive after the grace period.

        Raises:
            The first exception reported to the Coordinator (``request_stop(ex)``, a service
            that failed), except ``OutOfRangeError``, a clean end; RuntimeError naming the
            threads still alive after ``stop_grace_secs``; what the final checkpoint raises
            (``NonFiniteError``, ``CheckpointWriteError``); a failure to close the event file
            or release the lock after an otherwise clean stop.
        """
        self._coord.request_stop()
        error = None
        try:
            try:
                self._coord.join(threads, stop_grace_period_secs=self._stop_grace_secs,
                                 ignore_live_threads=ignore_live_threads)
            except BaseException as e:
                clean_up(e, "writing the last summary", lambda: self._summaries.write_last(
                    self._summary_writer, self._read_step_quietly, failed=True))
                raise
            self._summaries.write_last(self._summary_writer, self._read_step_quietly,
                                       failed=False)
            if self._is_chief:
                self._save_final_checkpoint()
        except BaseException as e:
            error = e
            raise
        finally:
            stopped_step = self._read_step_quietly()
            # The error that ended the run is the one raised: a clean-up that fails after it
            # is logged beside it (clean_up), and one that fails after a clean stop is raised.
            cleanup_error = None
            if close_summary_writer and self._summary_writer:
                cleanup_error = clean_up(error, "closing the event file",
                                         self._close_summary_writer)
            if self._lock is not None:
                cleanup_error = clean_up(error or cleanup_error, "releasing the logdir's lock",
                                         self._lock.release)
            reason = self._coord.stop_reason or events.REQUESTED
            exception = self._coord.stop_exception
            if error is not None and exception is None:
                reason, exception = events.ERROR, error
            elif error is None and exception is None and cleanup_error is not None:
                reason, exception = events.ERROR, cleanup_error
            self._hub.emit(events.Stopped, reason, exception, stopped_step, time.time(),
                           self._stop_why or "")
            self._stop_why = None
        if cleanup_error is not None and error is None:
            raise cleanup_error

    def _close_summary_writer(self):
        self._summary_writer.add_session_log(
            _SessionLog(status=_SessionLog.STOP, msg=self._stop_why or ""))
        self._summary_writer.close()
        self._writer_closed = True
        self._graph_added_to_summary = False

    def _read_step_quietly(self):
        sess = self._sess
        if sess is None or compat.session_closed(sess):
            return None
        try:
            return self.read_global_step(sess)
        except Exception:  # pylint: disable=broad-except
            return None  # only for the Stopped record; a dead session is reported elsewhere

    def _release_lock(self):
        if self._lock is not None:
            self._lock.release()

    def request_stop(self, ex=None, *, why=None):
        """Asks the Coordinator to stop the threads; returns at once.

        Args:
            ex: an exception (or a ``sys.exc_info()`` tuple) that ``stop()`` re-raises, unless
                it is ``OutOfRangeError`` (the end of the input: a clean stop). The first one
                reported wins.
            why: what asked for the stop; the first one given is the msg of the event file's
                SessionLog.STOP and the ``Stopped`` record's ``why`` (keyword-only).
        """
        if why is not None and self._stop_why is None:
            self._stop_why = str(why)
        self._coord.request_stop(ex=ex)

    def should_stop(self):
        """True once a stop was requested.

        Called by the training thread between steps, it also makes a pending rollback
        (``on_nan="rollback"``) first: see ``step_boundary``.

        Returns:
            True once ``request_stop`` was called (by the body, a service that failed, the end
            of the input, or the notebook's Stop), until the next session is prepared.
        """
        if self._policy.pending is not None:
            self.step_boundary()
        if self._stop_is_set():
            self._stop_seen = True
            return True
        return False

    @property
    def stop_is_set(self) -> Callable[[], bool]:
        """The Coordinator's ``should_stop``, as cheap as it gets (for a per-step wrapper)."""
        return self._stop_is_set

    @property
    def stop_seen(self) -> bool:
        """True once ``should_stop()`` returned True: the caller knows the run is stopping."""
        return self._stop_seen

    def stop_on_exception(self):
        """A context manager that requests a stop when its block raises."""
        return self._coord.stop_on_exception()

    def wait_for_stop(self):
        """Blocks until a stop is requested."""
        self._coord.wait_for_stop()

    def summary_computed(self, sess, summary, global_step=None):
        """Writes a summary computed by the caller to the event file, and reports it
        (``SummaryWritten``; with ``on_nan`` checks, its scalars are checked before the next
        checkpoint).

        Args:
            sess: the session to read the global step from.
            summary: a ``Summary`` proto or its serialized bytes.
            global_step: the summary's step (None: the current global step, when there is one).

        Raises:
            RuntimeError: the Supervisor has no summary writer (no logdir, or
                ``summary_writer=None``).
        """
        if not self._summary_writer:
            raise RuntimeError("Writing a summary requires a summary writer. Give the "
                               "Supervisor a logdir (or a summary_writer).")
        if global_step is None and self._global_step is not None:
            global_step = services.read_step(sess, self._global_step)
        self._summary_writer.add_summary(summary, global_step)
        self._summaries.report(summary, global_step)

    @contextlib.contextmanager
    def managed_session(self, master="", config=None, start_standard_services=True,
                        close_summary_writer=True):
        """A context manager yielding a ready session; stops everything when the block exits.

        An exception from the block or from a service is re-raised after the services were
        stopped and the session closed, except ``OutOfRangeError``, which is a normal end. A
        clean end writes a final checkpoint (see ``save_on_stop``). An error while preparing
        the session is raised after stopping, also ``WaitCancelledError`` (a non-chief was
        stopped while it waited for the chief). The session is closed on a thread of its own,
        waited for at most ``stop_grace_secs`` (a cluster's task gone for good cannot hang it).

        Args:
            master, config, start_standard_services: as ``prepare_or_wait_for_session``.
            close_summary_writer: as ``stop``.

        Yields:
            The session, restored from the newest checkpoint or initialized.

        Raises:
            What the block, a service, the preparation or ``stop`` raised (see ``stop``).

        Example::

            with sv.managed_session() as sess:
                while not sv.should_stop():
                    sess.run(train_op)
        """
        try:
            sess = self.prepare_or_wait_for_session(
                master=master, config=config, start_standard_services=start_standard_services)
        except Exception as e:  # pylint: disable=broad-except
            # No session, so no block to run: stop, and raise the error even when it is a
            # clean-stop one (a generator-based context manager must yield or raise).
            self.request_stop(e)
            with contextlib.suppress(type(e)):  # the Coordinator re-raises the same error
                self.stop(close_summary_writer=close_summary_writer)
            raise
        try:
            yield sess
        except Exception as e:  # pylint: disable=broad-except
            self.request_stop(e)
        finally:
            try:
                self.stop(close_summary_writer=close_summary_writer)
            finally:
                close_session(sess, self._stop_grace_secs)

    # TensorFlow's CamelCase aliases.
    PrepareSession = prepare_or_wait_for_session
    StartQueueRunners = start_queue_runners
    StartStandardServices = start_standard_services
    Stop = stop
    RequestStop = request_stop
    Loop = loop
    ShouldStop = should_stop
    StopOnException = stop_on_exception
    WaitForStop = wait_for_stop
    SummaryComputed = summary_computed


def _new_file_writer(logdir):
    """A FileWriter whose event file name is unique and sorts after the earlier ones."""
    return _v1.summary.FileWriter(logdir, filename_suffix=events.event_file_suffix())
