"""The graph backend: a run of TF1 graph code under our Supervisor (see ``backend.Backend``).

Built in the kernel's main thread: it checks the graph (not empty, a usable global step, the
newest checkpoint fits) and adds the run's init, ready, saver and summary ops there, so that
no op is added to the graph concurrently with the user's cells. The body then sees ``sv`` (the
Supervisor) and ``sess``: the managed session behind ``_BoundSession``, which ends the body at
a step boundary once a stop was requested that the body did not look at, and stops exactly at
``--max-steps`` as TensorFlow's ``StopAtStepHook`` does.

A stop asked through the backend (the run's) is recorded in its ``stops.Stops`` and handed to the
Supervisor's Coordinator; the Supervisor clears its Coordinator when it prepares the session, so
a stop asked before that is handed over again once the session is ready.
"""
import contextlib
from typing import Callable, List, Optional

import tensorflow as tf

from .. import compat, events, finite, stops
from ..backend import StopBody
from ..checkpoints import CheckpointMismatchError, checkpoint_paths
from .._validate import invalid
from ..config import RunConfig
from .model_checks import checkpoint_misfit, counts_steps, global_step_by_name, mismatch_message
from .saver_guard import sharded_where_plain_writes
from .services import step_value
from .stopping import WaitCancelledError
from .supervisor import Supervisor

_v1 = tf.compat.v1

