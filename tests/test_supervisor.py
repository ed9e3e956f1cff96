"""What jupyter_supervisor.Supervisor adds beyond TensorFlow's, and how it treats bad input.

Real graphs, real sessions, real checkpoints and event files read back with TensorFlow's checkpoint
reader and TensorBoard's own event reader; a real training subprocess killed with SIGKILL. Nothing
waits a fixed time: every wait polls a condition against a deadline.

Drop-in compatibility with tf.compat.v1.train.Supervisor lives in test_supervisor_compat.py.
"""
import contextlib
import functools
import gc
import glob
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import uuid
import weakref

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator, event_file_loader
from tensorflow.python.eager import context

import jupyter_supervisor
from jupyter_supervisor import events
from jupyter_supervisor.graph.supervisor import Supervisor

from helpers import (Recorder, build_model, checkpoint_step, child_env, corrupt_checkpoint,
                     wait_for)

v1 = tf.compat.v1
DEADLINE = 60.0       # seconds; generous for a loaded 2-core machine, never reached when passing
LOGGER = "jupyter_supervisor"


# ----------------------------------------------------------------------------------- helpers

@pytest.fixture(autouse=True)
def graph_mode():
    """What a user's tf.compat.v1.disable_eager_execution() does, for this test's thread only
    (other test files may want eager mode; threads the Supervisor starts stay as they are)."""
    with context.graph_mode():
        yield


def train_until(sess, train_op, condition, what, timeout=DEADLINE):
    """Runs ``train_op`` until ``condition()`` holds; fails at the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s training until {what}")
        sess.run(train_op)


# The suite's model (helpers.build_model), each in a graph of its own, with an 8x8 ``w`` and a
# scalar summary ``step_value`` (the global step as a float).
new_model = functools.partial(build_model, new_graph=True, w_shape=(8, 8),
                              summaries=("step_value",))


def make_supervisor(model, **kwargs):
    """A Supervisor on ``model``'s graph, built in graph mode whatever the test's eager state."""
    with model.graph.as_default():
        return Supervisor(graph=model.graph, **kwargs)


def checkpoint_steps(logdir):
    """Steps of the complete checkpoints (index file present) in ``logdir``, sorted."""
    steps = []
    for index in glob.glob(os.path.join(logdir, "model.ckpt-*.index")):
        steps.append(int(re.search(r"model\.ckpt-(\d+)\.index$", index).group(1)))
    return sorted(steps)


def listed_steps(logdir):
    """Steps of the checkpoints the ``checkpoint`` state file lists (complete saves), sorted."""
    state = tf.train.get_checkpoint_state(str(logdir))
    if not state:
        return []
    return sorted(int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths)


def raw_events(logdir):
    """Every Event proto of every event file in ``logdir``, in wall-time order (TB's loader)."""
    found = []
    for path in glob.glob(os.path.join(logdir, "events.out.tfevents.*")):
        found.extend(event_file_loader.LegacyEventFileLoader(path).Load())
    return sorted(found, key=lambda e: e.wall_time)


def session_logs(logdir):
    """[(status name, step)] of the SessionLog events in ``logdir``, in wall-time order."""
    names = {v1.SessionLog.START: "START", v1.SessionLog.STOP: "STOP",
             v1.SessionLog.CHECKPOINT: "CHECKPOINT"}
    return [(names[e.session_log.status], e.step) for e in raw_events(logdir)
            if e.WhichOneof("what") == "session_log"]


def tb_scalars(logdir, tag):
    """[(step, value)] of scalar ``tag`` as TensorBoard's EventAccumulator reads the logdir."""
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in acc.Scalars(tag)]


# ------------------------------------------------------------------- crash and restart (SIGKILL)

TRAIN_SCRIPT = """
import logging
import sys

import tensorflow as tf

from jupyter_supervisor import Supervisor, events

logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                    format="%(name)s %(levelname)s %(message)s")
tf.compat.v1.disable_eager_execution()
logdir, progress_path, target = sys.argv[1], sys.argv[2], int(sys.argv[3])

step = tf.compat.v1.train.get_or_create_global_step()
count = tf.compat.v1.get_variable("count", initializer=tf.constant(0, tf.int64))
w = tf.compat.v1.get_variable("w", initializer=tf.fill([32, 32], 0.5))
update = tf.compat.v1.assign(w, tf.matmul(w, tf.eye(32) * 0.999))
with tf.control_dependencies([update]):
    train_op = tf.group(tf.compat.v1.assign_add(count, 1), tf.compat.v1.assign_add(step, 1))
with tf.control_dependencies([train_op]):  # the step after this one (a read in the same run
    step_after = tf.identity(step.read_value())  # as the increment may come before it)

ready = []
sv = Supervisor(logdir=logdir, save_model_secs=0.3, save_summaries_secs=0.3)
sv.add_listener(lambda e: ready.append(e) if isinstance(e, events.SessionReady) else None)
with open(progress_path, "a", buffering=1) as progress, sv.managed_session() as sess:
    sv.flush_events(30)
    at, counted = sess.run([step, count])
    print("READY", int(at), int(counted), ready[0].restored_from, flush=True)
    while not sv.should_stop():
        at = sess.run(step_after)
        progress.write(f"{int(at)}\\n")  # line-buffered: the test sees every finished step
        if target and at >= target:
            break
print("DONE", flush=True)
"""


def _last_progress(path):
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        return -1
    complete = [line for line in lines[:-1] if line]  # the last piece may be half-written
    return int(complete[-1]) if complete else -1


