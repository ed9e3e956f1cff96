"""Writing an eager run's checkpoints: ``CheckpointWriter`` writes them one at a time (from a
``snapshot.Snapshot`` in a writer thread, or synchronously), keeps the ``checkpoint`` state
file and the retention of a ``tf.train.CheckpointManager``, and never puts a model that is not
finite under a checkpoint's name (``Refusal``, the verdict of its check).

What is written is a plain ``tf.train.Checkpoint`` of the tracked objects, named
``<logdir>/<basename>-<step>``, listed in ``<logdir>/checkpoint``: readable without this package
by ``tf.train.Checkpoint(**same_names).restore(tf.train.latest_checkpoint(logdir))``.
"""
import collections
import contextlib
import glob
import logging
import os
import statistics
import sys
import threading
import time
from typing import Callable, Dict, List, Optional

import tensorflow as tf

from .. import capabilities, checkpoints, compat, finite
from ..checkpoints import CheckpointWriteError
from .snapshot import Snapshot

logger = logging.getLogger("jupyter_supervisor")

# A write still running after max(MIN_STALL_SECS, STALL_FACTOR x the time its bytes take at the
# recent writes' speed) makes no progress: a file system that stopped answering (a network
# disk). Read at each check (tests lower it).
MIN_STALL_SECS = 60.0
STALL_FACTOR = 10.0
# The speed assumed before a write of the run ended: a slow network disk's.
ASSUMED_BYTES_PER_SEC = 10e6


class Refusal:
    """The verdict of the finiteness check of the save of ``step``: once decided,
    ``variables`` names the checked variables that held a NaN or an infinity ([] when all
    were finite), or ``error`` holds what the check raised.

    The writer thread learns it from its write (``written``: the write passed, or its check
    refused it).
    The training thread takes it at its first step boundary after the write ended; when it
    needs it before (its next save, the session's end), it does not wait for the write: it
    checks the same copies itself with ``check`` (``VariableCheck.run``, every core, a few
    milliseconds), which gives the same answer. ``check`` also names the variables
    of a refused write.
    """

    def __init__(self, step: int, check: finite.VariableCheck):
        self.step = step
        self.variables: List[str] = []
        self.error: Optional[BaseException] = None
        self._check = check
        self._written: Optional[bool] = None   # set by the writer: passed (True) or refused
        self._decided = False
        self._lock = threading.Lock()

    @property
    def known(self) -> bool:
        """True once the write passed or was refused, or the verdict was decided: then
        ``decide()`` checks only to name what a refused write held."""
        return self._written is not None or self._decided

    def written(self, passed: bool) -> None:
        """The writer thread: the guarded write passed (True) or was refused (False)."""
        self._written = passed

    def decide(self) -> "Refusal":
        """Decides the verdict (once, in whichever thread asks first); returns self."""
        with self._lock:
            if self._decided:
                return self
            self._decided = True
            # The check holds the copies it checks: decided, it lets them go (the next
            # copy is then made without this one in memory).
            check, self._check = self._check, None
            if self._written:
                return self
            try:
                self.variables = check.run()
            except BaseException as e:  # pylint: disable=broad-except
                self.error = e
                return self
            if self._written is False and not self.variables:
                self.error = RuntimeError(
                    f"The checkpoint of step {self.step} was refused as not finite, but no "
                    "checked variable holds a NaN or an infinity.")
        return self

    @property
    def refused(self) -> bool:
        """After ``decide()``: the save must not count (not finite, or the check failed)."""
        return bool(self.variables) or self.error is not None


class WriteStalledError(CheckpointWriteError):
    """A save that would wait for a write in flight that is stalled: nothing was saved."""


