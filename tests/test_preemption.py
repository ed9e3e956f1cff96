"""The ways a kernel is asked to end, each in a real kernel driven through jupyter_client with
real signals: every live run stops at a step boundary and writes its final checkpoint first.

Each kernel trains two runs at once: a Keras fit on the eager backend (``%%supervise``) and TF1
graph code on the graph backend (a ``TrainingRun`` given its own graph: a kernel in eager mode
can run both), with no periodic checkpoint due (``--save-model-secs 600``). Each body writes
the step it reached to a file, so the test knows the step when the signal came. Afterwards the
newest checkpoint of each holds at least that step, restores with plain TensorFlow, the lock
file is gone and the event file's SessionLog.STOP says why the run ended. Also: the
interpreter's exit (atexit, in a plain Python process), and a final save cut by SIGKILL in the
middle of its write (the previous checkpoint stays the latest; the next holder of the lock says
the stop was cut).
"""
import glob
import json
import os
import signal
import subprocess
import sys

import pytest

from helpers import KERNEL_STARTUP, Kernel, child_env, wait_for

pytestmark = pytest.mark.kernel

DEADLINE = 60.0   # seconds; generous for a loaded 2-core machine, never reached when passing

SETUP = r'''
import os, pathlib, keras, eager_models
from jupyter_supervisor import RunConfig, TrainingRun
x, y = eager_models.data(n=64)
model = eager_models.make_model()

def report(name, step):
    """Writes the step a run reached, whole or not at all (a signal may end the kernel
    between any two instructions: a file cut there would read as no step)."""
    pathlib.Path(name + ".part").write_text(str(int(step)))
    os.replace(name + ".part", name + ".reached")

class Reached(keras.callbacks.Callback):
    """Writes the step each batch ended at."""
    def on_train_batch_end(self, batch, logs=None):
        report("eager", self.model.optimizer.iterations)

graph_model = build_model(new_graph=True)
graph_op = graph_model.train_op
GRAPH_BODY = """
while not sv.should_stop():
    report("graph", sess.run(graph_op))
    time.sleep(0.001)
"""
'''
EAGER_RUN = ("%%supervise --logdir eager --save-model-secs 600\n"
             "model.fit(x, y, batch_size=8, epochs=100000, verbose=0,\n"
             "          callbacks=[sv.callback, Reached()])")
GRAPH_RUN = ("TrainingRun(RunConfig(logdir='graph', save_model_secs=600), GRAPH_BODY, "
             "globals()).start(graph=graph_model.graph)")
RUNS = ("eager", "graph")
HOOKED = ("[signal.getsignal(s) not in (signal.SIG_DFL, None) "
          "for s in (signal.SIGTERM, signal.SIGHUP)]")


def reached(workdir, name):
    """The step the run's body last reported, or None (not yet)."""
    try:
        return int((workdir / f"{name}.reached").read_text())
    except FileNotFoundError:
        return None


def start_runs(kernel):
    """Starts both runs in ``kernel``; returns the steps they reached once both train."""
    kernel.ok("import signal\n" + SETUP)
    kernel.ok(EAGER_RUN)
    kernel.ok(GRAPH_RUN)
    for name in RUNS:
        wait_for(lambda n=name: (reached(kernel.workdir, n) or 0) > 10, DEADLINE,
                 what=f"{name} training")
        assert (kernel.workdir / name / "supervisor.lock").exists()
    return {name: reached(kernel.workdir, name) for name in RUNS}


def gone(pid):
    """True once ``pid`` ended (a zombie counts: whoever adopted it may not reap it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def stop_record(logdir):
    """The msg of the last SessionLog.STOP in ``logdir``'s newest event file."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    newest = sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))[-1]
    stops = [e.session_log.msg for e in tf.compat.v1.train.summary_iterator(newest)
             if e.HasField("session_log") and e.session_log.status == e.session_log.STOP]
    return stops[-1] if stops else None