@pytest.mark.slow
def test_sigkilled_training_resumes_at_newest_checkpoint(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    logdir, progress = tmp_path / "logs", tmp_path / "progress.txt"
    env = child_env()

    def run(target, name):
        out = open(tmp_path / f"{name}.out", "wb")
        err = open(tmp_path / f"{name}.err", "wb")
        return subprocess.Popen([sys.executable, str(script), str(logdir), str(progress),
                                 str(target)], stdout=out, stderr=err, env=env)

    first = run(0, "first")  # trains until killed
    try:
        # Mid-run: two checkpoints exist and training went on past the newest one.
        seen = wait_for(lambda: first.poll() is None and len(listed_steps(logdir)) >= 2
                        and _last_progress(progress) > listed_steps(logdir)[-1]
                        and listed_steps(logdir),
                        DEADLINE, what="two checkpoints and training beyond them")
        assert first.poll() is None, (tmp_path / "first.err").read_text()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=DEADLINE)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == -signal.SIGKILL
    killed_at = _last_progress(progress)
    newest = tf.train.latest_checkpoint(str(logdir))
    saved_step = checkpoint_step(newest)
    # The checkpoint thread names the file by the step it read just before saving; training goes
    # on meanwhile, so the saved step may be a little past the name (as with TF's Supervisor).
    assert seen[-1] <= int(newest.rsplit("-", 1)[1]) <= saved_step
    # Each step's progress line is written after its run: at most one step is not in the file.
    assert 0 < saved_step <= killed_at + 1
    assert os.path.exists(logdir / "supervisor.lock"), "the killed chief's lock is left behind"

    target = saved_step + 50
    second = run(target, "second")
    try:
        second.wait(timeout=DEADLINE * 2)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    out, err = (tmp_path / "second.out").read_text(), (tmp_path / "second.err").read_text()
    assert second.returncode == 0, err
    ready = re.search(r"^READY (\d+) (\d+) (\S+)$", out, re.M)
    assert ready, out
    resumed_step, resumed_count, restored_from = int(ready[1]), int(ready[2]), ready[3]
    # Exactly the newest checkpoint's step, with the model state saved with it: the work lost
    # is what was done after that checkpoint (killed_at - saved_step steps), nothing before.
    assert resumed_step == saved_step
    # The model state saved with it: the Saver reads each variable in turn while training goes
    # on (as TensorFlow's does), so `count` may have been read a few steps after the step.
    saved_count = int(tf.train.load_checkpoint(newest).get_tensor("count"))
    assert resumed_count == saved_count and saved_step <= saved_count <= killed_at + 1
    assert restored_from == newest
    assert killed_at + 1 >= resumed_step
    # The dead chief's lock was taken over, and said so.
    assert re.search(rf"Took over the stale lock.*pid {first.pid}\b", err), err
    # The restarted run ended cleanly at its target: a final checkpoint at the final step.
    assert checkpoint_step(tf.train.latest_checkpoint(str(logdir))) == target
    assert not os.path.exists(logdir / "supervisor.lock")


# -------------------------------------------------------------------------------- clean stop

def _exhausting_model():
    """A model whose train_op consumes a 5-element dataset: the 6th run raises OutOfRangeError."""
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        item = v1.data.make_one_shot_iterator(tf.data.Dataset.range(5)).get_next()
        with tf.control_dependencies([item]):
            train_op = v1.assign_add(step, 1)
    return types.SimpleNamespace(graph=graph, global_step=step, train_op=train_op)


@pytest.mark.parametrize("how", ["request_stop", "out_of_range", "end_of_block"])
def test_clean_stop_writes_checkpoint_at_final_step(tmp_path, how):
    model = _exhausting_model() if how == "out_of_range" else new_model()
    recorder = Recorder()
    sv = make_supervisor(model, logdir=str(tmp_path), save_model_secs=0, save_summaries_secs=0)
    sv.add_listener(recorder)
    with sv.managed_session() as sess:
        if how == "out_of_range":
            while not sv.should_stop():
                sess.run(model.train_op)  # raises OutOfRangeError after 5 steps
        else:
            for _ in range(7):
                sess.run(model.train_op)
            if how == "request_stop":
                sv.request_stop()
    final = 5 if how == "out_of_range" else 7
    newest = tf.train.latest_checkpoint(str(tmp_path))
    assert newest == os.path.join(str(tmp_path), f"model.ckpt-{final}")
    assert checkpoint_step(newest) == final
    assert sv.flush_events(DEADLINE)
    assert [e.step for e in recorder.of(events.CheckpointSaved)] == [final]
    expected = events.OUT_OF_RANGE if how == "out_of_range" else events.REQUESTED
    assert [(e.reason, e.step) for e in recorder.of(events.Stopped)] == [(expected, final)]


def test_save_on_stop_false_writes_no_final_checkpoint(tmp_path):
    model = new_model()
    sv = make_supervisor(model, logdir=str(tmp_path), save_model_secs=0, save_summaries_secs=0,
                         save_on_stop=False)
    with sv.managed_session() as sess:
        for _ in range(3):
            sess.run(model.train_op)
        assert sv.save_checkpoint(sess) == os.path.join(str(tmp_path), "model.ckpt-3")
        for _ in range(4):
            sess.run(model.train_op)
        sv.request_stop()
    assert checkpoint_steps(str(tmp_path)) == [3]
    assert checkpoint_step(tf.train.latest_checkpoint(str(tmp_path))) == 3


def test_stop_writes_no_duplicate_of_newest_checkpoint(tmp_path):
    model = new_model()
    recorder = Recorder()
    sv = make_supervisor(model, logdir=str(tmp_path), save_model_secs=0, save_summaries_secs=0)
    sv.add_listener(recorder)
    with sv.managed_session() as sess:
        for _ in range(4):
            sess.run(model.train_op)
        path = sv.save_checkpoint(sess)
        index = path + ".index"
        written = os.stat(index).st_mtime_ns
    assert sv.flush_events(DEADLINE)
    assert [e.step for e in recorder.of(events.CheckpointSaved)] == [4]
    assert os.stat(index).st_mtime_ns == written
    assert checkpoint_steps(str(tmp_path)) == [4]
    assert [s for s in session_logs(str(tmp_path)) if s[0] == "CHECKPOINT"] == [("CHECKPOINT", 4)]


