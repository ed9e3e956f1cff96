"""%%supervise --cluster/--job/--task-index: notebooks as the tasks of a TensorFlow cluster.

Real processes on loopback with free ports: a parameter server (a small script that starts
/job:ps/task:0 with ``cluster.start_server`` and prints READY), and two real IPython kernels
driven through jupyter_client, one for the chief (/job:worker/task:0) and one for a worker
(/job:worker/task:1). The cluster has a third worker task that never runs: the device filters
of each task's session are what let the others train without it. Waits are conditions with
deadlines (in the kernel, or on the ps's stdout); every process is killed at the end.
"""
import concurrent.futures
import json
import socket
import subprocess
import sys
import threading

import pytest

from helpers import Kernel, child_env, free_ports

pytestmark = [pytest.mark.kernel, pytest.mark.cluster]

STARTUP = 90.0        # seconds: TensorFlow imports in three processes on two busy cores
DEADLINE = 60.0       # anything that follows once they run; never reached when passing

PS_SCRIPT = r'''
import json, sys
from jupyter_supervisor import cluster
server = cluster.start_server(json.loads(sys.argv[1]), "ps", 0)
print("READY", flush=True)
server.join()
'''

# Defined in both kernels (after helpers.KERNEL_SETUP): the cluster, and the test model with its
# variables on the ps.
REPLICA_HELPERS = r'''
from jupyter_supervisor.graph import cluster as jsv_cluster
from jupyter_supervisor.view import text as jsv_text
tf.compat.v1.disable_eager_execution()
CLUSTER = json.loads({cluster!r})

def build_replica_model(job, task):
    tf.compat.v1.reset_default_graph()
    with tf.compat.v1.device(jsv_cluster.replica_device_setter(CLUSTER, job, task)):
        build_model(globals(), summaries=())

steps_here = 0
'''

# Counts this task's own steps; paced so that two trainers leave the 2 cores usable.
LOOP = """
while not sv.should_stop():
    sess.run(train_op)
    steps_here += 1
    time.sleep(0.01)
"""


def port_is_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class ParameterServer:
    """/job:ps/task:0 in a process of its own; ready once it printed READY."""

    def __init__(self, spec, workdir):
        script = workdir / "ps.py"
        script.write_text(PS_SCRIPT)
        self.stderr_path = workdir / "ps.stderr"
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen([sys.executable, str(script), json.dumps(spec)],
                                         stdout=subprocess.PIPE, stderr=stderr, env=child_env(),
                                         text=True)
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            if line.strip() == "READY":
                self.ready.set()

    def wait_ready(self, timeout):
        if not self.ready.wait(timeout):
            raise AssertionError(f"the ps did not print READY in {timeout:.0f} s (exit code "
                                 f"{self.proc.poll()}):\n{self.stderr_path.read_text()[-3000:]}")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=DEADLINE)
        self._reader.join(timeout=DEADLINE)
        self.proc.stdout.close()


class Replicas:
    """The ps process, and the chief's and the worker's kernels."""

    def __init__(self, tmp_path_factory):
        ps, *workers = free_ports(4)
        self.spec = {"ps": [f"127.0.0.1:{ps}"],
                     "worker": [f"127.0.0.1:{port}" for port in workers]}
        self.ports = {"ps": ps, "chief": workers[0], "worker": workers[1]}
        self.ps = ParameterServer(self.spec, tmp_path_factory.mktemp("ps"))
        self.kernels = []
        try:
            # The two kernels import TensorFlow at the same time as the ps.
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                futures = [pool.submit(Kernel, tmp_path_factory.mktemp(role))
                           for role in ("chief", "worker")]
                concurrent.futures.wait(futures)
            self.kernels = [f.result() for f in futures if f.exception() is None]
            for future in futures:
                future.result()  # raises what failed a kernel's start
            self.chief, self.worker = self.kernels
            for kernel in self.kernels:
                kernel.ok(REPLICA_HELPERS.format(cluster=json.dumps(self.spec)))
                kernel.graph_mode = True
            self.ps.wait_ready(STARTUP)
        except BaseException:
            self.close()
            raise

    def close(self):
        for kernel in self.kernels:
            if kernel is not None:
                kernel.shutdown()
        self.ps.kill()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    r = Replicas(tmp_path_factory)
    yield r
    r.close()