def check_saved(workdir, before, why):
    """Both runs' newest checkpoints hold at least the steps of ``before`` and restore with
    plain TensorFlow; the locks are gone; the event files say ``why``."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import eager_models  # pylint: disable=import-outside-toplevel
    from helpers import build_model  # pylint: disable=import-outside-toplevel
    for name in RUNS:
        logdir = str(workdir / name)
        assert not os.path.exists(os.path.join(logdir, "supervisor.lock")), name
        path = tf.train.latest_checkpoint(logdir)
        assert path is not None, f"{name}: no checkpoint"
        step = int(path.rsplit("-", 1)[1])
        assert step >= reached(workdir, name) >= before[name] > 10, (name, step, before)
        assert stop_record(logdir) == why, name
    fresh = eager_models.make_model(seed=1)
    fresh.optimizer.build(fresh.trainable_variables)
    path = tf.train.latest_checkpoint(str(workdir / "eager"))
    tf.train.Checkpoint(model=fresh, optimizer=fresh.optimizer).restore(
        path).assert_existing_objects_matched()
    assert int(fresh.optimizer.iterations) == int(path.rsplit("-", 1)[1])
    graph = build_model(new_graph=True)
    path = tf.train.latest_checkpoint(str(workdir / "graph"))
    with tf.compat.v1.Session(graph=graph.graph) as sess:
        with graph.graph.as_default():
            tf.compat.v1.train.Saver().restore(sess, path)
        assert sess.run(graph.global_step) == int(path.rsplit("-", 1)[1])


# ------------------------------------------------------------------------------- signals

def terminate(kernel):
    """SIGTERM to the kernel's process, which ends as SIGTERM ends it (after the final
    checkpoints)."""
    process = kernel.km.provisioner.process
    process.send_signal(signal.SIGTERM)
    process.wait(DEADLINE)
    assert process.returncode == -signal.SIGTERM


def test_sigterm_saves_every_live_run_then_ends_the_kernel(tmp_path):
    kernel = Kernel(tmp_path)
    try:
        # Nothing is hooked in a kernel that never started a run.
        assert kernel.value(f"(lambda signal: {HOOKED})(__import__('signal'))") == [False, False]
        before = start_runs(kernel)
        assert kernel.value(HOOKED) == [True, True]
        terminate(kernel)
    finally:
        kernel.kc.stop_channels()
        kernel.km.shutdown_kernel(now=True)
    check_saved(tmp_path, before, "the kernel received SIGTERM")


LONG_VALIDATION = r'''
import keras, eager_models
x, y = eager_models.data(n=64)
model = eager_models.make_model()
endless = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()

class Validating(keras.callbacks.Callback):
    def on_test_begin(self, logs=None):
        pathlib.Path("validating").touch()
'''


def test_sigterm_during_a_validation_longer_than_the_deadline_keeps_the_step(tmp_path):
    """A fit whose validation would run for days (longer than STOP_SECS): the stop's checkpoint
    is written at the next validation batch, of the step the epoch ended at, and the kernel
    ends with SIGTERM's own status."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    kernel = Kernel(tmp_path)
    try:
        kernel.ok(LONG_VALIDATION)
        kernel.ok("%%supervise --logdir eager --save-model-secs 600\n"
                  "model.fit(x, y, batch_size=8, epochs=3, verbose=0, validation_data=endless,"
                  " validation_steps=10**9, callbacks=[sv.callback, Validating()])")
        wait_for(lambda: (tmp_path / "validating").exists(), DEADLINE, what="the validation")
        terminate(kernel)
    finally:
        kernel.kc.stop_channels()
        kernel.km.shutdown_kernel(now=True)
    path = tf.train.latest_checkpoint(str(tmp_path / "eager"))
    assert path is not None and path.endswith("-8")   # the first epoch's 8 batches
    reader = tf.train.load_checkpoint(path)
    # Its batches all trained, its end (validation, callbacks) still to run on a resume.
    assert [int(reader.get_tensor(f"jupyter_supervisor/{n}/.ATTRIBUTES/VARIABLE_VALUE"))
            for n in ("epoch", "batch")] == [0, 8]
    assert not (tmp_path / "eager" / "supervisor.lock").exists()


