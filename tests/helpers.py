"""What several test modules share: the test model, checkpoints read back, fakes, child processes
and a kernel driven through jupyter_client.

Test modules import it as ``from helpers import ...`` (pytest puts tests/ on sys.path); child
processes started with ``child_env()`` can import it too, so a kernel uses the same model.
TensorFlow and jupyter_client are imported where they are used: the modules that test the
notebook views without TensorFlow import this one as well.
"""
import ast
import contextlib
import importlib.util
import json
import math
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types

# The checkout whose jupyter_supervisor the tests import (found without running its __init__),
# and this folder.
PACKAGE_ROOT = os.path.dirname(
    importlib.util.find_spec("jupyter_supervisor").submodule_search_locations[0])
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

# A %%supervise body that trains until the run is stopped.
LOOP = "while not sv.should_stop():\n    sess.run(train_op)\n"


def wait_for(predicate, timeout=10.0, interval=0.02, what=None):
    """Poll ``predicate`` until it returns something truthy, and return that value.

    Raises AssertionError naming ``what`` (or the predicate) if ``timeout`` seconds pass first.
    Tests use this instead of sleeping a fixed time: they go on as soon as the condition holds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            what = what or getattr(predicate, "__name__", repr(predicate))
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# ------------------------------------------------------------------------------------ the model

def build_model(namespace=None, *, new_graph=False, w_shape=(), extra_variable=None,
                summaries=("loss",), learning_rate=0.001, step_shape=(), step_dtype=None):
    """The suite's model: a global step, a weight ``w`` (5.0 everywhere) that gradient descent
    at ``learning_rate`` moves toward 1, and ``train_op``: one descent step, then global step + 1.

    Built on the current default graph, or with ``new_graph`` on a new one (returned as
    ``.graph``). ``namespace`` (a shell's user_ns, a kernel's globals()) gets ``gs``, ``w``,
    ``loss``, ``train_op``, ``tf`` and ``time``, what the cells of the tests use.
    ``extra_variable``: the name of one more variable (three zeros) in the loss.
    ``summaries``: scalar summaries, of "loss" and/or "step_value" (the global step as a float).
    ``step_shape``, ``step_dtype``: a global step other than TensorFlow's own int64 scalar.
    Returns a SimpleNamespace with graph, global_step, w, loss and train_op.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    v1 = tf.compat.v1
    graph = tf.Graph() if new_graph else v1.get_default_graph()
    with graph.as_default():
        if step_shape == () and step_dtype in (None, tf.int64):
            step = v1.train.get_or_create_global_step()
        else:
            step = v1.get_variable(
                "global_step", shape=step_shape, dtype=step_dtype or tf.int64,
                initializer=v1.zeros_initializer(), trainable=False,
                collections=[v1.GraphKeys.GLOBAL_VARIABLES, v1.GraphKeys.GLOBAL_STEP])
        w = v1.get_variable("w", initializer=tf.fill(w_shape, 5.0))
        loss = tf.reduce_sum(tf.square(w - 1.0))
        if extra_variable:
            loss += tf.reduce_sum(v1.get_variable(extra_variable, initializer=tf.zeros([3])))
        scalars = {"loss": loss, "step_value": tf.cast(tf.reshape(step, []), tf.float32)}
        for tag in summaries:
            v1.summary.scalar(tag, scalars[tag])
        descent = v1.train.GradientDescentOptimizer(learning_rate).minimize(loss)
        # Any shape and dtype of step: minimize(global_step=...) takes only a scalar.
        with tf.control_dependencies([descent]), v1.colocate_with(step):
            train_op = v1.assign_add(step, tf.ones_like(step))
    if namespace is not None:
        namespace.update(gs=step, w=w, loss=loss, train_op=train_op, tf=tf, time=time)
    return types.SimpleNamespace(graph=graph, global_step=step, w=w, loss=loss,
                                 train_op=train_op)


# ----------------------------------------------------------------------------------- charts

def is_125_step(ticks):
    """Equally spaced ticks at the multiples of a step of 1, 2 or 5 times a power of ten."""
    step = ticks[1] - ticks[0]
    exponent = math.floor(math.log10(step) + 1e-9)
    mantissa = step / 10 ** exponent
    return (any(math.isclose(mantissa, m) for m in (1, 2, 5))
            and all(math.isclose(b - a, step) for a, b in zip(ticks, ticks[1:]))
            and all(math.isclose(t / step, round(t / step), abs_tol=1e-6) for t in ticks))