def usage_error(kernel, code):
    """The message of the UsageError that executing ``code`` shows."""
    reply = kernel.execute(code)
    assert reply.status == "error", f"{code!r} did not fail: {reply.stream()}"
    # IPython shows a UsageError as one line on stderr, without a traceback.
    assert reply.content["ename"] == "UsageError", reply.content
    assert reply.error is None
    assert reply.stream("stderr") == f"UsageError: {reply.content['evalue']}\n"
    return reply.content["evalue"]


# ------------------------------------------------------------------------------------ tests

def test_bad_cluster_options_are_usage_errors_that_say_what_to_do(replicas):
    kernel = replicas.worker
    kernel.ok("build_replica_model('worker', 1)")
    body = "\npass"
    bad_json = usage_error(
        kernel, "%%supervise --cluster '{\"ps\": [\"127.0.0.1:1\"' --job worker" + body)
    assert bad_json.startswith("Invalid value for argument `--cluster`. Received: --cluster=")
    assert "Expected a JSON object such as" in bad_json
    assert usage_error(kernel, "%%supervise --cluster CLUSTER --job trainer" + body) == (
        "Invalid value for argument `--job`. Received: --job='trainer'. Expected one of the "
        "cluster's jobs: 'ps', 'worker'.")
    assert usage_error(kernel, "%%supervise --cluster CLUSTER --job worker --task-index 3"
                       + body) == (
        "Invalid value for argument `--task-index`. Received: --task-index=3. Expected a task "
        "of job 'worker': 0 to 2.")
    # An explicit --chief skips the default-chief check; the task is still checked.
    assert "Received: --task-index=3" in usage_error(
        kernel, "%%supervise --cluster CLUSTER --job worker --task-index 3 --no-chief" + body)
    assert "'host:port' with a port" in usage_error(
        kernel, "%%supervise --cluster '{\"worker\": [\"127.0.0.1\"]}' --job worker" + body)
    assert "--cluster=NO_SUCH_CLUSTER, which is not defined" in usage_error(
        kernel, "%%supervise --cluster NO_SUCH_CLUSTER --job worker" + body)
    ps = usage_error(kernel, "%%supervise --cluster CLUSTER --job ps" + body)
    assert "a parameter server runs no training cell" in ps
    assert "jupyter_supervisor.cluster.start_server(CLUSTER, 'ps', 0)" in ps
    assert "--cluster needs --job NAME" in usage_error(
        kernel, "%%supervise --cluster CLUSTER" + body)
    assert "give the cluster too" in usage_error(kernel, "%%supervise --job worker" + body)
    assert "--master and --cluster exclude each other" in usage_error(
        kernel, "%%supervise --cluster CLUSTER --job worker --master grpc://127.0.0.1:1" + body)
    # Nothing started: no run, no server on the task's port.
    assert kernel.value("len(jupyter_supervisor.runs())") == 0
    assert port_is_free(replicas.ports["worker"])


def test_a_port_in_use_is_a_clear_error(replicas):
    kernel = replicas.chief
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        reply = kernel.execute(
            f"%%supervise --cluster '{{\"worker\": [\"127.0.0.1:{port}\"]}}' --job worker "
            "--task-index 0\npass")
    assert reply.status == "error" and reply.error["ename"] == "RuntimeError"
    message = reply.error["evalue"]
    assert "Could not start the TensorFlow server of /job:worker/task:0" in message
    assert f"using port {port}?" in message
    assert reply.error["traceback"] == [f"RuntimeError: {message}"]  # one line, no frames
    assert kernel.value("len(jupyter_supervisor.runs())") == 0