def test_restored_run_stopped_without_steps_writes_no_checkpoint(tmp_path):
    first = new_model()
    sv = make_supervisor(first, logdir=str(tmp_path), save_model_secs=0, save_summaries_secs=0)
    with sv.managed_session() as sess:
        for _ in range(2):
            sess.run(first.train_op)
    stamp = os.stat(tmp_path / "model.ckpt-2.index").st_mtime_ns
    again = new_model()
    sv = make_supervisor(again, logdir=str(tmp_path), save_model_secs=0, save_summaries_secs=0)
    recorder = Recorder()
    sv.add_listener(recorder)
    with sv.managed_session():
        pass
    assert sv.flush_events(DEADLINE)
    assert recorder.of(events.CheckpointSaved) == []
    assert os.stat(tmp_path / "model.ckpt-2.index").st_mtime_ns == stamp


# ----------------------------------------------------------------- what TensorBoard reads back

def _session(logdir, recorder, burst, final_burst):
    """One Supervisor session: ``burst`` steps, wait for a summary, a step rate and a checkpoint
    at that step with training paused, then ``final_burst`` steps and a clean end."""
    model = new_model()
    sv = make_supervisor(model, logdir=logdir, save_model_secs=0.15, save_summaries_secs=0.1,
                         complete_curves=True)
    sv.add_listener(recorder)
    with sv.managed_session() as sess:
        start = sv.read_global_step(sess)
        for _ in range(burst):
            sess.run(model.train_op)
        paused_at = start + burst
        wait_for(lambda: any(e.step == paused_at for e in recorder.of(events.SummaryWritten))
                 and any(e.step == paused_at for e in recorder.of(events.CheckpointSaved))
                 and any(e.steps_per_sec > 0 and e.step >= start
                         for e in recorder.of(events.StepRate)),
                 DEADLINE, what=f"a summary, a checkpoint and a step rate at step {paused_at}")
        for _ in range(final_burst):
            sess.run(model.train_op)
    assert sv.flush_events(DEADLINE)
    return start, paused_at, paused_at + final_burst


def test_tensorboard_reads_a_stopped_and_resumed_run(tmp_path):
    logdir = str(tmp_path)
    first, second = Recorder(), Recorder()
    start1, paused1, end1 = _session(logdir, first, burst=10, final_burst=5)
    start2, paused2, end2 = _session(logdir, second, burst=10, final_burst=5)
    assert (start1, end1) == (0, 15)
    assert start2 == end1  # resumed at the final checkpoint of the first session
    assert [e.restored_from for e in second.of(events.SessionReady)] == [
        os.path.join(logdir, "model.ckpt-15")]

    # Scalars, as TensorBoard shows them: both sessions, values exact where training paused.
    values = tb_scalars(logdir, "step_value")
    assert (paused1, float(paused1)) in values
    assert (paused2, float(paused2)) in values
    by_step = [v for _, v in sorted(values)]
    assert by_step == sorted(by_step)
    rates = tb_scalars(logdir, "global_step/sec")
    assert any(step < end1 for step, _ in rates) and any(step >= start2 for step, _ in rates)
    assert any(rate > 0 for _, rate in rates)

    # Session logs: START at the step after the one each session starts at (TensorBoard keeps
    # what the session before recorded of its last step), CHECKPOINT at each saved step, a
    # STOP closing each session after its last checkpoint.
    logs = session_logs(logdir)
    assert [step for status, step in logs if status == "START"] == [1, end1 + 1]
    assert (end1, float(end1)) in values    # the first session's last summary
    letters = {"START": "<", "CHECKPOINT": "c", "STOP": ">"}
    assert re.fullmatch(r"<c+><c+>", "".join(letters[status] for status, _ in logs)), logs
    saved = sorted(e.step for e in first.of(events.CheckpointSaved) + second.of(
        events.CheckpointSaved))
    assert sorted(step for status, step in logs if status == "CHECKPOINT") == saved
    assert end1 in saved and end2 in saved
    # TensorFlow writes STOP without a step (0); the final step is also right.
    stops = [step for status, step in logs if status == "STOP"]
    assert stops[0] in (0, end1) and stops[1] in (0, end2)


@pytest.mark.parametrize("end", ["stop", "error", "input", "max_steps"])
def test_every_session_end_writes_its_last_summary_and_step_rate(tmp_path, end):
    """Whatever ends a session (a clean end, an error in the block, the end of the input, a stop
    at a step), its last step is in the event file: the summary service's last summary and the
    step counter's last rate, though both run only once an hour here; TensorBoard reads them."""
    model = new_model()
    logdir = str(tmp_path)
    sv = make_supervisor(model, logdir=logdir, save_model_secs=0, save_summaries_secs=3600,
                         complete_curves=True)
    with contextlib.suppress(ValueError):
        with sv.managed_session() as sess:
            for _ in range(7):
                sess.run(model.train_op)
            if end == "error":
                raise ValueError("the loader died")
            if end == "input":
                raise tf.errors.OutOfRangeError(None, None, "the input ended")
            if end == "max_steps":
                sv.request_stop()
    assert (7, 7.0) in tb_scalars(logdir, "step_value")
    # The counter's first run may come after the first steps (it starts beside training): the
    # rate of the last step is the one that must be there.
    assert [step for step, _ in tb_scalars(logdir, "global_step/sec")][-1:] == [7]


