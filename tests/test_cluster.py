"""The cluster helpers: validation of what users type, device filters, chief, placement.

Servers that run are exercised in test_replicas.py (real processes); here only a server that
cannot start is created in-process, since a started one would live as long as pytest.
"""
import json
import socket

import pytest
import tensorflow as tf

from jupyter_supervisor import cluster

SPEC = {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}


def test_cluster_spec_accepts_a_dict_its_json_and_a_cluster_spec():
    expected = tf.train.ClusterSpec(SPEC)
    assert cluster.cluster_spec(SPEC) == expected
    assert cluster.cluster_spec(json.dumps(SPEC)) == expected
    assert cluster.cluster_spec(expected) == expected


def test_cluster_spec_accepts_sparse_tasks_with_json_string_keys():
    spec = cluster.cluster_spec('{"ps": ["h0:1"], "worker": {"1": "h1:2", "3": "[::1]:3"}}')
    assert spec.task_indices("worker") == [1, 3]
    assert spec.task_address("worker", 3) == "[::1]:3"
    assert cluster.cluster_spec(spec) == spec


@pytest.mark.parametrize("value, error, fragment", [
    ([["h:1"]], TypeError, "Expected a dict (or its JSON text)"),
    ("{'ps': ['h:1']}", ValueError, "Expected a JSON object"),
    ({}, ValueError, "Expected at least one job"),
    ({"1ps": ["h:1"]}, ValueError, "'1ps' is not one"),
    ({"ps": []}, ValueError, "non-empty list of 'host:port' addresses for job 'ps'"),
    ({"ps": "h:1"}, ValueError, "for job 'ps'; it has 'h:1'"),
    ({"ps": ["h"]}, ValueError, "for /job:ps/task:0; it has 'h'"),
    ({"ps": ["h:0"]}, ValueError, "port from 1 to 65535"),
    ({"ps": ["h:70000"]}, ValueError, "port from 1 to 65535"),
    ({"ps": ["grpc://h:1"]}, ValueError, "remove the grpc:// from 'grpc://h:1'"),
    ({"ps": [2222]}, ValueError, "a 'host:port' string for /job:ps/task:0"),
    ({"ps": {-1: "h:1"}}, ValueError, "task indices >= 0 for job 'ps'"),
    ({"ps": ["h:1"], "worker": ["h:1"]}, ValueError,
     "'h:1' is given to both /job:ps/task:0 and /job:worker/task:0"),
])
def test_cluster_spec_says_what_is_wrong(value, error, fragment):
    with pytest.raises(error) as raised:
        cluster.cluster_spec(value)
    message = str(raised.value)
    assert message.startswith("Invalid value for argument `cluster_spec`. Received: "), message
    assert fragment in message


def test_session_config_shows_only_the_ps_and_the_task_itself():
    config = cluster.session_config("worker", 1)
    assert list(config.device_filters) == ["/job:ps", "/job:worker/task:1"]


def test_session_config_adds_to_a_copy_of_the_given_config():
    base = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=2,
                                    device_filters=["/job:ps"])
    config = cluster.session_config("chief", 0, config=base)
    assert list(config.device_filters) == ["/job:ps", "/job:chief/task:0"]
    assert config.intra_op_parallelism_threads == 2
    assert list(base.device_filters) == ["/job:ps"]
    several = cluster.session_config("worker", 0, ps_jobs=("ps", "embeddings"))
    assert list(several.device_filters) == ["/job:ps", "/job:embeddings", "/job:worker/task:0"]


@pytest.mark.parametrize("job, task_index, name", [
    ("", 0, "job"), ("worker", -1, "task_index"), ("worker", True, "task_index"),
    ("worker", "0", "task_index")])
def test_session_config_rejects_bad_task_names(job, task_index, name):
    with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
        cluster.session_config(job, task_index)


def test_the_default_chief_is_worker_0_or_the_chief_job():
    assert cluster.is_chief_task(SPEC, "worker", 0)
    assert not cluster.is_chief_task(SPEC, "worker", 1)
    assert not cluster.is_chief_task(SPEC, "ps", 0)
    with_chief = dict(SPEC, chief=["127.0.0.1:2225"])
    assert cluster.is_chief_task(with_chief, "chief", 0)
    assert not cluster.is_chief_task(with_chief, "worker", 0)


def test_no_default_chief_without_a_chief_or_worker_job():
    with pytest.raises(ValueError, match="no task is the chief by default: say which"):
        cluster.is_chief_task({"ps": ["h:1"], "trainer": ["h:2"]}, "trainer", 0)


@pytest.mark.parametrize("call", [cluster.is_chief_task, cluster.replica_device_setter,
                                  cluster.start_server])
def test_unknown_job_and_task_index_out_of_range_are_refused(call):
    with pytest.raises(ValueError) as raised:
        call(SPEC, "wroker", 0)
    assert str(raised.value) == (
        "Invalid value for argument `job`. Received: job='wroker'. "
        "Expected one of the cluster's jobs: 'ps', 'worker'.")
    with pytest.raises(ValueError) as raised:
        call(SPEC, "worker", 2)
    assert str(raised.value) == (
        "Invalid value for argument `task_index`. Received: task_index=2. "
        "Expected a task of job 'worker': 0 to 1.")


def test_replica_device_setter_puts_variables_on_the_ps_and_ops_on_the_task():
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.device(
            cluster.replica_device_setter(SPEC, "worker", 1)):
        variable = tf.compat.v1.get_variable("v", initializer=1.0)
        doubled = variable * 2.0
    assert variable.op.device == "/job:ps/task:0"
    assert doubled.op.device == "/job:worker/task:1"


def test_replica_device_setter_needs_a_ps_job():
    with pytest.raises(ValueError, match="Expected a 'ps' job to hold the variables"):
        cluster.replica_device_setter({"worker": ["h:1"]}, "worker", 0)


def test_a_server_on_a_port_in_use_says_so():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError) as raised:
            cluster.start_server({"worker": [f"127.0.0.1:{port}"]}, "worker", 0)
    message = str(raised.value)
    assert f"/job:worker/task:0 on 127.0.0.1:{port}" in message
    assert f"using port {port}?" in message
    assert isinstance(raised.value.__cause__, tf.errors.OpError)
