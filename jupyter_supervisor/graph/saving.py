"""The graph Supervisor's checkpoints: a save and its finiteness check, and the rollback that a
refused save can lead to (``finite.Policy``).

What a save writes must be finite. The check runs in the Saver's own session run where the
Saver could be guarded (``saver_guard.guard_saver``); else the fused check of the trainable
variables runs before the save. The newest scalar summaries are checked before every save too.
A refused save writes nothing under the checkpoint's name; the policy then stops the run or
schedules a rollback, which the training thread makes at its next step boundary (``roll_back``).

``Saving`` gets only what it needs: the Saver, the graph, where checkpoints go, the save timer,
the policy, the ScalarWatch, the finiteness check, the global step, the event hub and the
Coordinator's ``request_stop``; the session and the summary writer come with each call. It
holds nothing of the Supervisor, so that an abandoned Supervisor is freed at once (and its
logdir's lock with it).
"""
import logging
import sys
import threading
import time
from typing import Callable, Optional, Tuple

import tensorflow as tf

from .. import events, finite
from ..checkpoints import CheckpointWriteError, write_failure
from ..timer import Timer
from . import services
from .saver_guard import guard_saver, variable_check
from .summaries import ScalarWatch

logger = logging.getLogger("jupyter_supervisor")

_v1 = tf.compat.v1
_GraphKeys = _v1.GraphKeys
_SessionLog = _v1.SessionLog


def make_finite_check(saver, graph, on_nan, is_chief,
                      logdir) -> Tuple[Optional[finite.VariableCheck], bool]:
    """For a chief that saves: guards the Saver's save op (what it writes must be finite,
    checked in the save's own run) and returns the fused check of the trainable variables
    (run before a save only when the Saver could not be guarded; else to name the
    variables after a refused save), and whether the guard covers every variable. (None,
    False) otherwise. In ``graph``, before it is finalized."""
    if on_nan == finite.IGNORE or not is_chief or not logdir or not saver:
        return None, False
    guarded = False
    check = variable_check(graph.get_collection(_GraphKeys.TRAINABLE_VARIABLES), graph)
    if check is not None:
        covered = guard_saver(saver, graph, check.names)
        # Variables the guard does not cover (partitioned ones) need the check before.
        guarded = set(check.names) <= covered
    if check is None:
        logger.warning("The graph is finalized and holds no finiteness check of its "
                       "variables: only the scalar summaries are checked before a "
                       "checkpoint. Create the Supervisor before finalizing the graph.")
    return check, guarded