@pytest.mark.parametrize("reuse", [False, True], ids=["new_supervisor", "same_supervisor"])
def test_quick_restart_keeps_earlier_event_file(tmp_path, reuse):
    """Two sessions on one logdir within the same second: both sessions' events survive.

    TensorFlow's FileWriter names event files by the second and host only and truncates an
    existing file of that name, so a quick restart must not reuse the name.
    """
    logdir = str(tmp_path)
    # Start just after a second boundary so both sessions fall in the same second.
    wait_for(lambda: time.time() % 1.0 < 0.2, 5, what="the start of a second")
    for session in range(2):
        if session == 0 or not reuse:
            model = new_model()
            sv = make_supervisor(model, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
        with sv.managed_session() as sess:
            for _ in range(3):
                sess.run(model.train_op)
    assert [step for status, step in session_logs(logdir) if status == "START"] == [0, 3]
    assert [step for status, step in session_logs(logdir) if status == "CHECKPOINT"] == [3, 6]


# ------------------------------------------------------------------------- the how-to scenarios

def test_pretrained_init_fn_runs_only_without_checkpoint(tmp_path):
    pretrained_dir, logdir = tmp_path / "pretrained", str(tmp_path / "logs")
    with tf.Graph().as_default():
        w = v1.get_variable("w", initializer=tf.fill([8, 8], 3.0))
        with v1.Session() as sess:
            sess.run(w.initializer)
            pretrained = v1.train.Saver([w]).save(sess, str(pretrained_dir / "pre.ckpt"))

    calls = []
    for run in range(2):
        model = new_model(extra_variable="head")
        with model.graph.as_default():
            restorer = v1.train.Saver([model.w])  # only the pre-trained variable

        def init_fn(sess, restorer=restorer):
            calls.append(run)
            restorer.restore(sess, pretrained)
        sv = make_supervisor(model, logdir=logdir, init_fn=init_fn, save_model_secs=0,
                             save_summaries_secs=0)
        with sv.managed_session() as sess:
            w_value = sess.run(model.w)
            if run == 0:
                np.testing.assert_array_equal(w_value, np.full([8, 8], 3.0, np.float32))
                sess.run(model.train_op)
                trained = sess.run(model.w)
            else:
                np.testing.assert_array_equal(w_value, trained)  # restored, not pre-trained
    assert calls == [0]


def test_summary_op_none_with_summary_computed_every_n_steps(tmp_path):
    logdir = str(tmp_path)
    model = new_model(summaries=())
    with model.graph.as_default():
        value = v1.placeholder(tf.float32, [])
        metric = v1.summary.scalar("metric", value)
    recorder = Recorder()
    sv = make_supervisor(model, logdir=logdir, summary_op=None, save_model_secs=0)
    sv.add_listener(recorder)
    assert sv.summary_op is None
    with sv.managed_session() as sess:
        for step in range(1, 24):
            sess.run(model.train_op)
            if step % 5 == 0:
                sv.summary_computed(sess, sess.run(metric, {value: step * 1.5}))
    assert tb_scalars(logdir, "metric") == [(s, s * 1.5) for s in (5, 10, 15, 20)]
    assert sv.flush_events(DEADLINE)
    assert [(e.step, dict(e.scalars)) for e in recorder.of(events.SummaryWritten)] == [
        (s, {"metric": s * 1.5}) for s in (5, 10, 15, 20)]


class LoopFailed(Exception):
    pass


def test_custom_loop_service_runs_and_its_failure_stops_the_run(tmp_path):
    model = new_model()
    recorder = Recorder()
    sv = make_supervisor(model, logdir=str(tmp_path), save_model_secs=0, save_summaries_secs=0)
    sv.add_listener(recorder)
    seen_steps, calls = [], []

    def observe(sess):
        seen_steps.append(sv.read_global_step(sess))

    def flaky():
        calls.append(threading.get_ident())
        if len(calls) == 3:
            raise LoopFailed("third call fails")

    # Checked after the block: an assertion failing inside it would be masked by LoopFailed.
    with pytest.raises(LoopFailed, match="third call fails"):
        with sv.managed_session() as sess:
            observer = sv.loop(0.01, observe, args=(sess,))
            train_until(sess, model.train_op, lambda: len(seen_steps) >= 3,
                        "the loop target ran three times")
            observed_while_running = observer.is_alive()
            sv.loop(None, flaky)  # called again and again until it fails
            stopped_by_failure = sv.coord.wait_for_stop(DEADLINE)
    assert observed_while_running
    assert stopped_by_failure, "the failing loop did not stop the run"
    assert seen_steps == sorted(seen_steps)
    assert threading.get_ident() not in calls
    assert len(calls) == 3
    assert not observer.is_alive()
    assert sv.flush_events(DEADLINE)
    [stopped] = recorder.of(events.Stopped)
    assert stopped.reason == events.ERROR and isinstance(stopped.exception, LoopFailed)


def test_failing_standard_service_stops_the_run_and_is_reraised(tmp_path):
    model = new_model(summaries=())
    with model.graph.as_default():
        step = tf.reshape(model.global_step, [])
        # The summary op fails once the step reaches 3, as a diverging metric check would.
        with tf.control_dependencies([tf.debugging.assert_less(
                step, tf.constant(3, tf.int64), message="metric diverged")]):
            v1.summary.scalar("checked", tf.cast(step, tf.float32))
    recorder = Recorder()
    sv = make_supervisor(model, logdir=str(tmp_path), save_model_secs=0, save_summaries_secs=0.01)
    sv.add_listener(recorder)
    with pytest.raises(tf.errors.InvalidArgumentError, match="metric diverged"):
        with sv.managed_session() as sess:
            train_until(sess, model.train_op, sv.should_stop, "the summary service to fail")
    assert sv.flush_events(DEADLINE)
    [stopped] = recorder.of(events.Stopped)
    assert stopped.reason == events.ERROR
    assert isinstance(stopped.exception, tf.errors.InvalidArgumentError)


# --------------------------------------------------------------------- unreadable checkpoints

def _two_checkpoints(logdir):
    model = new_model()
    sv = make_supervisor(model, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    with sv.managed_session() as sess:
        for _ in range(3):
            sess.run(model.train_op)
        older = sv.save_checkpoint(sess)
        for _ in range(3):
            sess.run(model.train_op)
        newer = sv.save_checkpoint(sess)
    return older, newer


@pytest.mark.parametrize("how", ["truncated_data", "garbled_index"])
def test_unreadable_newest_checkpoint_falls_back_to_older(tmp_path, caplog, how):
    logdir = str(tmp_path)
    older, newer = _two_checkpoints(logdir)
    corrupt_checkpoint(newer, how)
    model = new_model()
    recorder = Recorder()
    sv = make_supervisor(model, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    sv.add_listener(recorder)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with sv.managed_session() as sess:
            assert sv.read_global_step(sess) == 3
    warnings = [r.getMessage() for r in caplog.records
                if r.name == LOGGER and r.levelno == logging.WARNING]
    assert any(newer in m and older in m for m in warnings), warnings
    assert sv.flush_events(DEADLINE)
    assert [e.restored_from for e in recorder.of(events.SessionReady)] == [older]


def test_no_readable_checkpoint_is_a_clear_error(tmp_path):
    logdir = str(tmp_path)
    older, newer = _two_checkpoints(logdir)
    corrupt_checkpoint(newer, "truncated_data")
    corrupt_checkpoint(older, "garbled_index")
    model = new_model()
    sv = make_supervisor(model, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    with pytest.raises(RuntimeError) as raised:
        with sv.managed_session():
            pass
    message = str(raised.value)
    assert older in message and newer in message and "can be read" in message
    assert sorted(checkpoint_steps(logdir)) == [3, 6]  # nothing deleted
    assert not os.path.exists(os.path.join(logdir, "supervisor.lock"))


def test_checkpoint_lacking_a_variable_is_a_mismatch_not_a_fallback(tmp_path, caplog):
    logdir = str(tmp_path)
    _two_checkpoints(logdir)
    with open(os.path.join(logdir, "checkpoint"), "rb") as f:
        state = f.read()
    model = new_model(extra_variable="new_head")
    sv = make_supervisor(model, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with pytest.raises(jupyter_supervisor.CheckpointMismatchError, match="'new_head'"):
            with sv.managed_session():
                pass
    assert not [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]
    with open(os.path.join(logdir, "checkpoint"), "rb") as f:
        assert f.read() == state
    assert checkpoint_steps(logdir) == [3, 6]


@pytest.mark.parametrize("saver_options", [dict(max_to_keep=None),
                                           dict(max_to_keep=2,
                                                keep_checkpoint_every_n_hours=1e-9)])
def test_checkpoints_a_saver_keeps_unlisted_are_not_swept(tmp_path, saver_options):
    """A Saver that keeps checkpoints without listing them (no max_to_keep, or
    keep_checkpoint_every_n_hours) keeps them when a run starts on the logdir: only the
    unlisted saves of a plain retention are what a cut-short save left."""
    logdir = str(tmp_path)
    for session in range(2):  # the second one only starts, restores and stops
        model = new_model()
        with model.graph.as_default():
            saver = v1.train.Saver(**saver_options)
        sv = make_supervisor(model, logdir=logdir, saver=saver, save_model_secs=0,
                             save_summaries_secs=0)
        with sv.managed_session() as sess:
            for _ in range(3 if session == 0 else 0):
                sess.run(model.train_op)
                sv.save_checkpoint(sess)
        assert checkpoint_steps(logdir) == [1, 2, 3]
        assert len(listed_steps(logdir)) < 3


# --------------------------------------------------------------------------- one chief per logdir

def test_second_chief_is_refused_until_the_first_stops(tmp_path):
    logdir = str(tmp_path)
    first_model = new_model()
    first = make_supervisor(first_model, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    with first.managed_session() as sess:
        sess.run(first_model.train_op)
        with pytest.raises(jupyter_supervisor.LogdirLockedError) as raised:
            make_supervisor(new_model(), logdir=logdir)
    assert isinstance(raised.value, RuntimeError)
    message = str(raised.value)
    assert f"pid {os.getpid()}" in message
    assert socket.gethostname() in message
    assert logdir in message
    # The first one stopped: the logdir is free again.
    model = new_model()
    sv = make_supervisor(model, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    with sv.managed_session() as sess:
        assert sv.read_global_step(sess) == 1
        sess.run(model.train_op)
    assert checkpoint_step(tf.train.latest_checkpoint(logdir)) == 2


def test_non_chief_takes_no_lock(tmp_path):
    logdir = str(tmp_path)
    model = new_model()
    holder = make_supervisor(model, logdir=logdir)
    with tf.Graph().as_default(), tf.device("/job:localhost/replica:0/task:0/device:CPU:0"):
        v1.train.get_or_create_global_step()
        worker = Supervisor(logdir=logdir, is_chief=False)
    assert worker.logdir is None
    holder.stop()
    assert not os.path.exists(os.path.join(logdir, "supervisor.lock"))


def _takes_over_the_stale_lock(logdir, pid, caplog):
    """A new Supervisor on ``logdir`` warns that it takes over the stale lock of ``pid``, then
    trains and saves."""
    model = new_model()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        sv = make_supervisor(model, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    assert any("stale lock" in r.getMessage() and f"pid {pid}" in r.getMessage()
               for r in caplog.records if r.name == LOGGER), caplog.text
    with sv.managed_session() as sess:
        sess.run(model.train_op)
    assert checkpoint_step(tf.train.latest_checkpoint(logdir)) == 1


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path, caplog):
    logdir = str(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    with open(os.path.join(logdir, "supervisor.lock"), "w") as f:
        json.dump({"pid": dead_pid, "host": socket.gethostname(), "token": "gone",
                   "start": "1"}, f)
    _takes_over_the_stale_lock(logdir, dead_pid, caplog)
    assert not os.path.exists(os.path.join(logdir, "supervisor.lock"))


def test_lock_of_a_garbage_collected_supervisor_is_taken_over(tmp_path, caplog):
    logdir = str(tmp_path)
    abandoned = make_supervisor(new_model(), logdir=logdir)
    gone = weakref.ref(abandoned)
    del abandoned
    gc.collect()
    assert gone() is None, "the abandoned Supervisor is still referenced"
    assert os.path.exists(os.path.join(logdir, "supervisor.lock"))
    _takes_over_the_stale_lock(logdir, os.getpid(), caplog)


# -------------------------------------------------------------------------------------- events

def test_listeners_receive_every_kind_of_event_off_the_training_thread(tmp_path):
    logdir = str(tmp_path)
    model = new_model()
    with model.graph.as_default():
        # A TF2-style scalar: a tensor value in the Summary proto instead of simple_value.
        v1.summary.tensor_summary("tensor_scalar", tf.constant(2.5))
    recorder = Recorder()
    sv = make_supervisor(model, logdir=logdir, save_model_secs=0.1, save_summaries_secs=0.1)
    sv.add_listener(recorder)
    with sv.managed_session() as sess:
        train_until(
            sess, model.train_op,
            lambda: len(recorder.of(events.CheckpointSaved)) >= 2
            and any(e.step and e.step > 0 for e in recorder.of(events.SummaryWritten))
            and any(e.steps_per_sec > 0 for e in recorder.of(events.StepRate)),
            "checkpoints, summaries and a step rate")
        final = sv.read_global_step(sess)
    assert sv.flush_events(DEADLINE)

    [ready] = recorder.of(events.SessionReady)
    assert (ready.step, ready.restored_from, ready.is_chief) == (0, None, True)
    saved = recorder.of(events.CheckpointSaved)
    for event in saved:
        assert event.path == os.path.join(logdir, f"model.ckpt-{event.step}")
        # Saved while training went on: the stored step may be past the one read for the name.
        assert event.step <= checkpoint_step(event.path) <= final
        assert 0 <= event.seconds < DEADLINE and event.wall_time > 0
    assert saved[-1].step == final == checkpoint_step(saved[-1].path)  # the clean stop's checkpoint
    summaries = recorder.of(events.SummaryWritten)
    for event in summaries:
        assert set(event.scalars) == {"step_value", "tensor_scalar"}
        assert event.scalars["tensor_scalar"] == 2.5
    assert any(e.scalars["step_value"] > 0 for e in summaries)
    for event in recorder.of(events.StepRate):
        assert isinstance(event.step, int) and 0 <= event.step <= final
    [stopped] = recorder.of(events.Stopped)
    assert (stopped.reason, stopped.exception, stopped.step) == (events.REQUESTED, None, final)
    assert isinstance(recorder.events[0], events.SessionReady)
    assert recorder.events[-1] is stopped
    assert threading.get_ident() not in recorder.threads

    # Resumed: SessionReady names the checkpoint it restored.
    again = new_model()
    sv = make_supervisor(again, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    resumed = Recorder()
    sv.add_listener(resumed)
    with sv.managed_session():
        pass
    assert sv.flush_events(DEADLINE)
    [ready] = resumed.of(events.SessionReady)
    assert (ready.step, ready.restored_from) == (final, os.path.join(logdir,
                                                                     f"model.ckpt-{final}"))


class BlockFailed(Exception):
    pass


@pytest.mark.parametrize("how", ["requested", "out_of_range", "error"])
def test_stopped_event_carries_the_reason(tmp_path, how):
    model = _exhausting_model() if how == "out_of_range" else new_model()
    recorder = Recorder()
    sv = make_supervisor(model, logdir=str(tmp_path), save_model_secs=0, save_summaries_secs=0)
    sv.add_listener(recorder)
    failure = BlockFailed("boom")
    try:
        with sv.managed_session() as sess:
            while not sv.should_stop():
                sess.run(model.train_op)
                if how == "requested":
                    sv.request_stop()
                elif how == "error":
                    raise failure
    except BlockFailed as e:
        raised = e
    else:
        raised = None
    assert raised is (failure if how == "error" else None)
    assert sv.flush_events(DEADLINE)
    [stopped] = recorder.of(events.Stopped)
    assert stopped.reason == how
    assert stopped.exception is (failure if how == "error" else None)


def test_failing_listener_neither_stops_training_nor_other_listeners(tmp_path, caplog):
    model = new_model()
    calls = []

    def broken(event):
        calls.append(event)
        raise ValueError("listener bug")

    recorder = Recorder()
    sv = make_supervisor(model, logdir=str(tmp_path), save_model_secs=0.05,
                         save_summaries_secs=0)
    sv.add_listener(broken)
    sv.add_listener(recorder)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        with sv.managed_session() as sess:
            train_until(sess, model.train_op,
                        lambda: len(recorder.of(events.CheckpointSaved)) >= 3,
                        "three checkpoints seen by the second listener")
            assert not sv.should_stop()
            final = sv.read_global_step(sess)
        assert sv.flush_events(DEADLINE)
    assert len(calls) == len(recorder.events) > 4
    assert [e.reason for e in recorder.of(events.Stopped)] == [events.REQUESTED]
    assert checkpoint_step(tf.train.latest_checkpoint(str(tmp_path))) == final
    assert "listener bug" in caplog.text


# ------------------------------------------------------------------ global step of shape [1]

@pytest.mark.parametrize("dtype", [tf.int32, tf.int64], ids=["int32", "int64"])
def test_global_step_of_shape_one(tmp_path, dtype):
    logdir = str(tmp_path)
    model = new_model(step_shape=[1], step_dtype=dtype)
    recorder = Recorder()
    sv = make_supervisor(model, logdir=logdir, save_model_secs=0, save_summaries_secs=0.05)
    sv.add_listener(recorder)
    with sv.managed_session() as sess:
        for _ in range(5):
            sess.run(model.train_op)
        assert sv.read_global_step(sess) == 5
        assert sv.save_checkpoint(sess) == os.path.join(logdir, "model.ckpt-5")
        sess.run(model.train_op)
        train_until(sess, model.train_op,
                    lambda: any(e.steps_per_sec > 0 for e in recorder.of(events.StepRate)),
                    "a positive step rate")
        final = sv.read_global_step(sess)
    assert final > 5
    assert tf.train.latest_checkpoint(logdir) == os.path.join(logdir, f"model.ckpt-{final}")
    assert sv.flush_events(DEADLINE)
    assert all(isinstance(e.step, int) for e in recorder.of(events.StepRate))
    assert all(isinstance(e.step, int) for e in recorder.of(events.SummaryWritten))
    assert tb_scalars(logdir, "global_step/sec")

    again = new_model(step_shape=[1], step_dtype=dtype)
    sv = make_supervisor(again, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    with sv.managed_session() as sess:
        assert sv.read_global_step(sess) == final
        sess.run(again.train_op)
        np.testing.assert_array_equal(sess.run(again.global_step), [final + 1])


# ----------------------------------------------------------------------- graph built in a block

def test_session_managed_outside_the_graph_block(tmp_path):
    """Built inside ``with tf.Graph().as_default():`` (what the eager-mode error suggests), the
    Supervisor must also work when its session is managed from an eager thread: restore, queue
    runners, services, final checkpoint."""
    logdir = str(tmp_path)
    for expected_start in (0, 3):
        model = new_model()
        sv = make_supervisor(model, logdir=logdir, save_model_secs=0.05, save_summaries_secs=0.05)
        with context.eager_mode():
            with sv.managed_session() as sess:
                assert sv.read_global_step(sess) == expected_start
                for _ in range(3):
                    sess.run(model.train_op)
        assert checkpoint_step(tf.train.latest_checkpoint(logdir)) == expected_start + 3


# ---------------------------------------------------------------------------------- bad input

def _assert_names(error, name, value):
    message = str(error)
    assert f"`{name}`" in message, message
    assert f"{name}={value!r}" in message, message


@pytest.mark.parametrize("name", ["save_summaries_secs", "save_model_secs",
                                  "recovery_wait_secs", "stop_grace_secs"])
@pytest.mark.parametrize("value", [-1, -0.5, "600"])
def test_invalid_intervals_are_refused_at_construction(tmp_path, name, value):
    logdir = str(tmp_path / "logs")
    with pytest.raises(ValueError) as raised:
        make_supervisor(new_model(), logdir=logdir, **{name: value})
    _assert_names(raised.value, name, value)
    assert not os.path.exists(os.path.join(logdir, "supervisor.lock"))


def test_logdir_that_is_a_file(tmp_path):
    path = tmp_path / "not_a_dir"
    path.write_text("precious")
    with pytest.raises(ValueError) as raised:
        make_supervisor(new_model(), logdir=str(path))
    _assert_names(raised.value, "logdir", str(path))
    assert path.read_text() == "precious"


def test_logdir_not_writable(tmp_path):
    if os.geteuid() != 0:
        logdir = tmp_path / "readonly"
        logdir.mkdir()
        logdir.chmod(0o500)
    else:
        # Root ignores permission bits: a directory that cannot be created (its parent is a
        # regular file) stands in for one that cannot be written.
        (tmp_path / "file").write_text("")
        logdir = tmp_path / "file" / "logs"
    try:
        with pytest.raises(ValueError) as raised:
            make_supervisor(new_model(), logdir=str(logdir))
    finally:
        if os.geteuid() != 0:
            logdir.chmod(0o700)
    _assert_names(raised.value, "logdir", str(logdir))


@pytest.mark.parametrize("kind", ["float", "shape_2", "shape_2x1"])
def test_global_step_not_an_integer_scalar(tmp_path, kind):
    graph = tf.Graph()
    with graph.as_default():
        if kind == "float":
            step = v1.Variable(0.0, name="global_step", trainable=False)
        else:
            shape = [2] if kind == "shape_2" else [2, 1]
            step = v1.Variable(tf.zeros(shape, tf.int64), name="global_step", trainable=False)
        with pytest.raises(ValueError) as raised:
            Supervisor(logdir=str(tmp_path), global_step=step)
    _assert_names(raised.value, "global_step", step)
    assert not os.path.exists(tmp_path / "supervisor.lock")


def test_init_fn_not_callable(tmp_path):
    with pytest.raises(TypeError) as raised:
        make_supervisor(new_model(), logdir=str(tmp_path), init_fn="restore_pretrained")
    _assert_names(raised.value, "init_fn", "restore_pretrained")


def test_saver_not_a_saver(tmp_path):
    with pytest.raises(TypeError) as raised:
        make_supervisor(new_model(), logdir=str(tmp_path), saver="model.ckpt")
    _assert_names(raised.value, "saver", "model.ckpt")


@pytest.mark.parametrize("how", ["no_logdir", "summary_writer_none"])
def test_summary_computed_without_writer(tmp_path, how):
    model = new_model()
    with model.graph.as_default():
        summary = v1.summary.scalar("x", tf.constant(1.0))
    kwargs = {} if how == "no_logdir" else {"logdir": str(tmp_path), "summary_writer": None}
    sv = make_supervisor(model, save_model_secs=0, **kwargs)
    with sv.managed_session() as sess:
        computed = sess.run(summary)
        with pytest.raises(RuntimeError, match="summary writer"):
            sv.summary_computed(sess, computed)


def test_start_standard_services_on_non_chief(tmp_path):
    graph = tf.Graph()
    with graph.as_default(), tf.device("/job:localhost/replica:0/task:0/device:CPU:0"):
        v1.train.get_or_create_global_step()
        sv = Supervisor(logdir=str(tmp_path), is_chief=False)
    with v1.Session(graph=graph) as sess:
        with pytest.raises(RuntimeError, match="chief"):
            sv.start_standard_services(sess)
    assert os.listdir(tmp_path) == []


def test_eager_mode_is_refused_with_the_fix(tmp_path):
    with context.eager_mode():
        assert tf.executing_eagerly()
        with pytest.raises(RuntimeError, match=re.escape(
                "tf.compat.v1.disable_eager_execution()")):
            Supervisor(logdir=str(tmp_path))
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------- non-chief waiting

def test_stop_ends_a_non_chief_waiting_for_the_chief(tmp_path):
    """A non-chief polls until the chief made the model ready; a stop requested meanwhile
    ends the wait (a clean end) instead of hours of polling."""
    server = tf.distribute.Server.create_local_server()
    with tf.Graph().as_default(), tf.compat.v1.device("/job:localhost/task:0"):
        tf.compat.v1.train.get_or_create_global_step()
        tf.compat.v1.Variable(1.0, name="w")
        sv = Supervisor(is_chief=False, recovery_wait_secs=0.05)
    seen = []
    sv.add_listener(seen.append)
    outcome = {}

    def worker():
        try:
            with sv.managed_session(server.target):
                outcome["session"] = True
        except BaseException as e:  # pylint: disable=broad-except
            outcome["error"] = e

    thread = threading.Thread(target=worker)
    thread.start()
    wait_for(lambda: any(isinstance(e, events.WaitingForChief) for e in seen), DEADLINE,
             what="the non-chief to wait for the chief")
    assert thread.is_alive()  # the model is not initialized: it goes on waiting
    sv.request_stop()
    thread.join(DEADLINE)
    assert not thread.is_alive(), "the stop did not end the wait"
    assert "session" not in outcome
    assert isinstance(outcome["error"], jupyter_supervisor.graph.stopping.WaitCancelledError)
    sv.flush_events(DEADLINE)
    stopped = [e for e in seen if isinstance(e, events.Stopped)]
    assert [(e.reason, e.exception) for e in stopped] == [(events.REQUESTED, None)]


def test_non_chief_wait_gives_up_after_max_wait_secs():
    server = tf.distribute.Server.create_local_server()
    with tf.Graph().as_default(), tf.compat.v1.device("/job:localhost/task:0"):
        tf.compat.v1.Variable(1.0, name="w")
        sv = Supervisor(is_chief=False, recovery_wait_secs=0.05)
    with pytest.raises(tf.errors.DeadlineExceededError, match="not ready after waiting"):
        sv.prepare_or_wait_for_session(server.target, max_wait_secs=0.3)


def test_the_step_rate_starts_again_when_the_step_goes_back(tmp_path):
    """A rollback takes the global step back: the step counter measures from there, instead of
    reporting a negative rate (in the event file and to the panel). With ``complete`` (the
    notebook's runs), nothing is written before the first step, and when it stops it records
    the steps since its newest record, if any."""
    from jupyter_supervisor.graph import services  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.eager.reporting import _EventFile  # pylint: disable=C0415
    # At the start, then one read per interval (the first before any step: nothing to
    # measure), and the reads of two stops: the first one measures the steps since the last
    # record, the second finds none (and writes nothing).
    steps = iter([100, 100, 200, 150, 250, 290, 290])
    clock = iter([0.0, 0.5, 1.5, 2.5, 3.5, 4.0])   # intervals of a second, the stop's half
    hub = events.EventHub()
    recorder = Recorder()
    hub.add_listener(recorder)
    writer = _EventFile(str(tmp_path), hub)
    service = services.StepCounterService(tf.compat.v1.train.Coordinator(), 1.0, "steps/sec",
                                          lambda: next(steps), writer, hub,
                                          clock=lambda: next(clock), complete=True)
    service.start_loop()
    for _ in range(4):
        service.run_loop()
    service.stop_loop()
    service.stop_loop()
    writer.close()
    assert hub.flush(DEADLINE)
    rates = [(e.step, e.steps_per_sec) for e in recorder.of(events.StepRate)]
    assert rates == [(200, 100.0), (250, 100.0), (290, 80.0)]
    [path] = glob.glob(os.path.join(str(tmp_path), "events.out.tfevents.*"))
    written = [(e.step, v.simple_value) for e in event_file_loader.LegacyEventFileLoader(path).Load()
               if e.HasField("summary") for v in e.summary.value]
    assert written == rates


def test_a_meta_graph_write_cut_short_is_swept_by_the_next_run(tmp_path):
    """A Saver writes its meta graph through TensorFlow's atomic write, to
    ``<checkpoint>.meta.tmp<hex>`` renamed once complete: a kill in between leaves that file,
    which the next chief on the logdir removes (seen in the fifty-kill test)."""
    logdir = str(tmp_path)
    model = new_model()
    sv = make_supervisor(model, logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    with sv.managed_session() as sess:
        sess.run(model.train_op)
    meta = os.path.join(logdir, "model.ckpt-1.meta")
    cut = f"{meta}.tmp{uuid.uuid4().hex}"
    with open(meta, "rb") as f, open(cut, "wb") as out:
        out.write(f.read()[:100])
    kept = os.path.join(logdir, "model.ckpt-1.meta.tmp-notes")  # not TensorFlow's: kept
    open(kept, "w").close()
    sv = make_supervisor(new_model(), logdir=logdir, save_model_secs=0, save_summaries_secs=0)
    with sv.managed_session():
        pass
    assert not os.path.exists(cut) and os.path.exists(kept)
    assert checkpoint_steps(logdir) == [1]