def test_sighup_saves_every_live_run_then_calls_the_handler_installed_before(tmp_path):
    kernel = Kernel(tmp_path)
    try:
        kernel.ok("import signal\n"
                  "signal.signal(signal.SIGHUP, lambda n, f: pathlib.Path('hup').touch())\n"
                  "mine = signal.getsignal(signal.SIGHUP)")
        before = start_runs(kernel)
        assert kernel.value("signal.getsignal(signal.SIGHUP) is not mine")
        kernel.km.provisioner.process.send_signal(signal.SIGHUP)
        # The notebook's own handler ran after the runs stopped; it keeps the kernel alive.
        wait_for(lambda: (tmp_path / "hup").exists(), DEADLINE, what="the notebook's handler")
        check_saved(tmp_path, before, "the kernel received SIGHUP")
        assert kernel.value("[get_run(n).status for n in ('eager', 'graph')]") == \
            ["stopped", "stopped"]
        table = kernel.ok("%supervise").stream()
        assert "eager stopped: the kernel received SIGHUP" in table.splitlines()
        # With no live run, the handlers before ours are back.
        kernel.wait_until("signal.getsignal(signal.SIGHUP) is mine and "
                          "signal.getsignal(signal.SIGTERM) == signal.SIG_DFL",
                          "the handlers put back")
        # A new session on the logdir says why the last one ended (from its event file).
        kernel.ok("%supervise resume eager")
        kernel.ok("get_run('graph').resume()")
        for name in RUNS:
            kernel.wait_until(f"'stopped: the kernel received SIGHUP.' in "
                              f"get_run({name!r}).history.snapshot().output", "the note")
        kernel.ok("jupyter_supervisor.notebook.run.stop_all()")
    finally:
        kernel.kc.stop_channels()
        kernel.km.shutdown_kernel(now=True)


def test_a_signal_set_to_be_ignored_stays_ignored_while_runs_live(tmp_path):
    """A kernel started under `nohup` ignores SIGHUP (and a job may be told to ignore SIGTERM):
    a live run leaves that as it is, and neither signal stops it nor ends the kernel."""
    ignored = "[signal.getsignal(s) == signal.SIG_IGN for s in (signal.SIGHUP, signal.SIGTERM)]"
    kernel = Kernel(tmp_path)
    try:
        kernel.ok("import signal\n"
                  "for s in (signal.SIGHUP, signal.SIGTERM):\n"
                  "    signal.signal(s, signal.SIG_IGN)")
        start_runs(kernel)
        assert kernel.value(ignored) == [True, True]
        process = kernel.km.provisioner.process
        process.send_signal(signal.SIGHUP)
        process.send_signal(signal.SIGTERM)
        # The main thread runs Python's signal handlers before it executes the next cell: had
        # one been installed, it would have stopped the runs by the end of this one.
        kernel.ok("pass")
        assert process.poll() is None
        assert kernel.value("[get_run(n).status for n in ('eager', 'graph')]") == \
            ["running", "running"]
        signalled = {name: wait_for(lambda n=name: reached(tmp_path, n), DEADLINE)
                     for name in RUNS}
        for name in RUNS:
            wait_for(lambda n=name: (reached(tmp_path, n) or 0) > signalled[n] + 20, DEADLINE,
                     what=f"{name} training on after the signals")
        kernel.ok("jupyter_supervisor.notebook.run.stop_all()")
        assert kernel.value(ignored) == [True, True]
    finally:
        kernel.kc.stop_channels()
        kernel.km.shutdown_kernel(now=True)


# -------------------------------------------------------------------- the server dies

LAUNCHER = """
import sys, time
from jupyter_client.manager import KernelManager
km = KernelManager(kernel_name="python3")
km.start_kernel(cwd=sys.argv[1])
print(km.connection_file, km.provisioner.process.pid, flush=True)
time.sleep(3600)
"""


class OrphanedKernel(Kernel):
    """A kernel whose parent is a process of its own (the server), which a test can kill."""

    def _start(self):
        from jupyter_client import BlockingKernelClient  # pylint: disable=import-outside-toplevel
        self.server = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(self.workdir)],
                                       env=child_env(), stdout=subprocess.PIPE, text=True)
        connection_file, pid = self.server.stdout.readline().split()
        self.pid = int(pid)
        self.kc = BlockingKernelClient(connection_file=connection_file)
        self.kc.load_connection_file()
        # No heartbeat channel: a client without a KernelManager takes the kernel for dead when
        # it misses beats (a loaded machine, at start-up), and wait_for_ready then fails at
        # once ("Kernel died before replying to kernel_info"). The test watches the process.
        self.kc.start_channels(hb=False)
        self.kc.wait_for_ready(timeout=KERNEL_STARTUP)
        self.ok(__import__("helpers").KERNEL_SETUP)


