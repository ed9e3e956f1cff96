"""The checkpoints of a logdir, shared by both backends: which exist (newest first), with a
fallback to the checkpoint files when the ``checkpoint`` state file is damaged; the restore of
the newest readable one, falling back past unreadable ones (and, when no listed one can be read,
to a complete one the state file does not list), with its messages; the sweep of what saves cut
short left (partial writes at a run's start; the complete saves the state file never listed,
once a listed checkpoint restored); and the errors both backends raise about checkpoints.

TensorFlow 1 (Saver) and TensorFlow 2 (CheckpointManager) write the same state file and the same
``<basename>-<step>`` names, so one listing serves both. A backend gives only what differs: how
it restores one path (``restore_newest``'s ``restore``, with the errors that mean "unreadable")
and how its saves are named (the basename).
"""
import contextlib
import glob
import logging
import os
import re
import shutil
from typing import Callable, List, Optional, Set, Tuple, TypeVar

import tensorflow as tf

from . import compat, names
from ._validate import invalid

logger = logging.getLogger("jupyter_supervisor")

# TensorFlow's name of the state file that lists a logdir's checkpoints.
STATE_FILE = "checkpoint"

# The files of one checkpoint <basename>-<step>: data shards, index, and a Saver's meta graph.
_FILE_SUFFIX = r"\.(index|meta|data-\d+-of-\d+)"

_Restored = TypeVar("_Restored")


