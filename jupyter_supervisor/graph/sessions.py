"""How the graph Supervisor gets its session: the chief's, restored from the newest readable
checkpoint that fits the graph (falling back past damaged ones) or initialized; a non-chief's,
once the chief's model is ready, one try at a time so that a stop ends the wait."""
import contextlib
import os
import time

import tensorflow as tf

from .. import compat
from ..checkpoints import (CheckpointMismatchError, remove_partial_saves, restore_candidates,
                           restore_newest)
from .model_checks import checkpoint_misfit, mismatch_message
from .stopping import WaitCancelledError

_v1 = tf.compat.v1

# Errors a restore raises when a checkpoint's files cannot be read (truncated, corrupted, missing
# shards). Whether it fits the graph is checked before, by check_fits.
_UNREADABLE = (tf.errors.DataLossError, tf.errors.OutOfRangeError, tf.errors.NotFoundError)

# A Saver's keep_checkpoint_every_n_hours by default: it keeps no checkpoint it does not list.
_KEEP_NONE_EVERY_N_HOURS = 10000.0


def wait_for_chief(manager, graph, master, config, max_wait_secs, recovery_wait_secs, coord):
    """The SessionManager's wait for a ready model, one try at a time, so that a stop
    requested meanwhile (``coord``) ends the wait (WaitCancelledError) instead of hours of
    polling."""
    if max_wait_secs is None:
        max_wait_secs = float("inf")
    deadline = time.monotonic() + max_wait_secs
    while True:
        sess, not_ready = try_session(manager, graph, master, config)
        if sess is not None:
            return sess
        if deadline - time.monotonic() < recovery_wait_secs:
            raise tf.errors.DeadlineExceededError(
                None, None, f"Session was not ready after waiting {max_wait_secs:g} secs.")
        _v1.logging.info("Waiting for model to be ready.  %s (master %r; checking again "
                         "in %g s)", not_ready, master, recovery_wait_secs)
        if coord.wait_for_stop(recovery_wait_secs):
            raise WaitCancelledError("A stop was requested while waiting for the chief's model.")


def try_session(manager, graph, master, config):
    """One try of ``SessionManager.wait_for_session``: (session, None) when the model is
    ready, else (None, what is not ready)."""
    steps = compat.session_manager_steps(manager)
    if steps is None:
        try:  # a session manager of another kind: its own single try, without details
            return manager.wait_for_session(master, config=config, max_wait_secs=0), None
        except tf.errors.DeadlineExceededError:
            return None, "Not ready."
    sess = _v1.Session(master, graph=graph, config=config)
    try_local_init, model_ready = steps
    local_ready, not_ready = try_local_init(sess)
    if local_ready:
        ready, not_ready = model_ready(sess)
        if ready:
            return sess, None
    with contextlib.suppress(Exception):
        sess.close()
    return None, f"Ready_for_local_init_op: {not_ready}" if not local_ready else not_ready


def lists_all(saver) -> bool:
    """Whether ``saver`` lists every checkpoint it keeps: one that keeps unlisted ones on
    purpose (max_to_keep=None, or keep_checkpoint_every_n_hours) keeps them at a start."""
    saver_def = saver.saver_def if saver else None
    return saver_def is not None and saver_def.max_to_keep > 0 and \
        saver_def.keep_checkpoint_every_n_hours >= _KEEP_NONE_EVERY_N_HOURS


def prepare_chief(prepare, graph, saver, logdir, save_path, wait_for_checkpoint, sweeps):
    """(session, the checkpoint it was restored from or None) of the chief: ``prepare(**where)``
    is the SessionManager's ``prepare_session``; ``sweeps``: what a killed save left may be
    removed (the logdir's lock is held)."""
    basename = os.path.basename(save_path) if logdir else None
    if sweeps:
        remove_partial_saves(save_path)
    candidates = restore_candidates(logdir, basename) if saver and logdir else []
    if not candidates:
        sess = prepare(checkpoint_dir=logdir)
        restored = tf.train.latest_checkpoint(logdir) if (
            wait_for_checkpoint and saver and logdir) else None
        return sess, restored

    def restore(path):
        check_fits(path, graph, saver)
        return prepare(checkpoint_filename_with_path=path)

    path, sess = restore_newest(candidates, restore, _UNREADABLE, logdir, basename=basename,
                                sweep_unlisted=sweeps and lists_all(saver))
    # Oldest first, existing only, so that retention goes on deleting the old ones.
    with compat.deprecations_silenced():  # it uses a deprecated TF helper internally
        saver.recover_last_checkpoints(list(reversed(candidates)))
    return sess, path


def check_fits(path, graph, saver):
    """Raises CheckpointMismatchError when ``path`` does not fit the variables of ``graph``.

    Checked before restoring because a resource variable silently takes the shape it is
    restored with. An unreadable checkpoint passes here; its restore fails and falls back.
    """
    problem = checkpoint_misfit(path, graph, saver)
    if problem is None:
        return
    raise CheckpointMismatchError(mismatch_message(
        f"The checkpoint {path}", path, problem, "logdir",
        "pass an init_fn that restores the old variables"))