class PendingSave:
    """A checkpoint that ``CheckpointWriter.save`` started: its ``step`` and ``path``, the
    ``verdict`` of the check of its variables (a ``Refusal``; None when nothing is checked),
    and its write, in a writer thread (``thread``) or done before ``save`` returned.
    ``checked_before``: there were no copies to check, so the live variables were checked
    before the write: the verdict is decided, and a refused save wrote nothing."""

    def __init__(self, step: int, path: str, verdict: Optional[Refusal] = None,
                 checked_before: bool = False):
        self.step = step
        self.path = path
        self.verdict = verdict
        self.checked_before = checked_before
        self.thread: Optional[threading.Thread] = None
        self.started = time.monotonic()   # when its write started
        self.started_wall = time.time()

    @property
    def writing(self) -> bool:
        """True while its write runs."""
        thread = self.thread
        return thread is not None and thread.is_alive()

    @property
    def known(self) -> bool:
        """True when its verdict is known without a check in the calling thread: decided
        before the write, or learnt by the write (which ended)."""
        return self.verdict is not None and (self.verdict.known or not self.writing)


class CheckpointWriter:
    """Writes ``<logdir>/<basename>-<step>`` checkpoints of ``items``, one at a time.

    ``save(step)`` returns once the snapshot is taken (``async_save``) or the files are written;
    then, in order: the files, the state file (the newest first in TensorFlow's format), the
    retention sweep (``keep`` newest, and ``best``), and ``on_saved(step, path, wall_time,
    seconds)``. A write that fails is reported to ``on_error(CheckpointWriteError)`` and raised
    by the next ``save()`` or ``wait()``; the checkpoints written before are not touched.

    ``owners``: the objects whose lifetime bounds the reuse of the snapshot's traced functions
    after ``close()`` (``Snapshot``). ``checked``: tf.Variables (the trainable ones) that must
    be finite for a save to count (``finite.VariableCheck``). With a snapshot, the writer
    thread checks the snapshot's copies before it writes them (``Snapshot.write_function``);
    the training thread does not wait for it. Without a snapshot, the calling thread checks
    the variables before writing. Either way a refused save writes nothing and changes neither
    the state file nor the retention; ``verdict()`` says which variables were not finite.
    """

    def __init__(self, items: Dict[str, object], logdir: str, basename: str, keep: int,
                 existing: List[str], *, async_save: bool = True, checked=(), owners=None,
                 on_saved: Callable = lambda *a: None, on_error: Callable = lambda e: None):
        self._items = items
        self._logdir = logdir
        self._prefix = os.path.join(logdir, basename)
        self._keep = keep
        self._kept = list(reversed(existing))  # oldest first
        # Where this TensorFlow lacks what a snapshot reads, the run said so at its start.
        self._async = async_save and capabilities.holds("background save")
        self._snapshot = Snapshot(items, owners) if self._async else None
        self._sync_writer = None
        self._on_saved = on_saved
        self._on_error = on_error
        self._checked = list(checked)
        self._newest: Optional[PendingSave] = None    # the newest save (its write)
        self._pending: Optional[PendingSave] = None   # the newest checked save, until verdict()
        self._error: Optional[BaseException] = None
        self._closed = False
        # A write left running by close() (stalled): its end, if ever, records nothing.
        self._abandoned = False
        self._bytes: Optional[int] = None     # a checkpoint's size: the items', then written
        self._speeds: "collections.deque[float]" = collections.deque(maxlen=5)  # bytes/s
        self.sync_reason: Optional[str] = None   # why async saving was not possible
        # -- keep-best (issue 44): the checkpoint retention keeps beside the newest ``keep``,
        # listed in the state file like them. A save with ``best=True`` takes its place once
        # the save is listed; until then the one before stays kept.
        self.best: Optional[str] = None

    @property
    def kept(self) -> List[str]:
        """The checkpoints kept, oldest first."""
        return list(self._kept)

    @property
    def checks(self) -> bool:
        """True when saves check variables (``checked`` was given)."""
        return bool(self._checked)

    def non_finite_now(self) -> List[str]:
        """The names of the checked variables that are not finite now (the live ones)."""
        return self._live_check().run() if self._checked else []

    def _live_check(self) -> finite.VariableCheck:
        """The traced check of the live variables (``VariableCheck.eager``: cached per list of
        variables, traced at its first run)."""
        return finite.VariableCheck.eager(self._checked)

    @property
    def verdict_pending(self) -> bool:
        """True from a checked ``save()`` until ``verdict()`` took its verdict."""
        return self._pending is not None

    @property
    def verdict_known(self) -> bool:
        """True when a verdict is pending and known (``PendingSave.known``): then
        ``verdict()`` checks the copies itself only to name what a refused write held (or after
        a write that failed). While the write runs, ``verdict()`` would run the fused check,
        on every core: the training thread takes the verdict before then only when it must."""
        pending = self._pending
        return pending is not None and pending.known

    def verdict(self) -> Optional[Refusal]:
        """The verdict of the newest checked save, and only once; None when there is none to
        take. Raises what the check raised. Does not wait for the write: when it has not ended,
        the calling thread checks the same copies itself (its first run traces the check,
        which takes longer the more variables there are)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        verdict = pending.verdict.decide()
        if verdict.error is not None:
            raise verdict.error
        return verdict

    def save(self, step: int, final: bool = False, best: bool = False,
             waited: bool = False) -> "PendingSave":
        """Starts the checkpoint of ``step`` (see the class); returns it. The verdict of the
        save before must have been taken. ``final``: the last save of the session, which
        the session's end waits for: when the snapshot's functions are not traced for these
        objects yet (a short cell, whose only checkpoint is this one), it is written here, from
        the variables themselves, checked before op by op: tracing the snapshot's copy and its
        check would cost a small model's cell many times the write
        (bench/bench_cell_cost.py). A periodic write yields the cores to training
        (``yield_to_training``); a final one (a fit's or the session's end), or one the caller
        waits for (``waited``: a save asked for now), does not: training waits for it or has
        ended, and what else runs should not slow it. A periodic write still running when
        one of those waits for it keeps yielding (an unprivileged thread cannot leave
        ``SCHED_IDLE``).

        Every save waits for the write before, the final one too: its copy is then made in
        the memory of the copy before (``Snapshot.copy``), and host memory holds one copy of
        the variables. It waits at most until that write counts as stalled (``stall_secs``):
        then it raises WriteStalledError, and nothing is saved."""
        # -- keep-best: with ``best``, this checkpoint is the ``best`` once it is listed.
        if self._pending is not None:
            raise RuntimeError("save(): the verdict of the save before was not taken")
        if self._closed:
            raise RuntimeError("save(): the writer is closed")
        if not self.wait(self.stall_left() if self.writing else None):
            raise WriteStalledError(f"The checkpoint of step {step} was not taken: the write "
                                    f"before, of step {self._newest.step}, is stalled.")
        if self._bytes is None:
            self._bytes = _size_of(self._items)
        path = f"{self._prefix}-{step}"
        start = time.time()
        direct = final and self._snapshot is not None and not self._snapshot.is_traced()
        snapped = self._snapshot is not None and not direct and self._snapshot.copy()
        if self._snapshot is not None and not snapped and not self.sync_reason and \
                self._snapshot.why_not:
            self.sync_reason = ("Checkpoints are written synchronously (the training thread "
                                "waits for the files): " + self._snapshot.why_not)
            logger.info(self.sync_reason)
        write, check = (self._snapshot.write_function(self._checked) if snapped
                        else (None, None))
        before = bool(self._checked) and not (check and check.names)
        if before:  # no copies to check: the live variables, before the write
            verdict = Refusal(step, finite.VariableCheck.untraced(self._checked) if direct
                              else self._live_check()).decide()
        else:
            verdict = Refusal(step, check) if self._checked else None
        pending = self._newest = PendingSave(step, path, verdict, checked_before=before)
        self._pending = pending if verdict is not None else None
        if before and verdict.refused:
            return pending
        if not snapped:
            if self._sync_writer is None:
                self._sync_writer = tf.train.Checkpoint(**self._items)
                _ = self._sync_writer.save_counter
            self._write(self._sync_writer.write, path, step, start, best=best)
            self.wait()
            return pending
        pending.thread = threading.Thread(
            target=self._write_behind, name="jupyter_supervisor-checkpoint",
            args=(not (final or waited), write, path, step, start, verdict, best), daemon=True)
        pending.thread.start()
        return pending

    @property
    def writing(self) -> bool:
        """True while the write of the newest save runs (its thread is alive)."""
        newest = self._newest
        return newest is not None and newest.writing

    @property
    def threads(self) -> List[threading.Thread]:
        """The writer thread of the write in flight ([] when none runs)."""
        newest = self._newest
        thread = newest.thread if newest is not None else None
        return [thread] if thread is not None and thread.is_alive() else []

    def stall_secs(self) -> float:
        """How long a write may run before it counts as stalled: max(``MIN_STALL_SECS``,
        ``STALL_FACTOR`` x a checkpoint's bytes over the median speed of the last writes)."""
        speed = statistics.median(self._speeds) if self._speeds else ASSUMED_BYTES_PER_SEC
        return max(MIN_STALL_SECS, STALL_FACTOR * (self._bytes or 0) / max(speed, 1.0))

    @property
    def in_flight(self) -> Optional[PendingSave]:
        """The save whose write runs in the writer thread now, or None."""
        newest = self._newest
        return newest if newest is not None and newest.writing else None

    def stalled(self) -> Optional[PendingSave]:
        """The save whose write runs and has counted as stalled (``stall_secs``), or None."""
        pending = self.in_flight
        if pending is None or time.monotonic() - pending.started < self.stall_secs():
            return None
        return pending

    def stall_left(self) -> float:
        """Seconds until the write in flight counts as stalled (0: it does; none runs: 0)."""
        pending = self.in_flight
        if pending is None:
            return 0.0
        return max(0.0, pending.started + self.stall_secs() - time.monotonic())

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits for the write in progress; raises its CheckpointWriteError. False on timeout."""
        newest = self._newest
        if newest is not None and newest.thread is not None:
            newest.thread.join(timeout)
            if newest.thread.is_alive():
                return False
        error, self._error = self._error, None
        if error is not None:
            raise error
        return True

    def close(self, timeout: Optional[float] = None) -> bool:
        """After the last save: waits for its write (at most ``timeout``: False when it runs
        on), raising its CheckpointWriteError; then the snapshot's traced functions serve the
        next writer of the same objects in this process (``Snapshot.release``; not while a
        write runs), and the writer lets go of the tracked objects: it saves no more.
        Again: True, nothing more."""
        if self._closed:
            return True
        ended = False
        try:
            ended = self.wait(timeout)
        finally:
            self._closed = True
            self._abandoned = not ended and self.writing
            if self._snapshot is not None and not self.writing:
                self._snapshot.release()
            self._items, self._snapshot, self._sync_writer, self._checked = {}, None, None, []
        return ended

    def _write_behind(self, yielding: bool, *args) -> None:
        """The writer thread: ``_write``, yielding the cores to training
        (``yield_to_training``) when ``yielding``."""
        if yielding:
            yield_to_training()
        self._write(*args)

    def _write(self, write: Callable[[str], object], path: str, step: int, start: float,
               verdict: Optional[Refusal] = None, best: bool = False) -> None:
        """The writer thread: the files (``write``, refused when ``verdict`` is given and the
        copies are not finite), then the state file and the retention."""
        try:
            try:
                began = time.monotonic()
                write(path)
                took = time.monotonic() - began
            except (tf.errors.OpError, OSError) as e:
                if self._abandoned:
                    return   # the session ended without it: its logdir may be another's now
                refused = verdict is not None and finite.is_guard_failure(e)
                # A checkpoint kept under this name (a step saved again) keeps its files.
                _remove_checkpoint(path, partial_only=refused or path in self._kept)
                if refused:
                    verdict.written(False)  # the state file and the retention stay
                    return
                raise CheckpointWriteError(self._failure(path, e)) from e
            if verdict is not None:
                verdict.written(True)
            if self._abandoned:
                logger.warning("The stalled write of %s ended after its session; it stays "
                               "unlisted.", path)
                return
            self._record(path, best)
            self._measure(path, took)
        except BaseException as e:  # pylint: disable=broad-except
            self._error = e
            self._on_error(e)
            return
        seconds = time.time() - start
        self._on_saved(step, path, start + seconds, seconds)

    def _measure(self, path: str, seconds: float) -> None:
        """The size of the checkpoint just written, and its write's speed (``stall_secs``)."""
        try:
            size = sum(tf.io.gfile.stat(name).length for name in _checkpoint_files(path))
        except (tf.errors.OpError, OSError):
            return
        if size:
            self._bytes = size
            self._speeds.append(size / max(seconds, 1e-3))

    def _record(self, path: str, best: bool = False) -> None:
        """The state file names ``path`` newest (``best``: the best from now), then the
        retention deletes the oldest but the best."""
        if path in self._kept:
            self._kept.remove(path)
        self._kept.append(path)
        if best:
            self.best = path
        self._write_state()
        retired = [old for old in self._kept[:-self._keep] if old != self.best]
        for old in retired:
            for name in _checkpoint_files(old):
                with contextlib.suppress(tf.errors.NotFoundError):
                    tf.io.gfile.remove(name)
        self._kept = [kept for kept in self._kept if kept not in retired]
        self._write_state()

    def _write_state(self) -> None:
        try:
            compat.update_checkpoint_state(self._logdir, self._kept[-1], self._kept)
        except (tf.errors.OpError, OSError) as e:
            raise CheckpointWriteError(self._failure(self._kept[-1], e, state=True)) from e

    def _failure(self, path: str, error, state: bool = False) -> str:
        older = [p for p in self._kept if p != path]
        what = ("the checkpoint state file of" if state else "the checkpoint") + f" {path}"
        return checkpoints.write_failure(self._logdir, error, what,
                                         older[-1] if older else None)


def yield_to_training() -> None:
    """Puts the calling thread under Linux's ``SCHED_IDLE`` policy (that thread alone;
    elsewhere nothing): it runs when training leaves a core (its Python between steps, its
    input, the waits of its parallel kernels), and a training thread that wakes takes the core
    back at once. At 150 MB saved every second on 2 cores (bench/bench_save_interval.py's
    model, medians of 8 rounds) a loop trained at 0.81 of bare with it against 0.78 at
    niceness 19 (the lowest priority a niceness gives), and a save cost 258 ms of CPU against
    469 ms; at 400 MB 0.69 against 0.65, 696 against 861 ms. A write held back so long that it
    outlasts the interval delays the next save (``Timer.ended``); training waits for it only
    when it outlasts two (then the cores are left to it)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError):  # a priority is a preference: the write goes on
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))


def _size_of(items: Dict[str, object]) -> int:
    """The bytes of the variables of ``items`` (variables, and what lists its ``variables``),
    before a write of them measured it; 0 when that cannot be told."""
    seen, total = set(), 0
    try:
        for value in items.values():
            variables = [value] if isinstance(value, tf.Variable) else list(
                getattr(value, "variables", None) or ())
            for variable in variables:
                if id(variable) not in seen:
                    seen.add(id(variable))
                    count = 1
                    for dim in tuple(variable.shape):
                        count *= int(dim or 0)
                    total += count * tf.as_dtype(variable.dtype).size
    except (TypeError, ValueError, AttributeError):
        return total
    return total


def _checkpoint_files(path: str) -> List[str]:
    return tf.io.gfile.glob(glob.escape(path) + ".*")


def _remove_checkpoint(path: str, partial_only: bool = False) -> None:
    """Deletes TensorFlow's partial files of the checkpoint ``path`` (``remove_refused_save``)
    and, unless ``partial_only``, the checkpoint's own files."""
    finite.remove_refused_save(path)
    if partial_only:
        return
    for name in _checkpoint_files(path):
        with contextlib.suppress(tf.errors.NotFoundError):
            tf.io.gfile.remove(name)