class GraphBackend:
    """One session of a ``RunConfig`` on ``graph`` under a Supervisor."""

    def __init__(self, config: RunConfig, graph):
        self._config = config
        self._graph = graph
        if config.workers > 1:
            raise ValueError(
                f"TF_CONFIG names {config.workers} training tasks: that is a TensorFlow 2 "
                "multi-worker run (tf.distribute.MultiWorkerMirroredStrategy), which the eager "
                "backend supervises. Graph code trains as a task of a cluster with --cluster "
                "CLUSTER --job worker --task-index N; unset TF_CONFIG in this kernel.")
        if not config.is_chief and not config.master:
            raise ValueError(
                "This task is not the chief (--task-index above 0, or --no-chief), and it has "
                "no cluster to join: a worker waits for its chief's model, which an in-process "
                "session never gets. Give the cluster (--cluster CLUSTER --job worker, or "
                "--master grpc://HOST:PORT), or leave out --task-index/--no-chief to train "
                "here.")
        if config.keep_best is not None:
            raise ValueError(invalid(
                "keep_best", config.keep_best,
                "an eager run (Keras fit, sv.track/sv.step loops): in a graph (TF1) run the "
                "Saver's service thread writes checkpoints at its own times while another "
                "thread computes the summaries, so no checkpoint holds the state a metric was "
                "measured on. In graph code, keep the best with a Saver of your own "
                "(tf.compat.v1.train.Saver(max_to_keep=1)) that saves into another directory "
                "when your metric improves"))
        if not graph.get_operations():
            raise ValueError(
                "%%supervise trains the default graph, and it is empty. Run the cells that "
                "build the model first (again after a kernel restart or "
                "tf.compat.v1.reset_default_graph()).")
        if _check_global_step(graph) is None and config.max_steps is not None:
            raise ValueError(
                "--max-steps needs a global step, and the graph has none. Create it before "
                "the model: global_step = tf.compat.v1.train.get_or_create_global_step(), and "
                "pass it to the optimizer (minimize(loss, global_step=global_step)).")
        if config.saves:
            _check_checkpoint_matches(config.logdir, config.checkpoint_basename, graph)
        self._sv = self._build_supervisor()
        self._stops = stops.Stops()
        self._bound: Optional[_BoundSession] = None
        self._sess = None

    @property
    def supervisor(self) -> Supervisor:
        """The Supervisor of this session."""
        return self._sv

    @property
    def stopped_by_peer(self) -> Optional[str]:
        """None: a graph worker stops with its chief's session (``backend.Backend``)."""
        return None

    @property
    def stop_record(self) -> Optional[stops.StopRecord]:
        """See ``backend.Backend``: the stops asked through the backend (the body's own
        ``sv.request_stop`` and the services' go to the Supervisor's Coordinator alone)."""
        return self._stops.record

    def _build_supervisor(self) -> Supervisor:
        """Builds fresh init/ready/saver/summary ops for the graph as it is now, and the
        Supervisor. Ops kept in the graph's collections by an earlier run would miss the
        variables added since, so none is taken from there."""
        cfg, graph = self._config, self._graph
        if graph.finalized:
            compat.unfinalize(graph)  # no live run has it
        with graph.as_default():
            saveables = _v1.global_variables() + _v1.get_collection(
                _v1.GraphKeys.SAVEABLE_OBJECTS)
            saver = (_v1.train.Saver(max_to_keep=cfg.keep,
                                     sharded=sharded_where_plain_writes(saveables))
                     if saveables and cfg.saves else None)
            return Supervisor(
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
                max_rollbacks=cfg.max_rollbacks,
                complete_curves=True)

    # --------------------------------------------------------------------- the Backend API

    def add_listener(self, listener: Callable[[object], None]) -> None:
        """See ``backend.Backend``."""
        self._sv.add_listener(listener)

    @contextlib.contextmanager
    def session(self):
        """See ``backend.Backend``: yields ``{"sv": ..., "sess": ...}``."""
        cfg, sv = self._config, self._sv
        # A worker runs the services that keep it going; a chief without a logdir has none.
        services = cfg.saves or not cfg.is_chief
        with contextlib.ExitStack() as stack:
            # Graph mode is per thread, and the notebook may make another graph the default
            # meanwhile: the body runs with the run's graph as its default.
            stack.enter_context(self._graph.as_default())
            try:
                sess = stack.enter_context(sv.managed_session(
                    cfg.master, config=cfg.session_config, start_standard_services=services))
            except WaitCancelledError:
                yield {}  # stopped while waiting for the chief: a clean end, no session
                return
            if not services:
                sv.start_queue_runners(sess)
            self._sess = sess
            self._bound = _BoundSession(sess, sv, _check_global_step(self._graph),
                                        cfg.max_steps, rollback=cfg.on_nan == finite.ROLLBACK)
            if self._stops.asked:  # asked while the session was prepared: cleared there
                sv.request_stop(why=self._stops.record.why)
            try:
                yield {"sv": sv, "sess": self._bound}
            except StopBody:
                pass  # the body ended at a step boundary after a stop: a clean end
            except RuntimeError as e:
                hinted = _with_hint(e)
                if hinted is e:
                    raise
                raise hinted from None

    def should_stop(self) -> bool:
        """See ``backend.Backend``."""
        return self._sv.should_stop()

    def request_stop(self, ex: Optional[BaseException] = None, why: Optional[str] = None, *,
                     by: str = stops.SESSION, step: Optional[int] = None) -> None:
        """See ``backend.Backend``."""
        reason = (events.REQUESTED if ex is None else events.OUT_OF_RANGE
                  if isinstance(ex, tf.errors.OutOfRangeError) else events.ERROR)
        self._stops.ask(by, why=why, reason=reason, error=ex, step=step)  # before the handover
        self._sv.request_stop(ex, why=why)

    def save_now(self) -> Optional[str]:
        """See ``backend.Backend``."""
        path = self._sv.save_checkpoint()
        self._sv.flush_events(timeout=10)
        return path

    def read_step(self) -> Optional[int]:
        """See ``backend.Backend``: the step the last ``sess.run`` fetched under
        ``--max-steps``, else read from the session (None before it is ready)."""
        bound = self._bound
        if bound is not None and bound.step is not None:
            return bound.step
        if self._sess is None:
            return None
        return self._sv.read_global_step(self._sess)

    def flush_events(self, timeout: Optional[float] = None) -> bool:
        """See ``backend.Backend``."""
        return self._sv.flush_events(timeout=timeout)

    def owns_thread(self, thread) -> bool:
        """See ``backend.Backend``."""
        return self._sv.owns_thread(thread)

    def notes(self) -> List[str]:
        """See ``backend.Backend``."""
        sv, name = self._sv, self._config.name
        if not self._config.saves:
            return []
        if sv.saver is None:
            return [f"The graph has no variables: run {name!r} has nothing to checkpoint "
                    "(it writes summaries only)."]
        if sv.global_step is None:
            return [f"The graph has no global step: run {name!r} counts no steps, and each "
                    f"checkpoint replaces the last ({sv.save_path}). To count steps, create "
                    "one with tf.compat.v1.train.get_or_create_global_step() and pass it to "
                    "minimize(..., global_step=...)."]
        return []

    def close(self) -> None:
        """See ``backend.Backend``: the graph takes new ops again."""
        if self._graph.finalized:
            compat.unfinalize(self._graph)


