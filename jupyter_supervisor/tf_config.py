"""This process's task in a TensorFlow 2 multi-worker run, read from ``TF_CONFIG`` (the
variable ``tf.distribute.MultiWorkerMirroredStrategy`` and its ``TFConfigClusterResolver`` read):
no TensorFlow import, so that the magic can say the role before anything trains.

The chief is the task of the ``chief`` job, or task 0 of the ``worker`` job when there is no
``chief`` job (TensorFlow's rule, as in ``multi_worker_util.is_chief``).
"""
import json
import os
from typing import Mapping, NamedTuple, Optional

from ._validate import invalid

# The jobs whose tasks train (a "ps" or "evaluator" task is not a replica of the loop).
TRAINING_JOBS = ("chief", "worker")


class Replica(NamedTuple):
    """This task among the training tasks: ``index`` (0 ... ``workers`` - 1, the chief job
    first), whether it is the chief, and its name in TF_CONFIG ("worker 1")."""
    index: int
    workers: int
    is_chief: bool
    task: str


def from_environ(environ: Optional[Mapping[str, str]] = None) -> Optional[Replica]:
    """The task TF_CONFIG names, or None when TF_CONFIG is unset or names one training task.
    Raises ValueError for a TF_CONFIG that is not a cluster with this task in it."""
    text = (os.environ if environ is None else environ).get("TF_CONFIG", "")
    if not text.strip():
        return None
    expected = ('JSON such as {"cluster": {"worker": ["host0:port", "host1:port"]}, "task": '
                '{"type": "worker", "index": 0}}')
    try:
        spec = json.loads(text)
        cluster, task = spec.get("cluster") or {}, spec.get("task") or {}
        job, index = str(task.get("type", "")), int(task.get("index", 0))
        jobs = [(name, list(cluster.get(name) or ())) for name in TRAINING_JOBS]
    except (ValueError, TypeError, AttributeError):
        raise ValueError(invalid("TF_CONFIG", text, expected)) from None
    workers = sum(len(addresses) for _, addresses in jobs)
    if workers <= 1:
        return None
    order = [(name, i) for name, addresses in jobs for i in range(len(addresses))]
    if (job, index) not in order:
        raise ValueError(invalid("TF_CONFIG", text, f"a task among the cluster's "
                                 f"{', '.join(f'{n} {i}' for n, i in order)}; or, for a task "
                                 f"that does not train, no %%supervise cell"))
    is_chief = job == "chief" or (job == "worker" and index == 0 and not cluster.get("chief"))
    return Replica(order.index((job, index)), workers, is_chief, f"{job} {index}")
