"""TensorFlow 2 replicas: the same %%supervise cell on every worker of a
tf.distribute.MultiWorkerMirroredStrategy run (TF_CONFIG), one chief, no silent divergence.

Two real IPython kernels driven through jupyter_client are the two workers of a cluster on
loopback (TF_CONFIG with free ports), training a custom loop with ``strategy.run``. The tests
run in order on the same two kernels: both train and a stop on the worker stops both at one
step; both kernels are killed and the cell re-run resumes both from the chief's checkpoint to
identical weights; a worker killed mid-run fails the chief with an error naming it. Waits are
conditions with deadlines; bounds are steps, never durations.
"""
import concurrent.futures
import json
import signal

import numpy as np
import pytest
import tensorflow as tf

from eager_models import make_model
from helpers import Kernel, free_ports
from jupyter_supervisor import tf_config
from jupyter_supervisor.config import RunConfig
from jupyter_supervisor.eager import EagerSupervisor

pytestmark = [pytest.mark.kernel, pytest.mark.cluster]

DEADLINE = 90.0  # seconds for what follows a start; never reached when passing

# Run in each kernel after each start: the strategy waits for the other worker, so both
# kernels run it at the same time.
SETUP = r'''
import numpy as np, keras
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.05)
    optimizer.build(model.trainable_variables)
x = tf.random.stateless_normal((8, 4), seed=(1, 2))
y = tf.random.stateless_normal((8, 1), seed=(3, 4))

@tf.function
def train_step():
    def replica_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(replica_step), axis=None)

with strategy.scope():
    fit_model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    fit_model.compile(keras.optimizers.SGD(0.05), "mse")

def weights():
    return [float(v) for w in model.weights for v in np.ravel(w.numpy())]
'''

# The same cell on both workers; paced so that two trainers leave the 2 cores usable.
CELL = """%%supervise --logdir {logdir} --save-model-secs 0 {options}
sv.track(model=model, optimizer=optimizer)
while not sv.should_stop():
    loss = train_step()
    sv.step(loss=loss)
    time.sleep(0.01)
"""


class Workers:
    """Two kernels, worker 0 (the chief) and worker 1, with the TF_CONFIG of one cluster."""

    def __init__(self, tmp_path_factory):
        cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
        self.logdir = str(tmp_path_factory.mktemp("shared") / "tf2")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(Kernel, tmp_path_factory.mktemp(f"worker{index}"),
                                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {
                                       "type": "worker", "index": index}}))
                       for index in (0, 1)]
        self.kernels = [f.result() for f in futures if f.exception() is None]
        if len(self.kernels) != 2:
            self.close()
            for future in futures:
                future.result()
        self.chief, self.worker = self.kernels
        self.setup()

    def both(self, action):
        """``action(kernel)`` in both kernels at once (each waits for the other)."""
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            return [f.result() for f in [pool.submit(action, k) for k in self.kernels]]

    def setup(self):
        self.both(lambda kernel: kernel.ok(SETUP, timeout=DEADLINE))

    def start(self, options=""):
        for kernel in self.kernels:
            kernel.ok(CELL.format(logdir=self.logdir, options=options))

    def close(self):
        for kernel in self.kernels:
            kernel.shutdown()


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    w = Workers(tmp_path_factory)
    yield w
    w.close()


def saved_step(logdir):
    """The step of the logdir's newest checkpoint (from its name), or None."""
    path = tf.train.latest_checkpoint(logdir)
    return None if path is None else int(path.rsplit("-", 1)[1])


def wait_for_checkpoint(kernel, logdir, step):
    kernel.wait_until(f"str(tf.train.latest_checkpoint({logdir!r})).endswith('-{step}')",
                      f"the checkpoint of step {step}", DEADLINE)


def run_value(kernel, expression):
    return kernel.value(f"(lambda run: {expression})(get_run('tf2'))")