class Saving:
    """The checkpoints of one Supervisor: ``save`` (from any thread), ``save_if_moved`` (the
    checkpoint service's and the final one), ``roll_back`` (the training thread's, between two
    steps).

    ``save_path``: the checkpoint prefix, or None (no checkpoints); ``timer``: when to save,
    its ``last_step`` the step the newest checkpoint holds; ``check`` and ``guarded``: from
    ``make_finite_check``; ``request_stop``: the Coordinator's.
    """

    def __init__(self, saver, graph, logdir: Optional[str], save_path: Optional[str],
                 timer: Timer, policy: finite.Policy, scalars: ScalarWatch,
                 check: Optional[finite.VariableCheck], guarded: bool, global_step,
                 hub: events.EventHub, request_stop: Callable):
        self._saver, self._graph = saver, graph
        self._logdir, self._save_path = logdir, save_path
        # One Saver.save (or restore) at a time; guards the timer's last_step, and the
        # policy's pending rollback and count (read anywhere).
        self.lock = threading.Lock()
        self._timer = timer
        self._policy, self._scalars = policy, scalars
        self._check, self._guarded = check, guarded
        self._global_step = global_step
        self._hub, self._request_stop = hub, request_stop

    def _read_step(self, sess) -> Optional[int]:
        if self._global_step is None:
            return None
        return services.read_step(sess, self._global_step)

    def new_session(self) -> None:
        """A session starts: no rollback made, none pending."""
        with self.lock:
            self._policy.reset()

    def session_ready(self, restored_step: Optional[int]) -> None:
        """The session is ready, restored at ``restored_step`` (None: initialized)."""
        with self.lock:
            self._timer.last_step = restored_step

    def save(self, sess, writer, *, final=False) -> Optional[str]:
        """``Supervisor.save_checkpoint`` of ``sess`` (or None: nothing saved), the checkpoint
        logged in ``writer`` (or None); ``final``: the checkpoint of a stop (no rollback: it
        ends). Nothing is saved while a rollback is pending (the model is known to be bad)."""
        if not self._saver or not self._save_path or sess is None:
            return None
        with self.lock:
            if self._policy.pending is not None and not final:
                return None  # the state is bad: the training thread rolls back first
            step = self._read_step(sess)
            self._check_finite(sess, step, final=final)
            if self._policy.pending is not None:
                return None
            start = time.time()
            logger.info("Saving checkpoint to path %s", self._save_path)
            # Eager mode is per thread: a service thread of a TF2 program must enter the graph,
            # or the Saver takes the eager path and refuses graph variables.
            try:
                with self._graph.as_default():
                    path = self._saver.save(sess, self._save_path, global_step=step)
            except tf.errors.InvalidArgumentError as e:
                if not finite.is_guard_failure(e):
                    raise CheckpointWriteError(self._write_failure(step, e)) from e
                # The guard refused what the save would have written: nothing is under the
                # checkpoint's name (a sharded Saver's parts are in a temporary directory).
                finite.remove_refused_save(self._save_path if step is None
                                           else f"{self._save_path}-{step}")
                # The step now: the values refused were read after the step read above.
                step = self._read_step(sess)
                variables = self._check.run(sess) if self._check is not None else []
                self._on_non_finite(step, variables, self._scalars.non_finite(),
                                    final=final, other_saved=True)
                return None
            except tf.errors.OpError as e:
                raise CheckpointWriteError(self._write_failure(step, e)) from e
            seconds = time.time() - start
            self._timer.last_step = step
            # What retention keeps now, newest first (the Saver knows; no file is re-read).
            kept = tuple(reversed(self._saver.last_checkpoints))
        if writer and step is not None:
            writer.add_session_log(
                _SessionLog(status=_SessionLog.CHECKPOINT, checkpoint_path=self._save_path),
                step)
        self._hub.emit(events.CheckpointSaved, step, path, start + seconds, seconds, kept)
        return path

    def _check_finite(self, sess, step, *, final: bool) -> None:
        """With ``lock`` held, before a save: returns when the newest scalar summaries
        are finite, and the variables (when the Saver is not guarded: see
        ``make_finite_check``), or with ``on_nan="ignore"``. Otherwise ``_on_non_finite``."""
        if not self._policy.checks:
            return
        summaries = self._scalars.non_finite()
        variables = []
        if self._check is not None and (summaries or not self._guarded):
            variables = self._check.run(sess)  # guarded: only to name them
        if variables or summaries:
            self._on_non_finite(step, variables, summaries, final=final)

    def _on_non_finite(self, step, variables, summaries, *, final: bool,
                       other_saved: bool = False) -> None:
        """With ``lock`` held, nothing saved: the policy schedules a rollback, or raises
        NonFiniteError, which stops the run."""
        problem = finite.describe_problem(variables, summaries, other_saved and not variables)
        try:
            self._policy.refused(step, problem, self._newest_checkpoint(), final=final)
        except finite.NonFiniteError:
            if not final:
                self._request_stop(sys.exc_info())  # the run fails with it
            raise

    def _newest_checkpoint(self) -> Optional[str]:
        """The newest checkpoint of this logdir (every one written was finite), or None."""
        newest = (self._saver.last_checkpoints or [None])[-1]
        return newest or tf.train.latest_checkpoint(self._logdir)

    def roll_back(self, sess, writer) -> bool:
        """Makes the pending rollback in ``sess``, marked in ``writer`` (or None); in the
        training thread, between two steps. True if it rolled back."""
        with self.lock:
            rollback = self._policy.take()
            if rollback is None:
                return False
            try:
                with self._graph.as_default():
                    self._saver.restore(sess, rollback.path)
            except tf.errors.OpError as e:
                try:
                    raise self._policy.rollback_failed(rollback, e) from e
                except finite.NonFiniteError:
                    self._request_stop(sys.exc_info())
                return False
            restored = self._read_step(sess)
            self._timer.last_step = restored
            self._scalars.clear()
            self._policy.rolled_back(rollback, restored, writer, self._hub)
        return True

    def _write_failure(self, step, error) -> str:
        newest = self._newest_checkpoint()
        where = f"{self._save_path}-{step}" if step is not None else self._save_path
        return write_failure(self._logdir, error, f"the checkpoint {where}", newest)

    def save_if_moved(self, sess, writer, *, final=False):
        """Saves unless the newest checkpoint already holds the current step."""
        step = self._read_step(sess)
        with self.lock:
            if not self._timer.moved(step):
                return
        self.save(sess, writer, final=final)
