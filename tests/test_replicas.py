"""Replicas on TensorFlow's own distributed runtime: real tf.distribute.Server processes.

Each test runs a cluster on loopback with free ports: a parameter server (/job:ps/task:0), the
chief (/job:worker/task:0) and a worker (/job:worker/task:1). Every task is the script below,
run with this interpreter; it reports what happens as JSON lines on stdout (Supervisor events,
SessionManager's "waiting for model" polls, each training step) and obeys "quit" on stdin. The
test reads those lines on one thread per process and waits on them with timeouts; tasks are
killed with SIGKILL to inject faults.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from helpers import child_env, free_ports, newest_checkpoint

pytestmark = pytest.mark.cluster

TASK_SCRIPT = r'''
import json
import logging
import sys
import threading
import time

cfg = json.loads(sys.argv[1])

import tensorflow as tf
from jupyter_supervisor import Supervisor, cluster, events
from helpers import build_model

_print_lock = threading.Lock()


def say(kind, **fields):
    fields.update(kind=kind, t=time.monotonic())
    with _print_lock:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


job, task = cfg["job"], cfg["task"]
server = cluster.start_server(cfg["cluster"], job, task)
if job == "ps":
    say("serving", target=server.target)
    server.join()

tf.compat.v1.disable_eager_execution()


class SessionManagerLines(logging.Handler):
    """Reports SessionManager's polls of a waiting non-chief and its local_init_op runs."""

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("Waiting for model to be ready"):
            say("poll", message=message)
        elif message.startswith("Running local_init_op"):
            say("local_init")


tf_logger = logging.getLogger("tensorflow")
tf_logger.setLevel(logging.INFO)
tf_logger.addHandler(SessionManagerLines())

with tf.compat.v1.device(cluster.replica_device_setter(cfg["cluster"], job, task)):
    model = build_model(summaries=())  # tests/helpers.py, on the PYTHONPATH of child_env()
    global_step, w = model.global_step, model.w
    with tf.control_dependencies([model.train_op]):
        step_after = tf.identity(global_step.read_value())
with tf.compat.v1.device(f"/job:{job}/task:{task}"):
    # A local variable of this task, initialized from the ps: its local_init_op can only run
    # once the chief made `w`, which ready_for_local_init_op checks.
    w_at_start = tf.compat.v1.Variable(
        w.read_value(), trainable=False, name="w_at_start",
        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])

is_chief = cluster.is_chief_task(cfg["cluster"], job, task)
sv = Supervisor(
    is_chief=is_chief, logdir=cfg["logdir"], recovery_wait_secs=0.5, save_model_secs=1,
    save_summaries_secs=1, stop_grace_secs=5,
    ready_for_local_init_op=tf.compat.v1.report_uninitialized_variables(
        tf.compat.v1.global_variables()))


def on_event(event):
    if isinstance(event, events.WaitingForChief):
        say("waiting", master=event.master)
    elif isinstance(event, events.SessionReady):
        say("ready", step=event.step, restored_from=event.restored_from,
            is_chief=event.is_chief)
    elif isinstance(event, events.CheckpointSaved):
        say("checkpoint", step=event.step, path=event.path)
    elif isinstance(event, events.Stopped):
        say("stopped", reason=event.reason,
            error=type(event.exception).__name__ if event.exception else None,
            message=str(event.exception) if event.exception else None)


sv.add_listener(on_event)
say("supervisor", is_chief=sv.is_chief, logdir=sv.logdir, save_path=sv.save_path,
    has_summary_writer=sv.summary_writer is not None)

quit_requested = threading.Event()


def read_commands():
    for line in sys.stdin:
        if line.strip() == "quit":
            quit_requested.set()


threading.Thread(target=read_commands, daemon=True).start()

config = cluster.session_config(job, task)
local_steps = 0
# TensorFlow's advice for replicas: a session that fails because a task went away
# (AbortedError, UnavailableError) is recreated; the chief restores, the others wait for it.
while True:
    try:
        say("starting")
        with sv.managed_session(server.target, config=config) as sess:
            say("w_at_start", value=float(sess.run(w_at_start)))
            while not sv.should_stop():
                if quit_requested.is_set():
                    sv.request_stop()
                    break
                step = int(sess.run(step_after))
                local_steps += 1
                say("step", local=local_steps, step=step)
                sv.coord.wait_for_stop(0.02)  # pace: two trainers share two cores
    except (tf.errors.AbortedError, tf.errors.UnavailableError) as e:
        sv.flush_events(10)
        say("error", error=type(e).__name__, message=str(e))
        continue
    sv.flush_events(10)
    say("done", local=local_steps)
    break
