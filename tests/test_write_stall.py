"""A checkpoint write that hangs (a writer whose file-system call blocks, injected): the panel
says it stalled, training goes on, a stop ends within --stop-grace-secs saying which step is
not on disk, the next session's start says the same, and every complete checkpoint is intact.
"""
import glob
import os
import threading
import time

import pytest
import tensorflow as tf
from tensorflow.python.eager import context

from jupyter_supervisor.checkpoints import CheckpointWriteError
from jupyter_supervisor.eager import writer as writer_module
from jupyter_supervisor.notebook import run as run_module
from jupyter_supervisor.view import text

from helpers import before_each_write, wait_for

DEADLINE = 60.0   # seconds; generous for a loaded 2-core machine, never reached when passing
GRACE = 1.0       # --stop-grace-secs of these runs
BODY = """
sv.track(w=w)
while not sv.should_stop():
    w.assign_add(1.0)
    sv.step()
"""


class Hang:
    """Blocks each checkpoint write (in its writer thread, before its files) while ``on``,
    until ``release``; ``blocked`` is set when one blocks (``path``, ``thread``)."""

    def __init__(self, monkeypatch):
        self.on = threading.Event()
        self.release = threading.Event()
        self.blocked = threading.Event()
        self.path = self.thread = None
        before_each_write(monkeypatch, self._before)

    def _before(self, path):
        if self.on.is_set() and not self.blocked.is_set():
            self.path, self.thread = path, threading.current_thread()
            self.blocked.set()
            self.release.wait()


def _listed(logdir):
    state = tf.train.get_checkpoint_state(logdir)
    return list(state.all_model_checkpoint_paths) if state else []


def _stop_record(logdir):
    newest = sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))[-1]
    stops = [e.session_log.msg for e in tf.compat.v1.train.summary_iterator(newest)
             if e.HasField("session_log") and e.session_log.status == e.session_log.STOP]
    return stops[-1] if stops else None


def test_the_stall_bound_grows_with_the_size_over_the_speed(monkeypatch, tmp_path):
    monkeypatch.setattr(writer_module, "MIN_STALL_SECS", 0.0)
    w = tf.Variable(tf.zeros([1000]))
    writer = writer_module.CheckpointWriter({"w": w}, str(tmp_path), "model.ckpt", 2, [])
    assert writer.stall_secs() == 0.0 and writer.stalled() is None   # nothing known yet
    writer.save(1)
    assert writer.wait(DEADLINE)
    measured = writer.stall_secs()
    assert measured > 0.0
    writer._speeds.clear()   # pylint: disable=protected-access  (before any write's speed)
    assert writer.stall_secs() == pytest.approx(
        writer_module.STALL_FACTOR * writer._bytes   # pylint: disable=protected-access
        / writer_module.ASSUMED_BYTES_PER_SEC)
    monkeypatch.setattr(writer_module, "MIN_STALL_SECS", 60.0)
    assert writer.stall_secs() == 60.0
    assert writer_module._size_of({"w": w, "again": w}) == 4000   # pylint: disable=W0212
    writer.close()


def test_a_write_that_hangs_is_said_training_goes_on_and_a_stop_ends_within_the_grace(
        monkeypatch, tmp_path):
    monkeypatch.setattr(writer_module, "MIN_STALL_SECS", 0.5)
    hang = Hang(monkeypatch)
    logdir = str(tmp_path / "fit")
    config = run_module.RunConfig(logdir=logdir, save_model_secs=0.2, save_summaries_secs=0,
                                  stop_grace_secs=GRACE, keep=100)
    with context.eager_mode():
        run = run_module.TrainingRun(config, BODY, {"w": tf.Variable(0.0)})
        run.start()
    try:
        wait_for(lambda: run.history.snapshot().checkpoint_count >= 2, DEADLINE,
                 what="two checkpoints")
        hang.on.set()
        assert hang.blocked.wait(DEADLINE)
        stalled_step = int(hang.path.rsplit("-", 1)[1])
        # The panel.
        stalled = wait_for(lambda: run.history.snapshot().write_stalled, DEADLINE,
                           what="the stall in the panel")
        assert stalled.path == hang.path and stalled.step == stalled_step
        lines = text.checkpoint_lines(run, run.history.snapshot(), stalled.since + 180)
        assert f"checkpoint write to {hang.path} stalled for 3 min (step {stalled_step:,}); " \
               "training goes on" in lines
        # Training goes on, past saves that came due meanwhile.
        at = run.global_step
        wait_for(lambda: run.global_step > at + 200, DEADLINE, what="training going on")
        with pytest.raises(CheckpointWriteError, match="is stalled"):
            run.save_now()   # a save asked for now is refused, not hung
        wait_for(lambda: run.global_step > at + 400, DEADLINE, what="training going on")
        listed = _listed(logdir)
        assert hang.path not in listed and len(listed) >= 2
        # A stop waits for the write at most the grace.
        began = time.monotonic()
        assert run.stop(timeout=DEADLINE)
        took = time.monotonic() - began
        assert took < GRACE + 10.0, took
        assert run.status == "failed"
        final = run.global_step
        newest = os.path.basename(listed[-1])
        message = (f"The checkpoints of steps {stalled_step:,} and {final:,} are not on disk: "
                   f"the write of step {stalled_step:,} to {hang.path} made no progress for ")
        assert run.error_line.startswith(f"CheckpointWriteError: {message}")
        assert f"after --stop-grace-secs {GRACE:g}; the newest complete checkpoint, " \
               f"{newest}, is older. A resume starts from the newest complete one." \
               in run.error_line
        assert _stop_record(logdir).startswith(message[0].lower() + message[1:])
        # Nothing complete is deleted, nothing listed changed; the write left running, once
        # it ends, records nothing.
        assert _listed(logdir) == listed
        hang.release.set()
        hang.thread.join(DEADLINE)
        assert not hang.thread.is_alive()
        assert _listed(logdir) == listed
        for path in listed:
            tf.train.load_checkpoint(path).get_tensor("w/.ATTRIBUTES/VARIABLE_VALUE")
        # The next session's start says the same.
        hang.on.clear()
        with context.eager_mode():
            run.resume()
        wait_for(lambda: "The last session on this logdir stopped: the checkpoints of steps "
                 f"{stalled_step:,} and {final:,} are not on disk" in
                 run.history.snapshot().output, DEADLINE, what="the next session's note")
        wait_for(lambda: run.status == "running", DEADLINE, what="the resumed run")
        assert run.restored_from == listed[-1]
    finally:
        hang.release.set()
        run_module.stop_all(timeout=DEADLINE)
    assert run.status == "stopped" and run.exception is None