def test_tf_config_names_the_chief_and_each_worker():
    cluster = {"worker": ["h:1", "h:2"]}
    assert tf_config.from_environ({"TF_CONFIG": json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": 1}})}) == (
        tf_config.Replica(1, 2, False, "worker 1"))
    with_chief = {"chief": ["h:0"], "worker": ["h:1", "h:2"], "ps": ["h:3"]}
    assert tf_config.from_environ({"TF_CONFIG": json.dumps(
        {"cluster": with_chief, "task": {"type": "worker", "index": 0}})}) == (
        tf_config.Replica(1, 3, False, "worker 0"))
    assert tf_config.from_environ({"TF_CONFIG": json.dumps(
        {"cluster": with_chief, "task": {"type": "chief", "index": 0}})}).is_chief
    assert tf_config.from_environ({}) is None
    assert tf_config.from_environ({"TF_CONFIG": json.dumps(
        {"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}})}) is None
    with pytest.raises(ValueError, match="Invalid value for argument `TF_CONFIG`"):
        tf_config.from_environ({"TF_CONFIG": "{not json"})
    with pytest.raises(ValueError, match="a task among the cluster's worker 0, worker 1"):
        tf_config.from_environ({"TF_CONFIG": json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": 5}})})
    assert RunConfig(is_chief=False, task_index=1, workers=2).role_text == "worker 1 of 2"
    assert RunConfig(task_index=0, workers=2).role_text == "chief (worker 0 of 2)"
    assert RunConfig().role_text == ""


def test_options_that_contradict_tf_config_are_usage_errors(ip, monkeypatch):
    from IPython.core.error import UsageError  # pylint: disable=import-outside-toplevel
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["h:1", "h:2"]},
                                                "task": {"type": "worker", "index": 0}}))
    with pytest.raises(UsageError, match=r"^--no-chief contradicts TF_CONFIG, which makes this "
                                         r"task \(worker 0\) the chief\."):
        ip.run_cell_magic("supervise", "--no-chief", "pass")
    with pytest.raises(UsageError, match=r"^--task-index 1 contradicts TF_CONFIG \(worker 0, "
                                         r"training task 0 of 2\)"):
        ip.run_cell_magic("supervise", "--task-index 1", "pass")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(UsageError, match="Invalid value for argument `TF_CONFIG`"):
        ip.run_cell_magic("supervise", "", "pass")


def test_a_fit_that_fails_before_it_starts_is_not_told_it_never_passed_the_callback(tmp_path):
    sv = EagerSupervisor(RunConfig(logdir=str(tmp_path)))
    model = make_model()
    with pytest.raises(ValueError, match="cardinality"):
        with sv.session():  # 8 samples against 7 labels: fit fails before it starts
            model.fit(np.ones((8, 4)), np.ones((7, 1)), callbacks=[sv.callback], verbose=0)
    sv.close()
    assert sv.notes() == []


def test_a_stop_on_the_worker_stops_both_at_one_step_with_the_chiefs_checkpoint(workers):
    workers.start()
    for kernel in workers.kernels:
        kernel.wait_until("get_run('tf2').global_step is not None and "
                          "get_run('tf2').global_step >= 20", "20 steps", DEADLINE)
    assert run_value(workers.chief, "run.role_text") == "chief (worker 0 of 2)"
    assert run_value(workers.worker, "run.role_text") == "worker 1 of 2"
    assert "worker 1 of 2" in workers.worker.ok("%supervise").stream()
    assert run_value(workers.worker, "run.logdir") is None  # the worker writes nothing
    assert "worker 1 of 2" in workers.worker.value(
        "__import__('jupyter_supervisor.view.text').view.text.text_status(get_run('tf2'))")

    workers.worker.ok("%supervise stop tf2")
    for kernel in workers.kernels:
        kernel.wait_until("get_run('tf2').status == 'stopped'", "stopped", DEADLINE)
    chief_step = run_value(workers.chief, "run.global_step")
    assert run_value(workers.worker, "run.global_step") == chief_step
    wait_for_checkpoint(workers.chief, workers.logdir, chief_step)
    assert run_value(workers.chief, "run.stop_reason") == "a stop on worker 1"
    assert workers.chief.value("weights()") == workers.worker.value("weights()")


def test_a_stop_on_the_chief_stops_the_worker_at_the_same_step(workers):
    workers.start("--name again")
    for kernel in workers.kernels:
        kernel.wait_until("get_run('again').status == 'running' and "
                          "get_run('again').global_step >= 5", "5 more steps", DEADLINE)
    workers.chief.ok("%supervise stop again")
    for kernel in workers.kernels:
        kernel.wait_until("get_run('again').status == 'stopped'", "stopped", DEADLINE)
    chief_step = workers.chief.value("get_run('again').global_step")
    assert workers.worker.value("get_run('again').global_step") == chief_step
    assert workers.worker.value("get_run('again').stop_reason") == "a stop on worker 0"
    wait_for_checkpoint(workers.chief, workers.logdir, chief_step)
    assert workers.chief.value("weights()") == workers.worker.value("weights()")


def test_keras_fit_under_the_strategy_says_it_is_not_supported_before_it_fails(workers):
    for kernel in workers.kernels:
        kernel.ok(f"%%supervise --logdir {workers.logdir}-fit --name fit\n"
                  "fit_model.fit(x, y, epochs=1, callbacks=[sv.callback], verbose=0)")
    for kernel in workers.kernels:
        kernel.wait_until("get_run('fit').status == 'failed'", "failed", DEADLINE)
        error = kernel.value("get_run('fit').error_line")
        assert error.startswith("RuntimeError: Keras 3 model.fit does not support "
                                "tf.distribute.MultiWorkerMirroredStrategy yet "
                                "(https://github.com/keras-team/keras/issues/20585)"), error
        assert "custom loop" in error
        # The callback was passed: no note says it was not.
        assert kernel.value("get_run('fit').notes") == []


def test_both_killed_and_restarted_resume_from_one_checkpoint_to_identical_weights(workers):
    saved = saved_step(workers.logdir)
    workers.both(lambda kernel: kernel.kill())
    workers.setup()
    workers.start(f"--max-steps {saved + 15}")
    for kernel in workers.kernels:
        kernel.wait_until("get_run('tf2').status == 'finished'", "finished", DEADLINE)
    paths = [run_value(k, "run.restored_from") for k in workers.kernels]
    assert paths[0] is not None and paths[0] == paths[1]
    assert [run_value(k, "run.global_step") for k in workers.kernels] == [saved + 15] * 2
    assert workers.chief.value("weights()") == workers.worker.value("weights()")
    wait_for_checkpoint(workers.chief, workers.logdir, saved + 15)


def test_a_failure_in_the_worker_cell_fails_the_chief_instead_of_leaving_it_waiting(workers):
    failing = CELL.replace("    sv.step(loss=loss)\n", "    if sv.step(loss=loss) == 10 and "
                           "json.loads(os.environ['TF_CONFIG'])['task']['index'] == 1:\n"
                           "        raise ValueError('bad batch')\n")
    for kernel in workers.kernels:
        kernel.ok(failing.format(logdir=workers.logdir + "-fails", options="--name fails"))
    for kernel in workers.kernels:
        kernel.wait_until("get_run('fails').status == 'failed'", "failed", DEADLINE)
    assert workers.worker.value("get_run('fails').error_line") == "ValueError: bad batch"
    error = workers.chief.value("get_run('fails').error_line")
    assert error.startswith("WorkerLostError: The run ended on every worker: worker 1 failed: "
                            "ValueError: bad batch."), error


def test_a_worker_killed_mid_run_fails_the_chief_with_an_error_naming_it(workers):
    workers.both(lambda kernel: kernel.kill())
    workers.setup()
    workers.start()
    for kernel in workers.kernels:
        kernel.wait_until("get_run('tf2').global_step is not None and "
                          "get_run('tf2').global_step >= 5", "5 steps", DEADLINE)
    workers.worker.km.signal_kernel(signal.SIGKILL)  # a crash: no stop, no goodbye
    workers.chief.wait_until("get_run('tf2').status == 'failed'", "failed", DEADLINE)
    error = run_value(workers.chief, "run.error_line")
    assert error.startswith("WorkerLostError: Lost /job:worker/replica:0/task:1 of this "
                            "2-worker run"), error
    assert "re-run the cell on every worker" in error
