"""A training process for the fault-injection tests (tests/test_faults.py).

A small real model (linear regression with a Momentum optimizer) trained under
``jupyter_supervisor.Supervisor``, reporting on stdout what the test needs to decide when to kill
it and to check what it resumed from. Every line is ``<pid> <KIND> <json>``, written with one
``os.write`` (atomic for lines this short, so forked processes sharing a pipe never interleave).

Usage:
  trainer.py serve   imports TensorFlow once, prints STANDBY, then forks one training process per
                     ``START <json>`` line read on stdin (FORKED / EXITED report each child), so a
                     restart costs a fork instead of a TensorFlow import.  The children share
                     nothing with each other but the logdir: the parent never builds a graph.
  trainer.py once    imports TensorFlow, prints STANDBY, then runs the training process of the
                     one ``START <json>`` line it reads, in itself (a cold restart).

START parameters: ``logdir``, ``save_model_secs``, ``save_summaries_secs``, ``stop_at`` (a step
at which to stop cleanly, or null to train until killed) and ``pause`` (null, or ``{"at": stage,
"save": n}``: the n-th save of this process, counted from 0, holds at that stage so that the test
can kill it there).

Save stages, each reported as a line: SAVE_BEGIN (entering Saver.save), DATA_WRITTEN (the data
and index files are complete, the ``checkpoint`` state file does not list them yet),
STATE_WRITTEN (the state file lists the new checkpoint, the one that fell out of retention is not
deleted yet, the .meta file not written), SAVE_END.

Other lines: READY (the step read with sv.read_global_step right after the session was prepared),
SESSION_READY (the SessionReady event), STEP (the global step after a training step, at most
every REPORT_SECS), CHECKPOINT (the CheckpointSaved event), STOPPED, DONE, ERROR.
Times are time.monotonic(), which is one clock for all processes of the machine.
"""
import json
import os
import select
import signal
import sys
import threading
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1

REPORT_SECS = 0.01
# How long a paused save holds. The test kills the process well before; if it does not, the save
# goes on and the process trains as usual.
PAUSE_SECS = 60.0
# The model: a [WIDTH, WIDTH] weight and its momentum slot, 2 * 256 KiB per checkpoint.
WIDTH = 256
MAX_TO_KEEP = 3


def emit(kind, **payload):
    """Prints one report line (one write, so that lines of forked processes never mix)."""
    line = f"{os.getpid()} {kind} {json.dumps(payload, separators=(',', ':'))}\n"
    os.write(1, line.encode())


class StagedSaver(v1.train.Saver):
    """A Saver that reports each stage of a save and can hold one save at one stage."""

    def __init__(self, *args, pause=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._pause = pause
        self._count = -1  # Saver.save calls so far; one at a time (the Supervisor's save lock)
        self._path = None

    def save(self, sess, save_path, global_step=None, *args, **kwargs):  # pylint: disable=W0221
        self._count += 1
        self._path = None
        self._stage("SAVE_BEGIN", name_step=global_step)
        path = super().save(sess, save_path, global_step, *args, **kwargs)
        self._stage("SAVE_END")
        return path

    def _RecordLastCheckpoint(self, latest_save_path):  # pylint: disable=invalid-name
        # Saver.save calls this after the save op wrote the data and index files and just
        # before it writes the state file.
        self._path = latest_save_path
        self._stage("DATA_WRITTEN")
        super()._RecordLastCheckpoint(latest_save_path)

    def _MaybeDeleteOldCheckpoints(self, meta_graph_suffix="meta"):  # pylint: disable=invalid-name
        # Called right after the state file was written, before retention deletes the oldest.
        self._stage("STATE_WRITTEN")
        super()._MaybeDeleteOldCheckpoints(meta_graph_suffix)

    def _stage(self, stage, **extra):
        emit(stage, n=self._count, path=self._path, t=time.monotonic(), **extra)
        if self._pause and self._pause["at"] == stage and self._pause["save"] == self._count:
            emit("PAUSED", n=self._count, at=stage, path=self._path, t=time.monotonic())
            threading.Event().wait(PAUSE_SECS)


def build_model(make_saver=None):
    """The model in a new graph: (graph, global_step, train_op returning the new step, saver).

    ``make_saver()`` builds the saver in the graph (default: a plain Saver keeping MAX_TO_KEEP).
    """
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("w", shape=[WIDTH, WIDTH], initializer=v1.zeros_initializer())
        target = tf.eye(WIDTH) * 0.5
        x = tf.random.normal([32, WIDTH], seed=1)
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - tf.matmul(x, target)))
        update = v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
        with tf.control_dependencies([update]):
            train_op = v1.assign_add(step, 1)
        v1.summary.scalar("loss", loss)
        saver = (make_saver or (lambda: v1.train.Saver(max_to_keep=MAX_TO_KEEP)))()
    return graph, step, train_op, saver


