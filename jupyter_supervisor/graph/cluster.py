"""Running a notebook as one task of a TensorFlow cluster (between-graph replication).

TensorFlow's gRPC runtime does all the distribution: ``tf.distribute.Server`` serves the task,
``grpc://`` masters run the sessions, ``replica_device_setter`` puts the variables on the
parameter servers. These helpers only validate what the user typed, early and clearly, and set
the few options that make replicas robust:

* ``start_server(cluster, job, task_index)``: this task's ``tf.distribute.Server``;
* ``session_config(job, task_index)``: the ``config`` for ``sv.managed_session``; its device
  filters show a task only the parameter servers and itself, so it can start or restart while
  another worker or the chief is down (a session without them waits for every task);
* ``is_chief_task(cluster, job, task_index)``: the default chief, task 0 of the "chief" job if the
  cluster has one, else task 0 of the "worker" job;
* ``replica_device_setter(cluster, job, task_index)``: variables on "/job:ps", the rest on the task.

A cluster is given as a dict mapping job names to lists of "host:port" addresses (or to dicts
from task index to address), as its JSON text, or as a ``tf.train.ClusterSpec``::

    {"ps": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"]}
"""
import json
import re
import threading
from typing import Dict, Iterable, Optional, Tuple

import tensorflow as tf

from .._validate import invalid

PS_JOB = "ps"
WORKER_JOB = "worker"
CHIEF_JOB = "chief"

# TensorFlow's device names accept job names of this form (DeviceNameUtils).
_JOB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(?P<port>[0-9]+)$")

_EXAMPLE = '{"ps": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]}'


def cluster_spec(cluster) -> tf.train.ClusterSpec:
    """Validates ``cluster`` and returns it as a ``tf.train.ClusterSpec``.

    Raises ValueError or TypeError naming what is wrong: JSON that does not parse, a job name
    TensorFlow cannot use in a device name, a job without tasks, an address that is not
    "host:port" (a "grpc://" prefix included), or two tasks on one address.
    """
    if isinstance(cluster, tf.train.ClusterSpec):
        jobs = {job: {i: cluster.task_address(job, i) for i in cluster.task_indices(job)}
                for job in cluster.jobs}
    elif isinstance(cluster, str):
        try:
            jobs = json.loads(cluster)
        except ValueError as e:
            raise ValueError(invalid("cluster_spec", cluster,
                                      f"a JSON object such as {_EXAMPLE} ({e})")) from None
    else:
        jobs = cluster
    if not isinstance(jobs, dict):
        raise TypeError(invalid("cluster_spec", cluster,
                                 f"a dict (or its JSON text) mapping job names to lists of "
                                 f"'host:port' addresses, such as {_EXAMPLE}"))
    if not jobs:
        raise ValueError(invalid("cluster_spec", cluster, f"at least one job, such as {_EXAMPLE}"))
    seen = {}
    normalized = {}
    for job, tasks in jobs.items():
        if not isinstance(job, str) or not _JOB_NAME.match(job):
            raise ValueError(invalid("cluster_spec", cluster,
                                      f"job names made of letters, digits and '_', starting "
                                      f"with a letter; {job!r} is not one"))
        if isinstance(tasks, (list, tuple)):
            tasks = dict(enumerate(tasks))
        if not isinstance(tasks, dict) or not tasks:
            raise ValueError(invalid("cluster_spec", cluster,
                                      f"a non-empty list of 'host:port' addresses for job "
                                      f"{job!r}; it has {tasks!r}"))
        normalized[job] = {}
        for index, address in tasks.items():
            if isinstance(index, str) and index.isdigit():
                index = int(index)  # JSON object keys are strings
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise ValueError(invalid("cluster_spec", cluster,
                                          f"task indices >= 0 for job {job!r}; it has {index!r}"))
            _check_address(cluster, job, index, address)
            if address in seen:
                raise ValueError(invalid("cluster_spec", cluster,
                                          f"one address per task; {address!r} is given to both "
                                          f"{seen[address]} and /job:{job}/task:{index}"))
            seen[address] = f"/job:{job}/task:{index}"
            normalized[job][index] = address
    return tf.train.ClusterSpec(normalized)


def _check_address(cluster, job, index, address) -> None:
    where = f"/job:{job}/task:{index}"
    if not isinstance(address, str):
        raise ValueError(invalid("cluster_spec", cluster,
                                  f"a 'host:port' string for {where}; it has {address!r}"))
    if "://" in address:
        raise ValueError(invalid("cluster_spec", cluster,
                                  f"'host:port' without a scheme for {where}; remove the "
                                  f"{address.split('://')[0]}:// from {address!r}"))
    match = _ADDRESS.match(address)
    if not match or not 0 < int(match.group("port")) < 65536:
        raise ValueError(invalid("cluster_spec", cluster,
                                  f"'host:port' with a port from 1 to 65535 for {where}; it has "
                                  f"{address!r}"))


def _check_task(spec: tf.train.ClusterSpec, job, task_index) -> None:
    if not isinstance(job, str) or job not in spec.jobs:
        raise ValueError(invalid("job", job, "one of the cluster's jobs: "
                                  + ", ".join(repr(j) for j in spec.jobs)))
    indices = spec.task_indices(job)
    if isinstance(task_index, bool) or not isinstance(task_index, int) or task_index not in indices:
        raise ValueError(invalid("task_index", task_index,
                                  f"a task of job {job!r}: "
                                  + _describe_indices(indices)))


def _describe_indices(indices) -> str:
    if indices == list(range(len(indices))):
        return f"0 to {len(indices) - 1}" if len(indices) > 1 else "0"
    return "one of " + ", ".join(str(i) for i in indices)


