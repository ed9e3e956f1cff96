"""A checkpoint write that makes no progress: ``WriteStall``.

A write to a file system that stopped answering (a network disk) blocks its writer thread
without an error, for hours. The writer counts a write as stalled once it has run for far
longer than its size takes at the recent writes' speed (``CheckpointWriter.stall_secs``, at
least a minute). Then:

- the panel says so once (a ``WriteStalled`` record: "checkpoint write to ... stalled for
  3 min"), and training goes on: a save due meanwhile is skipped rather than waited for (it
  would hang the training thread with the write);
- a session's end waits for it at most ``stop_grace_secs`` (a write not stalled yet: until it
  is, then the grace), then gives up: the session ends
  with an error that says which step is not on disk and that the newest complete checkpoint
  is older, and the event file's SessionLog.STOP says the same, so the next session's start
  says it too. The write left running records nothing if it ever ends (``CheckpointWriter``:
  the logdir may be another session's by then), and nothing complete is deleted.
"""
import logging
import os
import time
from typing import Optional

from ..checkpoints import CheckpointWriteError
from .writer import CheckpointWriter, PendingSave, WriteStalledError

logger = logging.getLogger("jupyter_supervisor")


class WriteStall:
    """The stalled writes of one session: ``reporter`` (its records) and ``grace_secs``
    (``stop_grace_secs``). ``unwritten``: what a session's end left off the disk, as the
    event file's SessionLog.STOP says it (None: nothing)."""

    def __init__(self, reporter, grace_secs: float):
        self._reporter = reporter
        self._grace_secs = grace_secs
        self._reported: Optional[PendingSave] = None   # the stalled write already said
        self.unwritten: Optional[str] = None

    def final_wait(self, writer: CheckpointWriter) -> float:
        """How long a session's end waits for the write in flight: until it counts as
        stalled, and then the grace at most (a slow write that progresses is waited for)."""
        return 0.0 if self.unwritten is not None else max(self._grace_secs,
                                                          writer.stall_left())

    def ended(self, writer: CheckpointWriter, final: bool, step: int) -> bool:
        """Before a save (the save lock held): waits for the write in flight, at most until it
        counts as stalled (a final save, at ``step``: ``final_wait``). True when none runs
        (any more). Else it is reported, and a final save gives up on it (False); any other
        save raises WriteStalledError. Raises the write's own error as ``writer.wait``."""
        if self.unwritten is not None:
            return False
        pending = writer.in_flight
        if pending is None or writer.wait(self.final_wait(writer) if final
                                          else writer.stall_left()):
            return True
        self.report(writer, pending)
        if not final:
            raise WriteStalledError(f"The write of step {pending.step} is stalled.")
        self.give_up(writer, pending, step)
        return False

    def report(self, writer: CheckpointWriter, pending: Optional[PendingSave] = None) -> None:
        """Says once, in the panel and the log, that the write in flight is stalled
        (``pending``: it is, or it outlasted a final save's grace)."""
        pending = pending or writer.stalled()
        if pending is None or pending is self._reported:
            return
        self._reported = pending
        logger.warning("The checkpoint write to %s has not ended after %.0f s; training goes "
                       "on without new checkpoints until it does.", pending.path,
                       time.monotonic() - pending.started)
        self._reporter.write_stalled(pending.step, pending.path, pending.started_wall)

    def give_up(self, writer: CheckpointWriter, pending: Optional[PendingSave],
                step: int) -> None:
        """A session's end at ``step`` leaves the write of ``pending`` running: ``unwritten``
        says what is not on disk, and that the newest complete checkpoint is older."""
        if pending is None or self.unwritten is not None:
            return
        steps = sorted({pending.step, step})
        what = (f"the checkpoint of step {steps[0]:,} is" if len(steps) == 1 else
                f"the checkpoints of steps {steps[0]:,} and {steps[1]:,} are")
        kept = [path for path in writer.kept if path != pending.path]
        older = (f"the newest complete checkpoint, {os.path.basename(kept[-1])}, is older"
                 if kept else "no complete checkpoint is on disk")
        self.unwritten = (
            f"{what} not on disk: the write of step {pending.step:,} to {pending.path} made "
            f"no progress for {time.monotonic() - pending.started:.0f} s (a file system that "
            "stopped answering?), and the session ended without it after --stop-grace-secs "
            f"{self._grace_secs:g}; {older}")
        logger.warning("%s%s.", self.unwritten[:1].upper(), self.unwritten[1:])

    def error(self) -> CheckpointWriteError:
        """The error that ends a session that gave up on a write."""
        return CheckpointWriteError(f"{self.unwritten[:1].upper()}{self.unwritten[1:]}. A "
                                    "resume starts from the newest complete one.")