class _BoundSession(compat.session_interface()):
    """The managed session as the body sees it.

    Once a stop was requested, its next ``run`` raises ``StopBody`` unless the body saw the
    stop through ``sv.should_stop()``: a loop that never checks still ends at a step boundary,
    and one that checks may still run a last evaluation. With ``rollback`` (``--on-nan
    rollback``), a rollback the Supervisor scheduled is made before a ``run``, between two
    steps of the body. Under ``max_steps`` every ``run``
    also fetches the global step (as TensorFlow's ``StopAtStepHook``): the stop is requested by
    the run that reaches the limit, and the step is read exactly only when the fetched value
    (which may be from before or after that run's increment) is one short of it.
    """

    def __init__(self, sess, sv: Supervisor, step_tensor, max_steps: Optional[int], *,
                 rollback: bool = False):
        self._sess = sess
        self._sv = sv
        self._rollback = rollback
        self._stop_is_set = sv.stop_is_set
        self._step_tensor = step_tensor if max_steps is not None else None
        self._limit = max_steps
        self.step: Optional[int] = None   # the step fetched by the last run (max_steps only)
        if self._step_tensor is not None:
            self._reached(sv.read_global_step(sess))
        if not rollback and self._step_tensor is None:
            # Until a stop is requested a step is the managed session's own run, without a
            # Python call more (at 10,000 steps/s that is 0.2 % of the speed); the stop's
            # request puts the checking run back, before the body's next step.
            self.run = sess.run
            sv.coord.when_stopped(self._check_from_now)

    @property
    def graph(self):
        return self._sess.graph

    @property
    def sess_str(self):
        return self._sess.sess_str

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if self._rollback:
            self._sv.step_boundary(self._sess)
        if self._stop_is_set() and not self._sv.stop_seen:
            raise StopBody("The run was asked to stop.")
        if self._step_tensor is None:  # positional: a step's Python path is kept short
            return self._sess.run(fetches, feed_dict, options, run_metadata)
        result, step = self._sess.run([fetches, self._step_tensor], feed_dict=feed_dict,
                                      options=options, run_metadata=run_metadata)
        step = step_value(step)
        if step + 1 >= self._limit and step < self._limit:
            step = self._sv.read_global_step(self._sess)
        self._reached(step)
        return result

    def _check_from_now(self) -> None:
        self.__dict__.pop("run", None)

    def _reached(self, step: Optional[int]) -> None:
        self.step = step
        if step is not None and step >= self._limit:
            self._sv.request_stop()  # a clean stop: the run ends "finished"

    def partial_run_setup(self, fetches, feeds=None):
        return self._sess.partial_run_setup(fetches, feeds)

    def partial_run(self, handle, fetches, feed_dict=None):
        return self._sess.partial_run(handle, fetches, feed_dict)

    def __getattr__(self, name):
        return getattr(self._sess, name)

    def __repr__(self):
        limit = "" if self._limit is None else f", stops at step {self._limit}"
        return f"<managed session{limit}: {self._sess!r}>"


def _check_checkpoint_matches(logdir: str, basename: str, graph) -> None:
    """Raises CheckpointMismatchError when the newest checkpoint lacks variables of the graph or
    holds them with another shape (an unreadable one passes: the Supervisor falls back to an
    older one, or says why it cannot)."""
    newest = next(iter(checkpoint_paths(logdir, basename)), None)
    problem = None if newest is None else checkpoint_misfit(newest, graph)
    if problem is None:
        return
    raise CheckpointMismatchError(mismatch_message(
        f"The newest checkpoint in {logdir!r} ({newest})", newest, problem, "--logdir",
        "also pass --init-fn NAME with a function that restores the old variables"))


def _check_global_step(graph):
    """The graph's global step (by collection or by name), or None; raises ValueError for one
    that cannot count steps (TensorFlow's Supervisor would ignore it and count none)."""
    steps = graph.get_collection(_v1.GraphKeys.GLOBAL_STEP)
    step = steps[0] if steps else global_step_by_name(graph)
    if step is None:
        return None
    shape = step.shape
    if not counts_steps(step, shape=True):
        raise ValueError(
            f"The global step {step.name!r} is a {step.dtype.base_dtype.name} of shape "
            f"{shape.as_list() if shape.rank is not None else 'unknown'}: it must be an int64 "
            "(or int32) scalar that counts the training steps. Create it with global_step = "
            "tf.compat.v1.train.get_or_create_global_step() and pass it to the optimizer "
            "(minimize(loss, global_step=global_step)).")
    return step


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