def is_125_log(ticks):
    """Ticks at 1, 2 or 5 times powers of ten."""
    def mantissa(t):
        return t / 10 ** math.floor(math.log10(t) + 1e-9)
    return all(any(math.isclose(mantissa(t), m) for m in (1, 2, 5)) for t in ticks)


# ------------------------------------------------------------------------------ checkpoints

def checkpoint_step(path):
    """The global step stored in checkpoint ``path`` (shape [] or [1])."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    value = tf.train.load_checkpoint(path).get_tensor("global_step")
    return int(np.asarray(value).reshape(()))


def newest_checkpoint(logdir):
    """(path, global step) of the newest checkpoint ``logdir``'s state file names; (None, None)
    when it names none."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    path = tf.train.latest_checkpoint(os.fspath(logdir))
    return (None, None) if path is None else (path, checkpoint_step(path))


def newest_step(logdir):
    """The global step of the newest checkpoint in ``logdir``; None when there is none."""
    return newest_checkpoint(logdir)[1]


def corrupt_checkpoint(prefix, how="truncated_data"):
    """A torn write of checkpoint ``prefix``: its data file loses its second half
    ("truncated_data"), or its index's bytes become garbage ("garbled_index")."""
    if how == "truncated_data":
        data = f"{prefix}.data-00000-of-00001"
        with open(data, "r+b") as f:
            f.truncate(os.path.getsize(data) // 2)
    elif how == "garbled_index":
        with open(f"{prefix}.index", "rb") as f:
            garbled = bytes(b ^ 0x5A for b in f.read())
        with open(f"{prefix}.index", "wb") as f:
            f.write(garbled)
    else:
        raise ValueError(f"Invalid value for argument `how`. Received: how={how!r}. "
                         "Expected 'truncated_data' or 'garbled_index'.")


def unlist_newest_and_damage_the_rest(logdir):
    """``logdir``'s newest checkpoint made unlisted (as a save killed between writing its files
    and listing them leaves it), then every listed one damaged (``corrupt_checkpoint``).
    Returns (the unlisted checkpoint, the listed ones), as the state file named them."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    *listed, unlisted = tf.train.get_checkpoint_state(os.fspath(logdir)).all_model_checkpoint_paths
    names = [os.path.basename(path) for path in listed]
    with open(os.path.join(logdir, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(f'model_checkpoint_path: "{names[-1]}"\n'
                + "".join(f'all_model_checkpoint_paths: "{name}"\n' for name in names))
    for path in listed:
        corrupt_checkpoint(path)
    return unlisted, listed


# ------------------------------------------------------------------------ listeners and clocks

class Recorder:
    """A Supervisor listener keeping every event and the threads it was called on."""

    def __init__(self):
        self._lock = threading.Lock()
        self.events = []        # guarded by _lock
        self.threads = set()    # guarded by _lock

    def __call__(self, event):
        with self._lock:
            self.events.append(event)
            self.threads.add(threading.get_ident())

    def of(self, kind):
        with self._lock:
            return [e for e in self.events if isinstance(e, kind)]


def before_each_write(monkeypatch, action) -> None:
    """Calls ``action(path)`` in the thread that writes each eager snapshot's files, before it
    writes them to ``path``."""
    from jupyter_supervisor.eager.snapshot import Snapshot  # pylint: disable=C0415
    write_function = Snapshot.write_function

    def watched(self, checked):
        write, check = write_function(self, checked)

        def watched_write(path):
            action(path)
            return write(path)
        return watched_write, check

    monkeypatch.setattr(Snapshot, "write_function", watched)


def training_waits_for_a_write(monkeypatch, training: list) -> threading.Event:
    """An Event set when the thread ``training[0]`` waits for a checkpoint write in flight
    (``CheckpointWriter.wait`` while a write runs)."""
    from jupyter_supervisor.eager.writer import CheckpointWriter  # pylint: disable=C0415
    waiting = threading.Event()
    wait = CheckpointWriter.wait

    def watched(writer, timeout=None):
        if writer.writing and training and threading.current_thread() is training[0]:
            waiting.set()
        return wait(writer, timeout)

    monkeypatch.setattr(CheckpointWriter, "wait", watched)
    return waiting


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


# --------------------------------------------------------------------------- child processes

def child_env(**extra):
    """The environment of a child process (a script, a kernel, a server) that imports this very
    jupyter_supervisor, and these helpers, with TensorFlow's C++ logging quiet; plus ``extra``."""
    path = [PACKAGE_ROOT, TESTS_DIR] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTEST_CURRENT_TEST", None)  # the child is a notebook's or a script's, not pytest's
    env.update(extra)
    return env


def killed_where_it_paused(argv, env):
    """Starts the process ``argv`` (with ``env``), reads the first line it prints (a script
    that holds itself where the test wants a crash prints it there), then SIGKILLs it: a crash
    at exactly that point. Returns (that line, the end of what it wrote to stderr)."""
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = child.stdout.readline().decode()  # ends when the child prints or exits
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        stderr = child.stderr.read().decode()[-3000:]
        child.stdout.close()
        child.stderr.close()
    return line, stderr


def run_isolated(blocked, *code):
    """Runs the parts of ``code`` (each dedented) in a fresh Python where importing any of
    ``blocked`` fails; the package's own __init__ is bypassed so the modules under test are
    judged by their own imports. Returns the CompletedProcess (stdout, stderr as text)."""
    prelude = textwrap.dedent(f"""
        import importlib.abc, sys, types
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {tuple(blocked)!r}:
                    raise ImportError("blocked in this test: " + name)
        sys.meta_path.insert(0, Block())
        package = types.ModuleType("jupyter_supervisor")
        package.__path__ = [{os.path.join(PACKAGE_ROOT, "jupyter_supervisor")!r}]
        sys.modules["jupyter_supervisor"] = package
    """)
    source = prelude + "".join(textwrap.dedent(part) for part in code)
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          timeout=120)