def test_the_servers_death_saves_every_live_run_before_the_kernel_ends(tmp_path):
    kernel = OrphanedKernel(tmp_path)
    try:
        before = start_runs(kernel)
        kernel.server.kill()  # SIGKILL: the server ends without a word to its kernel
        kernel.server.wait()
        # ipykernel's parent poller notices within a second and ends the kernel.
        wait_for(lambda: gone(kernel.pid), DEADLINE, what="the orphaned kernel's end")
    finally:
        kernel.kc.stop_channels()
        if not gone(kernel.pid):
            os.kill(kernel.pid, signal.SIGKILL)
    check_saved(tmp_path, before, "the server died")


# ------------------------------------------------------------ restart and shutdown requests

@pytest.mark.parametrize("how", ["restart", "shutdown"])
def test_a_restart_or_shutdown_from_the_page_saves_every_live_run(tmp_path, how):
    kernel = Kernel(tmp_path)
    try:
        assert kernel.km.shutdown_wait_time == 5.0  # the client's default: SIGTERM at 2.5 s
        before = start_runs(kernel)
        process = kernel.km.provisioner.process
        if how == "restart":
            kernel.km.restart_kernel(now=False)
        else:
            kernel.km.shutdown_kernel(now=False)
        process.wait(DEADLINE)
        # Whether the kernel ended by itself or by the client's SIGTERM (at 2.5 s, which waits
        # for the stop in progress) depends on the machine's speed; SIGKILL was not needed.
        assert process.returncode in (0, -signal.SIGTERM), process.returncode
    finally:
        kernel.kc.stop_channels()
        if kernel.km.has_kernel:
            kernel.km.shutdown_kernel(now=True)
    check_saved(tmp_path, before, "the kernel was restarted" if how == "restart"
                else "the kernel was shut down")


# ------------------------------------------------------------------------- atexit

EXITING = """
import pathlib, sys
from helpers import build_model, wait_for
from jupyter_supervisor import RunConfig, TrainingRun
model = build_model(new_graph=True)
run = TrainingRun(RunConfig(logdir=sys.argv[1], save_model_secs=600),
                  "while not sv.should_stop():\\n    reached = sess.run(op)\\n",
                  {"op": model.train_op})
run.start(graph=model.graph)
wait_for(lambda: (run.global_step or 0) > 10, 60)
print(run.global_step, flush=True)
sys.exit(3)   # the interpreter's exit: atexit stops the run first
"""


