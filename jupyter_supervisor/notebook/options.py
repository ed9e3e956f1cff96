"""What the options of a ``%%supervise`` cell make of a run: its ``RunConfig``, with this
task's role where it trains in a cluster (``--cluster``, or the replicas that ``TF_CONFIG``
names), and errors said in the words of the options the user typed.

``magics.py`` parses the line and hands the arguments here; no IPython shell is needed, only
the notebook's namespace (where ``--init-fn`` and ``--cluster`` name variables). TensorFlow is
imported only with ``--cluster`` (its server and session configs).
"""
import dataclasses
import re

from IPython.core.error import UsageError

from .. import tf_config
from ..config import RunConfig


def run_config(args, user_ns) -> RunConfig:
    """The run's configuration from the magic's parsed ``args``, the names they give looked up
    in ``user_ns``.

    Args:
        args: the ``argparse.Namespace`` of ``%%supervise``'s line: every ``RunConfig`` option
            and ``--init-fn``, ``--cluster``, ``--job``, ``--chief``/``--no-chief``.
        user_ns: the notebook's namespace.

    Returns:
        The ``RunConfig``, its role (``is_chief``, ``task_index``, ``workers``, ``master``,
        ``session_config``) decided by ``--cluster`` or ``TF_CONFIG``. With ``--cluster``,
        this task's server is started, last, once every option is known to be good.

    Raises:
        UsageError: an option, or the options together, cannot work (the message names the
            option as typed).
        RuntimeError: the server cannot start (its port is taken, or the kernel serves another
            cluster), shown as one line.
    """
    task = _cluster_task(args, user_ns)
    is_chief, session_config = args.chief, None
    replica = None if task is not None or args.master else _tf_config_replica(args)
    if task is not None:
        cluster = _cluster_module()
        try:
            if is_chief is None:
                is_chief = cluster.is_chief_task(*task)
            session_config = cluster.session_config(task[1], task[2])
        except (ValueError, TypeError) as e:
            raise UsageError(option_message(str(e))) from None
    try:
        config = RunConfig(
            **{name: getattr(args, name) for name, *_ in RunConfig.options()},
            init_fn=_init_fn(args.init_fn, user_ns), is_chief=is_chief,
            session_config=session_config)
        if replica is not None:
            config = dataclasses.replace(config, is_chief=replica.is_chief,
                                         task_index=replica.index, workers=replica.workers)
        if task is not None:
            # Last, once every option is known to be good: a server cannot be stopped.
            server = _cluster_module().task_server(*task)
            config = dataclasses.replace(config, master=server.target)
    except (ValueError, TypeError) as e:
        raise UsageError(option_message(str(e))) from None
    except RuntimeError as e:  # the port is taken, or another cluster is served
        raise one_line(e)
    return config


def _cluster_task(args, user_ns):
    """(cluster spec, job, task index) of ``--cluster``/``--job``/``--task-index``, or None
    without ``--cluster``; raises UsageError for what cannot work."""
    if args.cluster is None:
        if args.job is not None:
            raise UsageError("--job names this task's job in a cluster: give the cluster "
                             "too, e.g. --cluster CLUSTER --job worker --task-index 1.")
        return None
    if args.master:
        raise UsageError("--master and --cluster exclude each other: with --cluster the "
                         "master is this task's own server. Leave out --master.")
    if args.job is None:
        raise UsageError("--cluster needs --job NAME (and --task-index N): which task of "
                         "the cluster this notebook runs, e.g. --job worker --task-index 1.")
    cluster = _cluster_module()
    value = args.cluster
    if value.isidentifier():
        if value not in user_ns:
            raise UsageError(
                f"Invalid value for argument `--cluster`. Received: --cluster={value}, "
                "which is not defined. Expected the name of a notebook variable holding "
                "the cluster, e.g. CLUSTER = {'ps': ['host0:2222'], 'worker': "
                "['host1:2222', 'host2:2222']}, or that dict as quoted JSON.")
        value = user_ns[value]
    try:
        spec = cluster.cluster_spec(value)
    except (ValueError, TypeError) as e:
        raise UsageError(option_message(str(e))) from None
    if args.job == cluster.PS_JOB and cluster.PS_JOB in spec.jobs:
        raise UsageError(
            f"--job {cluster.PS_JOB}: a parameter server runs no training cell. Serve it "
            "from a plain cell of its own notebook instead: server = "
            f"jupyter_supervisor.cluster.start_server(CLUSTER, {cluster.PS_JOB!r}, "
            f"{args.task_index}). The kernel serves the task for as long as it lives.")
    return spec, args.job, args.task_index


def _tf_config_replica(args):
    """This task of a TensorFlow 2 multi-worker run (TF_CONFIG names several training
    tasks), or None. Its role is TF_CONFIG's: --chief, --no-chief and --task-index may
    repeat it, not contradict it (MultiWorkerMirroredStrategy takes the chief's initial
    values and the cell's checkpoints from the same task)."""
    try:
        replica = tf_config.from_environ()
    except ValueError as e:  # an environment variable, not an option: named as it is
        raise UsageError(str(e)) from None
    if replica is None:
        return None
    if args.chief is not None and args.chief != replica.is_chief:
        raise UsageError(
            f"--{'' if args.chief else 'no-'}chief contradicts TF_CONFIG, which makes this "
            f"task ({replica.task}) {'the chief' if replica.is_chief else 'not the chief'}. "
            "Leave the option out: under TF_CONFIG the role is TensorFlow's.")
    if args.task_index not in (0, replica.index):
        raise UsageError(
            f"--task-index {args.task_index} contradicts TF_CONFIG ({replica.task}, "
            f"training task {replica.index} of {replica.workers}). Leave it out.")
    return replica


def _init_fn(name, user_ns):
    """The function of the notebook that ``--init-fn`` names, or None."""
    if name is None:
        return None
    fn = user_ns.get(name)
    if not callable(fn):
        kind = type(fn).__name__
        found = "is not defined" if name not in user_ns else \
            f"is {'an' if kind[:1] in 'aeiouAEIOU' else 'a'} {kind}, not a function"
        raise UsageError(
            f"Invalid value for argument `--init-fn`. Received: --init-fn={name}, which "
            f"{found}. Expected the name of a function of the notebook: taking the session "
            "for graph code, e.g. `def warm_start(sess): saver.restore(sess, path)`; "
            "taking no argument in eager mode.")
    return fn


def _cluster_module():
    from ..graph import cluster  # pylint: disable=import-outside-toplevel  (imports TensorFlow)
    return cluster


def one_line(error: BaseException) -> BaseException:
    """Makes IPython show ``error`` as one line (type and message), without our frames."""
    error._render_traceback_ = lambda: [f"{type(error).__name__}: {error}"]
    return error


# The one form of a bad-argument message (``_validate.invalid``), naming a Python argument.
_PYTHON_ARGUMENT = re.compile(r"argument `(\w+)`\. Received: \1=")
# Python arguments whose option has another name.
_OPTION_NAMES = {"cluster_spec": "--cluster"}


def option_message(message: str) -> str:
    """An error of the Python API (RunConfig, the Supervisor, the cluster helpers) as the
    options the user typed: `save_model_secs` becomes `--save-model-secs`."""
    def option(match):
        flag = _OPTION_NAMES.get(match.group(1), "--" + match.group(1).replace("_", "-"))
        return f"argument `{flag}`. Received: {flag}="
    return _PYTHON_ARGUMENT.sub(option, message).replace(", or None.", ".")