def free_ports(count):
    """Ports the kernel hands out for port 0, released again for the servers to take."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@contextlib.contextmanager
def made_read_only(path):
    """``path`` (a directory a run writes in) turns read-only for the block: a read-only bind
    mount of it over itself. Root writes through permission bits, so a mount stands in. Files
    the run holds open (its event file) stay writable below it, as after a disk was remounted
    read-only with open files; every path opened anew (a checkpoint, the lock's removal) is
    refused. The read-only mount is made aside, then bound over ``path`` in one step: a run
    that opens a file meanwhile cannot make it fail. Skips where mounting is not allowed."""
    import pytest  # pylint: disable=import-outside-toplevel  (the kernels import helpers too)
    if os.geteuid() != 0:
        pytest.skip("a read-only mount needs root (chmod does not stop root)")
    aside = tempfile.mkdtemp(prefix="read-only-")
    bound = subprocess.run(["mount", "--bind", str(path), aside], capture_output=True,
                           text=True, check=False)
    if bound.returncode != 0:
        os.rmdir(aside)
        pytest.skip(f"cannot bind-mount here: {bound.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", aside], check=True)
        subprocess.run(["mount", "--bind", aside, str(path)], check=True)
    finally:
        subprocess.run(["umount", aside], check=True)
        os.rmdir(aside)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


# ----------------------------------------------------------------------------------- kernels

KERNEL_STARTUP = 60.0   # seconds; generous for a loaded 2-core machine, never reached in a pass
KERNEL_DEADLINE = 90.0

# Run in every Kernel once it started: the names the tests' kernel-side code uses.
# KERNEL_SETUP first puts SIGHUP and SIGTERM back to their defaults where the kernel inherited
# them ignored (an ignored signal stays ignored across exec; ``nohup`` ignores SIGHUP): the
# product leaves an ignored signal alone, so the tests start from a kernel launched from a plain
# shell, and one that wants a signal ignored sets it in the kernel. (Done here, not in a
# ``preexec_fn``, which is not safe in a process with threads.)
KERNEL_SETUP = r'''
import signal as _signal
for _number in (_signal.SIGHUP, _signal.SIGTERM):
    if _signal.getsignal(_number) == _signal.SIG_IGN:
        _signal.signal(_number, _signal.SIG_DFL)
%load_ext jupyter_supervisor
import json, os, pathlib, threading, time
import tensorflow as tf
import jupyter_supervisor
from jupyter_supervisor import get_run
from helpers import build_model, wait_for, newest_step as _newest_step
'''
GRAPH_MODE = "tf.compat.v1.disable_eager_execution()"


class Reply:
    """What one execute request produced."""

    def __init__(self, msg_id, content, messages):
        self.msg_id = msg_id
        self.status = content["status"]
        self.content = content
        self.messages = messages       # iopub messages whose parent is this request

    def stream(self, name=None) -> str:
        return "".join(m["content"]["text"] for m in self.messages
                       if m["msg_type"] == "stream" and name in (None, m["content"]["name"]))

    def of_type(self, msg_type):
        return [m["content"] for m in self.messages if m["msg_type"] == msg_type]

    @property
    def error(self):
        errors = self.of_type("error")
        return errors[0] if errors else None


class Kernel:
    """A python3 kernel of this environment (jupyter_client swaps 'python' in the kernelspec
    for sys.executable) started in ``workdir`` with ``child_env()``; records every iopub message
    it sends. KERNEL_SETUP runs in it at each start. ``env``: more environment variables
    (TF_CONFIG...), kept across restarts."""

    def __init__(self, workdir, **env):
        self.workdir = workdir
        self.env = env
        self.iopub = []                # every iopub message, in order
        self.graph_mode = False
        self._start()

    def _start(self):
        from jupyter_client.manager import KernelManager  # pylint: disable=import-outside-toplevel
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(self.workdir), env=child_env(**self.env))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=KERNEL_STARTUP)
        self.graph_mode = False
        self.ok(KERNEL_SETUP)

    def restart(self):
        """A kernel restart as the notebook's restart button does it (a shutdown request, then
        a new process); KERNEL_SETUP runs again."""
        self.km.restart_kernel(now=False)
        self.kc.wait_for_ready(timeout=KERNEL_STARTUP)
        self._drain()
        self.graph_mode = False
        self.ok(KERNEL_SETUP)

    def kill(self):
        """The kernel's process is killed (SIGKILL: a crash), then a new one starts, as the
        notebook's restart does after a dead kernel; KERNEL_SETUP runs again."""
        self.km.restart_kernel(now=True)
        self.kc.wait_for_ready(timeout=KERNEL_STARTUP)
        self._drain()
        self.graph_mode = False
        self.ok(KERNEL_SETUP)

    def shutdown(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def _drain(self):
        while True:
            try:
                self.iopub.append(self.kc.get_iopub_msg(timeout=0.1))
            except queue.Empty:
                return

    def execute(self, code, timeout=KERNEL_DEADLINE, user_expressions=None, silent=False,
                while_waiting=None) -> Reply:
        """Executes ``code``; returns when the kernel is idle again. ``while_waiting()`` is
        called every 50 ms meanwhile (to interrupt, for instance)."""
        msg_id = self.kc.execute(code, silent=silent, store_history=not silent,
                                 user_expressions=user_expressions or {})
        deadline = time.monotonic() + timeout
        mine = []
        while True:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s executing {code!r}")
            try:
                msg = self.kc.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                if while_waiting is not None:
                    while_waiting()
                continue
            self.iopub.append(msg)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            mine.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        while True:
            reply = self.kc.get_shell_msg(timeout=max(deadline - time.monotonic(), 1))
            if reply["parent_header"].get("msg_id") == msg_id:
                return Reply(msg_id, reply["content"], mine)

    def ok(self, code, **kwargs) -> Reply:
        """Executes ``code`` and fails the test (with the kernel's traceback) unless it ran."""
        reply = self.execute(code, **kwargs)
        if reply.status != "ok":
            raise AssertionError(f"{code!r} failed in the kernel:\n"
                                 + "\n".join(reply.content.get("traceback", []))
                                 + reply.stream())
        return reply

    def value(self, expression):
        """The value of a JSON-serializable Python expression in the kernel."""
        reply = self.execute("", silent=True, user_expressions={
            "v": f"__import__('json').dumps({expression})"})
        result = reply.content["user_expressions"]["v"]
        if result["status"] != "ok":
            raise AssertionError(f"{expression!r}: {result['ename']}: {result['evalue']}")
        return json.loads(ast.literal_eval(result["data"]["text/plain"]))

    def wait_until(self, condition, what, timeout=KERNEL_DEADLINE):
        """Waits in the kernel until the expression ``condition`` holds."""
        self.ok(f"wait_for(lambda: {condition}, {timeout}, what={what!r})", timeout=timeout + 30)

    def eager(self):
        """The kernel in eager mode: restarted if a cell switched it to graph mode, which
        cannot be undone in a process."""
        if self.graph_mode:
            self.restart()

    def stop_runs(self):
        """Stops every run live in the kernel (each writes its final checkpoint)."""
        self.ok("import jupyter_supervisor.notebook.run\n"
                "jupyter_supervisor.notebook.run.stop_all(timeout=60)")

    def model(self):
        """A fresh default graph with the test model (build_model), in graph mode."""
        if not self.graph_mode:
            self.ok(GRAPH_MODE)
            self.graph_mode = True
        self.ok("tf.compat.v1.reset_default_graph()\nbuild_model(globals())")