def _check_job_name(name: str, value) -> None:
    if not isinstance(value, str) or not _JOB_NAME.match(value):
        raise ValueError(invalid(name, value, "a job name such as 'worker' or 'ps'"))


def session_config(job: str, task_index: int, *, ps_jobs: Iterable[str] = (PS_JOB,),
                   config: Optional[tf.compat.v1.ConfigProto] = None
                   ) -> tf.compat.v1.ConfigProto:
    """A session ConfigProto whose device filters show only the parameter servers and this task.

    Without filters a session waits for every task of the cluster to answer, so a worker (or the
    chief) cannot start, or restart, while another worker is down. ``config``, if given, is
    copied and the filters are added to it.
    """
    _check_job_name("job", job)
    if isinstance(task_index, bool) or not isinstance(task_index, int) or task_index < 0:
        raise ValueError(invalid("task_index", task_index, "an integer >= 0"))
    ps_jobs = [ps_jobs] if isinstance(ps_jobs, str) else list(ps_jobs)
    for name in ps_jobs:
        _check_job_name("ps_jobs", name)
    result = tf.compat.v1.ConfigProto()
    if config is not None:
        result.CopyFrom(config)
    wanted = [f"/job:{name}" for name in ps_jobs] + [f"/job:{job}/task:{task_index}"]
    result.device_filters.extend(f for f in wanted if f not in result.device_filters)
    return result


def is_chief_task(cluster, job: str, task_index: int) -> bool:
    """True if the task is the cluster's chief by default.

    The chief is the first task (normally 0) of the "chief" job when the cluster has one, else
    the first task of the "worker" job. Raises ValueError when the cluster has neither: then say
    which task is the chief.
    """
    spec = cluster_spec(cluster)
    _check_task(spec, job, task_index)
    for chief_job in (CHIEF_JOB, WORKER_JOB):
        if chief_job in spec.jobs:
            return job == chief_job and task_index == min(spec.task_indices(chief_job))
    raise ValueError(
        f"The cluster has no {CHIEF_JOB!r} or {WORKER_JOB!r} job (its jobs: "
        f"{', '.join(repr(j) for j in spec.jobs)}), so no task is the chief by default: say "
        f"which task is the chief (Supervisor(is_chief=...), or --chief / --no-chief).")


def replica_device_setter(cluster, job: str, task_index: int, **kwargs):
    """TensorFlow's ``replica_device_setter`` for this task: variables on the "ps" job.

    Variables are spread over the tasks of the "ps" job, every other op stays on
    "/job:<job>/task:<task_index>". ``kwargs`` go to
    ``tf.compat.v1.train.replica_device_setter`` (``ps_strategy``, ``ps_ops``, ...). Use it as
    ``with tf.compat.v1.device(replica_device_setter(...)):`` around the model
    (``tf.device`` of TF 2 refuses device functions).
    """
    spec = cluster_spec(cluster)
    _check_task(spec, job, task_index)
    if PS_JOB not in spec.jobs:
        raise ValueError(invalid("cluster_spec", cluster,
                                  f"a {PS_JOB!r} job to hold the variables (jobs: "
                                  + ", ".join(repr(j) for j in spec.jobs) + ")"))
    return tf.compat.v1.train.replica_device_setter(
        cluster=spec, worker_device=f"/job:{job}/task:{task_index}", **kwargs)


def start_server(cluster, job: str, task_index: int) -> tf.distribute.Server:
    """Starts this task's ``tf.distribute.Server`` and returns it; its ``target`` is the master.

    Sessions on the server need ``session_config(job, task_index)`` to see only the parameter
    servers and this task (the server's own default config does not reach Python sessions). A
    parameter server then calls ``server.join()``. A server lives until its process ends.
    """
    spec = cluster_spec(cluster)
    _check_task(spec, job, task_index)
    try:
        return tf.distribute.Server(spec, job_name=job, task_index=task_index, protocol="grpc",
                                    start=True)
    except tf.errors.OpError as e:
        address = spec.task_address(job, task_index)
        raise RuntimeError(
            f"Could not start the TensorFlow server of /job:{job}/task:{task_index} on "
            f"{address} ({e.message}). Is another process, or an earlier server in this kernel, "
            f"using port {address.rsplit(':', 1)[1]}? A server lives until its process ends: "
            f"restart the kernel or pick another port.") from e


# This kernel's servers: a server holds its port until its process ends.
_servers_lock = threading.Lock()
# (job, task_index) -> (the cluster as ClusterSpec.as_dict(), its running server)
_SERVERS: Dict[Tuple[str, int], Tuple[dict, tf.distribute.Server]] = {}


def task_server(cluster_def, job: str, task_index: int) -> tf.distribute.Server:
    """This kernel's ``tf.distribute.Server`` for /job:<job>/task:<task_index> of
    ``cluster_def``: started by the first call, the same server on every later one.

    A server holds its port until its process ends, so re-running a cell must reuse it. Raises
    ValueError for a task the cluster lacks, RuntimeError when the port is taken or this kernel
    already serves the task for a different cluster.
    """
    spec = cluster_spec(cluster_def)
    wanted = spec.as_dict()
    with _servers_lock:
        known = _SERVERS.get((job, task_index))
        if known is not None:
            served, server = known
            if served != wanted:
                raise RuntimeError(
                    f"This kernel already serves /job:{job}/task:{task_index} of another "
                    f"cluster ({served}), not of {wanted}. A TensorFlow server lives until its "
                    "process ends: restart the kernel to serve another cluster.")
            return server
        server = start_server(spec, job, task_index)
        _SERVERS[(job, task_index)] = (wanted, server)
        return server