def test_the_interpreters_exit_saves_every_live_run(tmp_path):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    logdir = str(tmp_path / "exiting")
    done = subprocess.run([sys.executable, "-c", EXITING, logdir], env=child_env(),
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 3, done.stderr
    before = int(done.stdout.split()[0])
    assert int(tf.train.latest_checkpoint(logdir).rsplit("-", 1)[1]) >= before > 10
    assert not os.path.exists(os.path.join(logdir, "supervisor.lock"))
    assert stop_record(logdir) == "the Python process exited"


# ----------------------------------------------------------------- a save cut by SIGKILL

BIG = 100_000_000   # float32 weights, 400 MB: a write long enough to be caught in the middle
BIG_RUNS = {
    "eager": ("big = tf.Variable(tf.zeros([%d]))" % BIG,
              "%%supervise --logdir big --save-model-secs 600\n"
              "sv.track(big=big)\n"
              "while not sv.should_stop():\n"
              "    big[:1].assign(big[:1] + 1.0)\n"
              "    sv.step()\n"),
    "graph": ("big_model = build_model(new_graph=True, w_shape=(%d,))" % BIG,
              "TrainingRun(RunConfig(logdir='big', save_model_secs=600), 'while not "
              "sv.should_stop():\\n    sess.run(big_model.train_op)\\n', globals())"
              ".start(graph=big_model.graph)"),
}


def restored_step(backend, path):
    """The step the checkpoint ``path`` restores, read back with plain TensorFlow."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from helpers import build_model  # pylint: disable=import-outside-toplevel
    if backend == "eager":
        big = tf.Variable(tf.zeros([BIG]))  # the body adds 1 to its first weight per step
        tf.train.Checkpoint(big=big).read(path).expect_partial() \
            .assert_existing_objects_matched()
        return int(big[0])
    graph = build_model(new_graph=True, w_shape=(BIG,))
    with tf.compat.v1.Session(graph=graph.graph) as sess:
        with graph.graph.as_default():
            tf.compat.v1.train.Saver().restore(sess, path)
        return int(sess.run(graph.global_step))


@pytest.mark.parametrize("backend", ["eager", "graph"])
def test_a_final_save_cut_by_sigkill_leaves_the_previous_checkpoint_latest(tmp_path, caplog,
                                                                           backend):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.lockfile import LogdirLock  # pylint: disable=import-outside-toplevel
    kernel = Kernel(tmp_path)
    logdir = str(tmp_path / "big")
    try:
        kernel.ok("from jupyter_supervisor import RunConfig, TrainingRun\n"
                  + BIG_RUNS[backend][0])
        kernel.ok(BIG_RUNS[backend][1])
        kernel.wait_until("(get_run('big').global_step or 0) > 3", "training")
        saved = kernel.ok("%supervise save big").stream().strip().rsplit(": ", 1)[1]
        saved = str(tmp_path / saved)  # the kernel's working directory is tmp_path
        kernel.wait_until(f"get_run('big').global_step > {int(saved.rsplit('-', 1)[1])} + 3",
                          "steps after the save")
        process = kernel.km.provisioner.process
        process.send_signal(signal.SIGTERM)
        # The final checkpoint's files appear under TensorFlow's temporary name first.
        wait_for(lambda: glob.glob(os.path.join(logdir, "model.ckpt-*_temp*")), DEADLINE,
                 interval=0.002, what="the final save's write")
        process.kill()
        process.wait(DEADLINE)
    finally:
        kernel.kc.stop_channels()
        kernel.km.shutdown_kernel(now=True)
    assert process.returncode == -signal.SIGKILL
    assert tf.train.latest_checkpoint(logdir) == saved
    # (A graph save made from another thread, as TensorFlow's, names the step it read first:
    # the variables it writes may be steps further.)
    step, named = restored_step(backend, saved), int(saved.rsplit("-", 1)[1])
    assert step == named if backend == "eager" else step >= named
    # The lock left behind says the stop was cut; the next run on the logdir reports it.
    with open(os.path.join(logdir, "supervisor.lock"), encoding="utf-8") as f:
        assert json.load(f)["stopping"] == "the kernel received SIGTERM"
    lock = LogdirLock(logdir)
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        lock.acquire()
    lock.release()
    assert any("was stopped (the kernel received SIGTERM) but its process ended before the "
               "final checkpoint was written" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("why, knob", [
    ("the kernel was restarted", "the client's KernelManager.shutdown_wait_time"),
    ("the kernel was shut down", "the client's KernelManager.shutdown_wait_time"),
    ("the kernel received SIGTERM", "After SIGTERM, the kernel gives its runs at most "
     "jupyter_supervisor.notebook.shutdown.STOP_SECS (25 s by default), and whoever sent the "
     "signal may kill it sooner (docker stop -t, Kubernetes' terminationGracePeriodSeconds"),
    ("the server died", "The kernel gives its runs at most jupyter_supervisor.notebook."
     "shutdown.STOP_SECS (25 s by default) before it ends: raise it")])
def test_the_note_of_a_cut_stop_names_the_knob_of_how_the_kernel_ended(tmp_path, caplog, why,
                                                                       knob):
    """A stop noted in a lock its process left (it ended before the final checkpoint): the
    next holder says so, with what gives that kind of end more time, and no other knob."""
    from jupyter_supervisor.lockfile import LogdirLock  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.notebook.shutdown import cut_advice  # pylint: disable=C0415
    subprocess.run(
        [sys.executable, "-c",
         "import os, sys\n"
         "from jupyter_supervisor.lockfile import LogdirLock, note_stop\n"
         "lock = LogdirLock(sys.argv[1])\n"
         "lock.acquire()\n"
         "assert note_stop(sys.argv[1], sys.argv[2], sys.argv[3])\n"
         "os._exit(0)\n", str(tmp_path), why, cut_advice(why)],
        env=child_env(), check=True, timeout=DEADLINE)
    lock = LogdirLock(str(tmp_path))
    with caplog.at_level("WARNING", logger="jupyter_supervisor"):
        lock.acquire()
    lock.release()
    notes = [r.getMessage() for r in caplog.records if "was stopped" in r.getMessage()]
    assert len(notes) == 1 and f"was stopped ({why})" in notes[0] and knob in notes[0]
    restart = "shutdown_wait_time" in knob
    assert ("shutdown_wait_time" in notes[0]) == restart
    assert ("STOP_SECS" in notes[0]) != restart