def test_worker_waits_for_the_chief_then_both_advance_one_global_step(replicas):
    chief, worker = replicas.chief, replicas.worker
    run = "get_run('mnist')"
    worker_cell = ("%%supervise --cluster CLUSTER --job worker --task-index 1 "
                   f"--logdir runs/mnist --recovery-wait-secs 0.3\n{LOOP}")

    # The worker first: it waits, polling the ps for a model nobody initialized yet.
    worker.ok("build_replica_model('worker', 1)")
    worker.ok(worker_cell)
    worker.wait_until(f"{run}.history.snapshot().waiting_for_chief", "waiting for the chief")
    worker.wait_until(f"{run}.history.snapshot().output.count('Waiting for model to be "
                      "ready') >= 2", "two polls of the model")
    snap = worker.value(f"[{run}.history.snapshot().status, {run}.history.snapshot()"
                        f".waiting_for_chief, {run}.role, {run}.master, steps_here]")
    master = snap[3]
    assert snap == ["starting", True, "worker", master, 0]
    assert master.startswith("grpc://") and master.endswith(f":{replicas.ports['worker']}")
    status_line = worker.value(f"jsv_text.text_status({run})")
    assert status_line.startswith("mnist: waiting for chief (")
    assert status_line.endswith(f", worker on {master})")
    assert worker.value(f"list({run}.config.session_config.device_filters)") == [
        "/job:ps", "/job:worker/task:1"]

    # The chief (task 0 of the worker job by default), its cluster given as JSON.
    chief.ok("build_replica_model('worker', 0)")
    chief.ok(f"%%supervise --cluster '{json.dumps(replicas.spec)}' --job worker "
             f"--task-index 0 --logdir runs/mnist --save-model-secs 0\n{LOOP}")
    chief.wait_until(f"{run}.status == 'running'", "the chief's session")
    assert chief.value(f"[{run}.role, {run}.master.endswith(':{replicas.ports['chief']}')]") \
        == ["chief", True]
    worker.wait_until(f"{run}.status == 'running'", "the worker's session once the chief is up")
    assert worker.value(f"{run}.history.snapshot().waiting_for_chief") is False
    assert "waiting" not in worker.value(f"jsv_text.text_status({run})")

    # One shared global step: each task sees it rise past the steps it did itself.
    for kernel in (chief, worker):
        kernel.wait_until(f"({run}.global_step or 0) > steps_here + 20", "the other's steps")

    worker.ok("%supervise stop mnist")
    assert worker.value(f"{run}.status") == "stopped"
    # Re-running the cell reuses this kernel's server (a second one could not take the port).
    before = worker.value("steps_here")
    worker.ok(worker_cell)
    worker.wait_until(f"{run}.status == 'running'", "the re-run worker")
    assert worker.value(f"{run}.master") == master
    worker.wait_until(f"steps_here > {before} + 10", "steps after the re-run")
    worker.ok("%supervise stop mnist")
    worker_steps = worker.value("steps_here")

    chief.ok("%supervise stop mnist")
    assert chief.value(f"{run}.status") == "stopped"
    total = chief.value("steps_here") + worker_steps
    # Every step of either task incremented the one global step on the ps, exactly once; the
    # chief's final checkpoint holds it.
    assert chief.value(f"{run}.global_step") == total
    assert chief.value("_newest_step('runs/mnist')") == total
    assert chief.value("any(n.startswith('events.out.tfevents') "
                       "for n in os.listdir('runs/mnist'))")
    # Only the chief writes: the worker's --logdir was never even created.
    assert worker.value(f"[{run}.logdir, os.path.exists('runs/mnist')]") == [None, False]

    # This kernel serves /job:worker/task:1 of CLUSTER for good: another cluster is refused.
    other = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    refused = worker.execute(f"%%supervise --cluster '{json.dumps(other)}' --job worker "
                             "--task-index 1\npass")
    assert refused.status == "error" and refused.error["ename"] == "RuntimeError"
    assert "already serves /job:worker/task:1 of another cluster" in refused.error["evalue"]
    assert "restart the kernel" in refused.error["evalue"]