class CheckpointMismatchError(tf.errors.NotFoundError):
    """A checkpoint lacks variables of the graph (the model changed since it was saved)."""

    def __init__(self, message: str):
        super().__init__(None, None, message)


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk, permissions); earlier ones are intact."""


# What TensorFlow appends to the message of an op that failed when run eagerly.
_EAGER_OP = re.compile(r"\s*\[Op:[^\]]*\](\s*name:.*)?$")


def describe_error(error) -> str:
    """The line of an error's message that says what went wrong: for a TensorFlow error not
    "Graph execution error:", node names, stack frames or hints."""
    text = (getattr(error, "message", None) or str(error)).strip()
    noise = ("Graph execution error", "Detected at node", "Node:", "Original stack trace",
             "[[", "File ", "Hint:")
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line[:1].isspace() and not line.startswith(noise)]
    line = lines[-1] if lines else (text.splitlines()[0] if text else type(error).__name__)
    return _EAGER_OP.sub("", line)  # an op run eagerly: "... [Op:SaveV2] name: "


def write_failure(logdir: str, error, what: str, newest: Optional[str]) -> str:
    """The message of a ``CheckpointWriteError``: ``error`` (what the write raised) said as
    the OS reason, ``what`` failed ("the checkpoint <path>", or its state file), ``newest``:
    the newest intact checkpoint (None: there is none), and what to do."""
    # TensorFlow names its temporary file first: "<path>.tempstate...; No space left..."
    reason = describe_error(error).rsplit("; ", 1)[-1]
    todo = ("then resume from the newest checkpoint (re-run the cell, or `%supervise resume`; "
            "in a script, a new session).")
    deleted = bool(newest) and not exists(newest)
    if deleted:
        # The logdir, or its checkpoints, were deleted meanwhile: only one still there is named.
        basename = names.CHECKPOINT_STEP.sub("", os.path.basename(newest))
        newest = next(iter(checkpoint_paths(logdir, basename)), None)
    if newest:
        safe = f"The newest intact checkpoint is {newest}; nothing saved before was changed."
    elif deleted:
        safe = f"The checkpoints written before are no longer in {logdir}."
        todo = "then re-run the cell: it starts afresh."
    else:
        safe = "No checkpoint was written before this one."
    return (f"Could not write a checkpoint to {logdir}: {reason}.\n"
            f"Writing {what} failed and the run stopped. {safe} Fix the cause (free disk "
            f"space, permissions), {todo}")


def exists(path: str) -> bool:
    """True while the checkpoint ``path`` has its files (a message names only those: a logdir
    may be deleted under a live run)."""
    try:
        return tf.io.gfile.exists(path + ".index") or tf.io.gfile.exists(path)
    except tf.errors.OpError:  # a remote file system that cannot be reached
        return False


def checkpoint_paths(logdir: str, checkpoint_basename: str = "model.ckpt") -> List[str]:
    """The checkpoints of ``logdir`` whose files exist, newest first: those its checkpoint state
    file lists or, when that file is missing or cannot be read, the
    ``<checkpoint_basename>-<step>`` files found (highest step first), which is what a restore
    uses then."""
    return checkpoint_listing(logdir, checkpoint_basename)[0]


def checkpoint_listing(logdir: str, basename: str) -> Tuple[List[str], List[str], bool]:
    """(existing checkpoints newest first, those the state file lists, whether the state file
    is missing or cannot be read while checkpoints may sit beside it).

    TensorFlow ignores a state file it cannot parse or does not find, and a run would then
    start afresh and overwrite the checkpoints of the same steps: so those are looked for by
    their file names (a state file deleted, or not copied with the checkpoints; a first save
    cut before it wrote the state file).
    """
    try:
        state = tf.train.get_checkpoint_state(logdir)
    except ValueError:  # parsed, but names no checkpoint (an empty file)
        state = None
    if state is None or not state.model_checkpoint_path:
        if not tf.io.gfile.exists(os.path.join(logdir, STATE_FILE)):
            found = _checkpoint_files(logdir, basename) if tf.io.gfile.isdir(logdir) else []
            return found, [], bool(found)
        return _checkpoint_files(logdir, basename), [], True
    listed = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path not in listed:
        listed.append(state.model_checkpoint_path)
    existing = [p for p in reversed(listed)
                if tf.io.gfile.exists(p + ".index") or tf.io.gfile.exists(p)]
    return existing, listed, False


def _checkpoint_files(logdir: str, basename: str) -> List[str]:
    """The ``<basename>-<step>`` (and step-less ``<basename>``) checkpoints in ``logdir``,
    highest step first."""
    found = []
    for name in tf.io.gfile.listdir(logdir):
        if not (name.startswith(basename) and name.endswith(".index")):
            continue
        suffix = name[len(basename):-len(".index")]
        if suffix == "":
            found.append((-1, os.path.join(logdir, basename)))
        elif suffix[:1] == "-" and suffix[1:].isdigit():
            found.append((int(suffix[1:]), os.path.join(logdir, basename + suffix)))
    return [path for _, path in sorted(found, reverse=True)]


def restore_candidates(logdir: str, basename: str) -> List[str]:
    """The checkpoints of ``logdir`` to try restoring, newest first (``checkpoint_listing``).
    A missing or damaged state file is warned about (the checkpoint files are used instead);
    raises RuntimeError, saying what to do, when it is damaged and no file is found, or when it
    lists checkpoints whose files are all gone: starting afresh would overwrite them."""
    existing, listed, damaged = checkpoint_listing(logdir, basename)
    state_file = os.path.join(logdir, STATE_FILE)
    if damaged:
        if not existing:
            raise RuntimeError(
                f"The checkpoint state file {state_file!r} cannot be read, and there is no "
                f"{basename}-<step> checkpoint next to it. Restore it from a backup, or delete "
                "it to start from scratch.")
        logger.warning("The checkpoint state file %s %s; using the checkpoint files found "
                       "instead (newest: %s). The next checkpoint rewrites it.", state_file,
                       "cannot be read" if tf.io.gfile.exists(state_file) else "is missing",
                       existing[0])
    elif listed and not existing:
        raise RuntimeError(
            f"The checkpoint state file in {logdir!r} lists checkpoints whose files are gone "
            f"({', '.join(listed)}). Restore them, or delete {state_file!r} to start from "
            "scratch.")
    return existing


def restore_newest(paths: List[str], restore: Callable[[str], _Restored],
                   unreadable: Tuple[type, ...], logdir: str, *, basename: Optional[str] = None,
                   sweep_unlisted: bool = False) -> Optional[Tuple[str, _Restored]]:
    """Calls ``restore(path)`` for the newest of ``paths`` (``restore_candidates``), then,
    while it raises one of ``unreadable`` (a damaged checkpoint: truncated or garbled files),
    for the next older one, with a warning; returns ``(path, what restore returned)``, or None
    without paths. ``CheckpointMismatchError`` (the model changed) is raised at once, never
    passed over. Raises RuntimeError when none can be read, saying what to do.

    At a run's start (``basename`` given): when none of ``paths`` can be read, the complete
    ``<basename>-<step>`` checkpoints that the state file does not list (``unlisted_saves``)
    are tried too, newest first, and the one restored is named in a warning: it is the last good
    state then. With ``sweep_unlisted`` (the logdir's lock held, a retention that lists all it
    keeps), once a listed checkpoint restored, the unlisted ones are deleted
    (``remove_unlisted_saves``); never before, and never when none listed could be read."""
    failures = []
    unlisted = unlisted_saves(logdir, basename) if basename and paths else []
    for path in paths + unlisted:
        try:
            restored = restore(path)
        except CheckpointMismatchError:
            raise
        except unreadable as e:
            failures.append((path, e))
            if path in paths[:-1]:
                logger.warning("Cannot read checkpoint %s (%s); trying the older %s.", path,
                               describe_error(e), paths[paths.index(path) + 1])
            continue
        if path in unlisted:
            logger.warning(
                "Restored from %s, a complete checkpoint that the state file does not list (a "
                "save cut short before it was listed), because none of the listed ones can be "
                "read: %s. Nothing was deleted; the next checkpoint is listed as usual.", path,
                "; ".join(f"{p}: {describe_error(e)}" for p, e in failures[:len(paths)]))
        elif failures:
            logger.warning("Restored from %s because the newer %s could not be read.", path,
                           ", ".join(p for p, _ in failures))
        if sweep_unlisted and path not in unlisted:
            remove_unlisted_saves(logdir, basename)
        return path, restored
    if failures:
        raise RuntimeError(
            f"None of the checkpoints in {logdir!r} can be read: "
            + "; ".join(f"{p}: {describe_error(e)}" for p, e in failures)
            + ". Move them away to start from scratch, or restore a backup.") from failures[0][1]
    return None


def unlisted_saves(logdir: str, basename: str) -> List[str]:
    """The complete-looking ``<basename>-<step>`` checkpoints in ``logdir`` (their index file
    is there) that its state file does not list, newest first.

    A save writes its files, then lists them in the state file, then deletes what fell out of
    retention: a process killed between the first two leaves a complete checkpoint that no
    restore uses and no retention ever deletes (a ``keep=1`` logdir was seen holding three);
    one killed between the last two leaves an older one. None when the state file is missing
    or damaged (then the files are what a restore uses anyway) or lists a checkpoint outside
    ``logdir``."""
    listed = _listed_names(logdir, basename)
    if listed is None:
        return []
    return [path for path in _checkpoint_files(logdir, basename)
            if os.path.basename(path) not in listed and names.checkpoint_step(path) is not None]


def remove_unlisted_saves(logdir: str, basename: str) -> None:
    """Deletes the files of the ``<basename>-<step>`` checkpoints in ``logdir`` that its state
    file does not list (``unlisted_saves``, and the files of a save cut short before its index
    was written), never another basename's. Only with the logdir's lock held (then no live
    writer owns them), and only once a listed checkpoint restored (``restore_newest``): when
    none of the listed ones can be read, an unlisted one is the last good state. Not for a
    Saver that keeps checkpoints it does not list (``max_to_keep=None`` or
    ``keep_checkpoint_every_n_hours``). Local file systems only (as the lock)."""
    listed = _listed_names(logdir, basename)
    if listed is None:
        return
    pattern = re.compile(re.escape(basename) + r"-\d+(?=" + _FILE_SUFFIX + "$)")
    for name in sorted(os.listdir(logdir)):
        match = pattern.match(name)
        if match is None or match.group(0) in listed:
            continue
        logger.info("Removing %s: a checkpoint file the state file does not list (a save cut "
                    "short before it listed its files).", name)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(logdir, name))


def _listed_names(logdir: str, basename: str) -> Optional[Set[str]]:
    """The names of the checkpoints ``logdir``'s state file lists; None when nothing there
    counts as unlisted: the state file is missing or damaged, none of the listed files exist,
    or it lists a checkpoint outside ``logdir``."""
    existing, listed, damaged = checkpoint_listing(logdir, basename)
    here = os.path.abspath(logdir)
    if damaged or not existing or any(os.path.dirname(os.path.abspath(p)) != here
                                      for p in listed):
        return None
    return {os.path.basename(p) for p in listed}


# tf.io.gfile's atomic writes go to "<path>.tmp<uuid4 hex>", renamed to <path> once complete.
_ATOMIC_TEMP = re.compile(r"\.tmp[0-9a-f]{32}$")


def remove_partial_saves(prefix: str) -> None:
    """Deletes what saves cut short (a killed process) left next to the ``<prefix>-<step>``
    checkpoints: TensorFlow's ``.tempstate`` files of a write in progress, and the
    ``<checkpoint>_temp`` directories where sharded saves (every TF2 save, a sharded Saver)
    write their parts before merging them under the checkpoint's name, and the
    ``<checkpoint>.meta.tmp<hex>`` files of TensorFlow's atomic writes (a Saver's meta graph).
    Only with the logdir's lock held: then no live writer owns them. Local file systems only
    (as the lock)."""
    pattern = glob.escape(prefix)
    atomic = [path for path in glob.glob(pattern + "-*.tmp*") if _ATOMIC_TEMP.search(path)]
    temp = compat.save_parts(pattern + "-*").directory + "*"
    for path in glob.glob(pattern + "-*.tempstate*") + glob.glob(temp) + atomic:
        logger.info("Removing %s, left by a checkpoint write that was cut short.", path)
        with contextlib.suppress(FileNotFoundError):
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)


def prepare_logdir(logdir: str) -> None:
    """Creates ``logdir``, or raises ValueError (the form of ``_validate``) when it is a file,
    cannot be created or is not writable. Remote file systems (``scheme://``) are left to
    TensorFlow's file layer."""
    if "://" in logdir:
        return  # a remote file system: TensorFlow's file layer reports its own errors
    if os.path.exists(logdir) and not os.path.isdir(logdir):
        raise ValueError(invalid("logdir", logdir,
                              "a directory, but it is a file: choose another path"))
    try:
        os.makedirs(logdir, exist_ok=True)
    except OSError as e:
        raise ValueError(invalid("logdir", logdir, f"a directory that can be created "
                              f"({e.strerror}): choose another path")) from None
    if not os.access(logdir, os.W_OK | os.X_OK):
        raise ValueError(invalid("logdir", logdir,
                              "a writable directory: fix its permissions or choose "
                              "another logdir"))