'''

STARTUP = 90      # seconds: importing TensorFlow in three processes on two busy cores
PROGRESS = 30     # seconds: anything that follows once a process runs
RECOVERABLE = ("AbortedError", "UnavailableError")
INITIAL_W = 5.0
ROLES = {"ps": ("ps", 0), "chief": ("worker", 0), "worker": ("worker", 1)}


class Task:
    """One task process; a reader thread collects its stdout records for the test to wait on."""

    def __init__(self, name, argv, env, stderr_path):
        self.name = name
        self.stderr_path = stderr_path
        with open(stderr_path, "ab") as stderr:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=stderr, env=env, text=True)
        self.records = []                  # guarded by _cond
        self._eof = False                  # guarded by _cond
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                record = {"kind": "text", "text": line.rstrip()}
            with self._cond:
                self.records.append(record)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def mark(self):
        """The index of the next record: expect(..., after=mark) looks only at later ones."""
        with self._cond:
            return len(self.records)

    def all(self, kind, after=0):
        with self._cond:
            return [r for r in self.records[after:] if r["kind"] == kind]

    def kinds(self, until):
        with self._cond:
            return {r["kind"] for r in self.records[:until]}

    def last(self, kind):
        found = self.all(kind)
        return found[-1] if found else None

    def expect(self, kind, where=lambda record: True, timeout=PROGRESS, after=0, what=""):
        """Waits for a record of ``kind`` matching ``where`` at index >= ``after``.

        Returns (index, record). Fails with the process's recent output if it does not come
        in ``timeout`` seconds or the process exits first.
        """
        deadline = time.monotonic() + timeout
        index = after
        with self._cond:
            while True:
                while index < len(self.records):
                    record = self.records[index]
                    index += 1
                    if record["kind"] == kind and where(record):
                        return index - 1, record
                remaining = deadline - time.monotonic()
                if self._eof or remaining <= 0:
                    break
                self._cond.wait(remaining)
        state = (f"exited with {self.proc.poll()}" if self._eof else f"no such line in {timeout}s")
        raise AssertionError(f"{self.name}: expected a {kind!r} record {what}; {state}.\n"
                             + self.diagnostics())

    def diagnostics(self):
        with self._cond:
            recent = [r for r in self.records if r["kind"] != "step"][-25:]
            steps = [r for r in self.records if r["kind"] == "step"][-3:]
        try:
            with open(self.stderr_path, errors="replace") as f:
                stderr = f.read()[-3000:]
        except OSError:
            stderr = ""
        return (f"--- {self.name} records (last, without steps) ---\n"
                + "\n".join(json.dumps(r) for r in recent)
                + f"\n--- {self.name} last steps ---\n" + "\n".join(json.dumps(r) for r in steps)
                + f"\n--- {self.name} stderr (tail) ---\n{stderr}")

    def send(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def kill(self):
        """SIGKILL, as a crashed machine would; waits until the process is gone."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=PROGRESS)
        self._reader.join(timeout=PROGRESS)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


class Cluster:
    """A ps, a chief and a worker on loopback; start(role) (re)starts one of them."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.script = tmp_path / "task.py"
        self.script.write_text(TASK_SCRIPT)
        ps, chief, worker = (f"127.0.0.1:{p}" for p in free_ports(3))
        self.spec = {"ps": [ps], "worker": [chief, worker]}
        self.logdir = tmp_path / "logdir"
        self.worker_logdir = tmp_path / "worker_logdir"
        self.env = child_env(PYTHONUNBUFFERED="1")
        self.tasks = {}
        self._started = []

    def start(self, role):
        job, task = ROLES[role]
        logdir = {"ps": None, "chief": self.logdir, "worker": self.worker_logdir}[role]
        cfg = {"cluster": self.spec, "job": job, "task": task,
               "logdir": os.fspath(logdir) if logdir else None}
        generation = sum(1 for t in self._started if t.name.startswith(role)) + 1
        name = f"{role}#{generation}"
        process = Task(name, [sys.executable, os.fspath(self.script), json.dumps(cfg)],
                       self.env, self.tmp_path / f"{role}-{generation}.stderr")
        self.tasks[role] = process
        self._started.append(process)
        return process

    def kill(self, role):
        self.tasks[role].kill()

    def close(self):
        for process in self._started:
            process.kill()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def start_training_cluster(cluster):
    """Starts all three tasks; returns once chief and worker both trained a few steps."""
    ps, chief, worker = (cluster.start(role) for role in ("ps", "chief", "worker"))
    ps.expect("serving", timeout=STARTUP)
    chief.expect("ready", timeout=STARTUP)
    worker.expect("ready", timeout=STARTUP)
    chief.expect("step", lambda r: r["local"] >= 20)
    worker.expect("step", lambda r: r["local"] >= 20)
    return ps, chief, worker


def test_worker_started_first_waits_for_the_chief_and_both_advance_one_global_step(cluster):
    ps = cluster.start("ps")
    worker = cluster.start("worker")
    ps.expect("serving", timeout=STARTUP)
    _, sup = worker.expect("supervisor", timeout=STARTUP)
    # A non-chief ignores its logdir: no checkpoints, no summaries, no event files.
    assert sup == dict(sup, is_chief=False, logdir=None, save_path=None, has_summary_writer=False)
    worker.expect("waiting", lambda r: r["master"].startswith("grpc://127.0.0.1:"))
    # It polls, finding the ps variables uninitialized; it runs neither its local_init_op
    # (ready_for_local_init_op holds it back) nor, as a non-chief, any init_op.
    _, first_poll = worker.expect("poll", what="(a poll while no chief runs)")
    second_poll_index, _ = worker.expect("poll", after=worker.mark())
    assert "Variables not initialized: global_step, w" in first_poll["message"]
    assert not {"local_init", "ready", "step"} & worker.kinds(until=second_poll_index)

    chief = cluster.start("chief")
    _, chief_starting = chief.expect("starting", timeout=STARTUP)
    _, chief_ready = chief.expect("ready")
    assert (chief_ready["restored_from"], chief_ready["is_chief"]) == (None, True)
    _, worker_ready = worker.expect("ready", what="once the chief initialized the model")
    assert worker_ready["t"] > chief_starting["t"]
    assert worker_ready["is_chief"] is False and worker_ready["restored_from"] is None
    local_init_index, _ = worker.expect("local_init")
    assert local_init_index > second_poll_index
    _, w_at_start = worker.expect("w_at_start")
    assert 1.0 < w_at_start["value"] <= INITIAL_W  # the chief's w, read by the local init

    # One shared global step: each task sees it rise past the steps it did itself.
    worker.expect("step", lambda r: r["step"] > r["local"] + 20, what="(the chief's steps too)")
    chief.expect("step", lambda r: r["step"] > r["local"] + 20, what="(the worker's steps too)")

    worker.send("quit")
    _, worker_done = worker.expect("done")
    chief.send("quit")
    _, chief_done = chief.expect("done")
    total = worker_done["local"] + chief_done["local"]
    # Every step of either task incremented the one global step on the ps, exactly once.
    assert chief.last("step")["step"] == total
    _, final = chief.expect("checkpoint", lambda r: r["step"] == total,
                            what=f"(the final checkpoint at step {total})")
    assert newest_checkpoint(cluster.logdir) == (final["path"], total)
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(cluster.logdir))
    assert not cluster.worker_logdir.exists()
    assert worker.all("checkpoint") == []
    assert chief.all("error") == [] and worker.all("error") == []


def test_killed_worker_rejoins_without_reinitializing_anything(cluster):
    _, chief, worker = start_training_cluster(cluster)
    step_at_kill = worker.last("step")["step"]
    cluster.kill("worker")

    # The chief trains on alone: its session sees only the ps and itself.
    chief_mark = chief.mark()
    chief.expect("step", lambda r: r["step"] > step_at_kill + 20, after=chief_mark)
    step_at_restart = chief.last("step")["step"]

    worker = cluster.start("worker")
    worker.expect("waiting", timeout=STARTUP)
    _, ready = worker.expect("ready")
    assert ready["step"] >= step_at_restart, "the shared global step was reset"
    _, w_at_start = worker.expect("w_at_start")
    assert 1.0 < w_at_start["value"] < INITIAL_W - 0.01, "w was re-initialized"
    assert worker.all("poll") == []  # the model was ready at once: nothing to wait for
    worker.expect("step", lambda r: r["local"] >= 20 and r["step"] > r["local"] + step_at_restart)
    chief.expect("step", lambda r: r["step"] > ready["step"] + 20, after=chief.mark())

    # The chief never noticed: one session, no error, its global step never went back.
    assert len(chief.all("ready")) == 1
    assert chief.all("stopped") == [] and chief.all("error") == []
    chief_steps = [r["step"] for r in chief.all("step")]
    assert chief_steps == sorted(chief_steps)


def test_killed_chief_restarts_from_its_newest_checkpoint_while_the_worker_trains_on(cluster):
    _, chief, worker = start_training_cluster(cluster)
    chief.expect("checkpoint", lambda r: r["step"] >= 20)
    cluster.kill("chief")
    newest, checkpoint_step = newest_checkpoint(cluster.logdir)
    step_at_kill = worker.last("step")["step"]

    # The worker's session involves only the ps and the worker: it goes on without the chief.
    worker.expect("step", lambda r: r["step"] > step_at_kill + 20, after=worker.mark())
    worker_step_before_restart = worker.last("step")["step"]

    worker_mark = worker.mark()
    chief = cluster.start("chief")   # takes over the lock the killed chief left in the logdir
    _, ready = chief.expect("ready", timeout=STARTUP)
    assert ready["restored_from"] == newest and ready["is_chief"] is True
    # The ps variables are the checkpoint's again: the worker's steps since it are undone.
    assert checkpoint_step <= ready["step"] < worker_step_before_restart
    chief.expect("step", lambda r: r["step"] > ready["step"] + 20)
    worker.expect("step", lambda r: r["step"] > ready["step"] + 20, after=worker_mark)
    chief.expect("checkpoint", lambda r: r["step"] > ready["step"])
    assert worker.all("error") == [] and worker.all("stopped") == []
    assert len(worker.all("ready")) == 1


def test_restarted_ps_is_reported_and_the_chief_restores_the_newest_checkpoint(cluster):
    _, chief, worker = start_training_cluster(cluster)
    chief.expect("checkpoint", lambda r: r["step"] >= 20)
    chief_mark, worker_mark = chief.mark(), worker.mark()
    cluster.kill("ps")

    # Both sessions fail at once; the Supervisors report it (Stopped, with the error).
    stops = []
    for task, mark in ((chief, chief_mark), (worker, worker_mark)):
        _, stopped = task.expect("stopped", after=mark, what="(the ps went away)")
        assert stopped["reason"] == "error" and stopped["error"] in RECOVERABLE, stopped
        assert "/job:ps/replica:0/task:0" in stopped["message"], stopped["message"]
        stops.append(stopped)
    # No checkpoint can be written without the ps: the newest one is final now.
    newest, checkpoint_step = newest_checkpoint(cluster.logdir)
    assert checkpoint_step >= 20

    ps = cluster.start("ps")    # a new process: the variables it held are gone
    ps.expect("serving", timeout=STARTUP)

    # managed_session re-raises the error; the scripts retry it, as TensorFlow advises.
    for task, stopped, mark in ((chief, stops[0], chief_mark), (worker, stops[1], worker_mark)):
        _, error = task.expect("error", after=mark, what="(re-raised by managed_session)")
        assert error["error"] == stopped["error"]
    ready_index, ready = chief.expect("ready", after=chief_mark)
    assert ready["restored_from"] == newest
    assert ready["step"] >= checkpoint_step          # restored, not initialized from step 0
    _, w_at_start = chief.expect("w_at_start", after=ready_index)
    assert 1.0 < w_at_start["value"] < INITIAL_W - 0.01

    _, worker_ready = worker.expect("ready", after=worker_mark)
    assert worker_ready["step"] >= checkpoint_step
    worker.expect("step", lambda r: r["step"] > worker_ready["step"] + 20, after=worker_mark)
    chief.expect("step", lambda r: r["step"] > ready["step"] + 20, after=chief_mark)
    chief.expect("checkpoint", lambda r: r["step"] > ready["step"], after=chief_mark)


def test_a_ps_that_stays_down_is_reported_and_managed_session_returns(cluster):
    # The error is known as soon as the ps goes: managed_session must re-raise it then, not
    # only when (if ever) the ps comes back, or a notebook run hangs in "stopping" for good.
    _, chief, worker = start_training_cluster(cluster)
    marks = {chief: chief.mark(), worker: worker.mark()}
    cluster.kill("ps")
    for task, mark in marks.items():
        _, stopped = task.expect("stopped", after=mark, what="(the ps went away)")
        assert stopped["error"] in RECOVERABLE, stopped
        # stop_grace_secs=5 bounds the Supervisor's own stop; give it that and then some.
        _, error = task.expect("error", after=mark,
                               what="(managed_session re-raising while the ps is down)")
        assert error["error"] == stopped["error"]