def train(params):
    """One training process: restore or initialize, train, report; until killed or stop_at."""
    from jupyter_supervisor import Supervisor, events  # pylint: disable=import-outside-toplevel

    graph, _, train_op, saver = build_model(
        lambda: StagedSaver(max_to_keep=MAX_TO_KEEP, pause=params.get("pause")))

    def report(event):
        if isinstance(event, events.SessionReady):
            emit("SESSION_READY", step=event.step, restored_from=event.restored_from)
        elif isinstance(event, events.CheckpointSaved):
            emit("CHECKPOINT", step=event.step, path=event.path, seconds=event.seconds)
        elif isinstance(event, events.Stopped):
            emit("STOPPED", reason=event.reason, step=event.step,
                 exception=None if event.exception is None else repr(event.exception)[:300])

    with graph.as_default():
        sv = Supervisor(graph=graph, logdir=params["logdir"], saver=saver,
                        save_model_secs=params["save_model_secs"],
                        save_summaries_secs=params["save_summaries_secs"])
    sv.add_listener(report)
    stop_at = params.get("stop_at")
    with sv.managed_session() as sess:
        step = sv.read_global_step(sess)
        emit("READY", step=step, t=time.monotonic())
        last_report = 0.0
        while not sv.should_stop():
            step = int(sess.run(train_op))
            now = time.monotonic()
            if now - last_report >= REPORT_SECS:
                emit("STEP", step=step, t=now)
                last_report = now
            if stop_at is not None and step >= stop_at:
                sv.request_stop()
    sv.flush_events(30)
    emit("DONE", step=step)


def run_child(params):
    """Trains, then ends this process without running anything inherited from a parent."""
    code = 0
    try:
        train(params)
    except BaseException:  # pylint: disable=broad-except
        emit("ERROR", text=traceback.format_exc()[-3000:])
        code = 1
    finally:
        os._exit(code)  # pylint: disable=protected-access


def read_commands(fd, buffer):
    """Complete lines from ``fd`` (None at end of input), keeping a partial line in ``buffer``."""
    data = os.read(fd, 65536)
    if not data:
        return None
    buffer.extend(data)
    lines = []
    while b"\n" in buffer:
        line, _, rest = bytes(buffer).partition(b"\n")
        buffer[:] = rest
        lines.append(line.decode())
    return lines


def serve():
    """The forking parent: one child per START line; reports children that exit."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    emit("STANDBY")
    buffer = bytearray()
    while True:
        readable, _, _ = select.select([0, wake_r], [], [])
        if wake_r in readable:
            while True:
                try:
                    if not os.read(wake_r, 4096):
                        break
                except BlockingIOError:
                    break
            reap()
        if 0 in readable:
            lines = read_commands(0, buffer)
            if lines is None:
                return  # the test closed our stdin
            for line in lines:
                command, _, arg = line.partition(" ")
                if command == "START":
                    pid = os.fork()
                    if pid == 0:
                        signal.set_wakeup_fd(-1)
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        os.close(wake_r)
                        os.close(wake_w)
                        null = os.open(os.devnull, os.O_RDONLY)
                        os.dup2(null, 0)
                        run_child(json.loads(arg))
                    emit("FORKED", child=pid)


def reap():
    """Reports (EXITED) every child that ended."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        emit("EXITED", child=pid,
             signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
             code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None)


def once():
    """A cold training process: waits for its START line, then trains in this process."""
    emit("STANDBY")
    line = sys.stdin.readline()
    command, _, arg = line.strip().partition(" ")
    if command != "START":
        emit("ERROR", text=f"expected a START line, got {line!r}")
        sys.exit(1)
    run_child(json.loads(arg))


if __name__ == "__main__":
    # As a TF1-style program does; in `serve` mode before any fork, so every child inherits it.
    v1.disable_eager_execution()
    import jupyter_supervisor.graph.supervisor  # noqa: F401  (imported before forking, not per child)
    {"serve": serve, "once": once}[sys.argv[1]]()
