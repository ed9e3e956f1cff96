"""What a run was asked to do: ``RunConfig``, its fields declared once each (name, default,
check and, for an option of ``%%supervise``, its help), from which the magic's parser and its
``%%supervise?`` help are derived.
"""
import dataclasses
import os
from typing import Callable, List, Optional, Tuple

from . import finite, preemption
from ._validate import check_basename, check_number, invalid
from .names import AUTO, MAX, MIN, MODES, direction_of


@dataclasses.dataclass(frozen=True)
class Option:
    """How a ``RunConfig`` field is given as a ``%%supervise`` option (``--field-name``): its
    help (argparse's, ``%(default)s`` is the field's default), metavar, and ``kind``: ``int``
    or ``float`` (the text is parsed, then checked with the field's check), ``bool`` (a flag),
    or ``str``. ``choices``: argparse's."""
    help: str
    metavar: Optional[str] = None
    kind: type = str
    choices: Optional[tuple] = None


def _option(default, check: Optional[Callable[[str, object], None]] = None,
            option: Optional[Option] = None):
    """A RunConfig field: its default, its ``check(name, value)`` (raises ValueError in the
    form of ``_validate.invalid``) and, for an option of the magic, its ``Option``."""
    return dataclasses.field(default=default, metadata={"check": check, "option": option})


def _number(**limits) -> Callable[[str, object], None]:
    return lambda name, value: check_number(name, value, **limits)


def _check_logdir(name: str, value) -> None:
    if value is not None and (not isinstance(value, (str, os.PathLike)) or not os.fspath(value)):
        raise ValueError(invalid(name, value, "a directory path, or None"))


def _check_name(name: str, value) -> None:
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise ValueError(invalid(name, value, "a non-empty name without surrounding spaces"))


def _check_init_fn(name: str, value) -> None:
    if value is not None and not callable(value):
        raise ValueError(invalid(name, value, "a function (graph: taking the session; eager: "
                                 "taking nothing), or None"))


def _check_master(name: str, value) -> None:
    if not isinstance(value, str):
        raise ValueError(invalid(name, value, "a target such as 'grpc://localhost:2222', or ''"))


def _check_metric(name: str, value) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()
                              or value != value.strip()):
        raise ValueError(invalid(name, value, "the name of a metric, such as 'val_loss', or "
                                 "None"))


def _check_mode(name: str, value) -> None:
    if value not in MODES:
        raise ValueError(invalid(name, value, " or ".join(repr(m) for m in MODES)))


def _check_notice(name: str, value) -> None:
    if not callable(value) and not (isinstance(value, str) and value in preemption.CHOICES):
        raise ValueError(invalid(name, value, " or ".join(repr(c) for c in preemption.CHOICES)
                                 + ", or a function of no arguments that returns True on a "
                                 "preemption notice"))


def _check_session_config(name: str, value) -> None:
    if value is not None:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        if not isinstance(value, tf.compat.v1.ConfigProto):
            raise ValueError(invalid(name, value, "a tf.compat.v1.ConfigProto, or None"))


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What a run was asked to do; ``%%supervise`` builds one from its options, which are
    declared here, each once: name, default, check and help (``options()``).

    ``name`` defaults to the last component of ``logdir`` (or "run" without one); ``is_chief``
    defaults to ``task_index == 0``. ``init_fn`` is called only when there is no checkpoint to
    restore (graph: ``fn(sess)``; eager: ``fn()``, after ``sv.track``, or at the start of
    the first ``model.fit`` with ``sv.callback``). ``session_config`` is the ``ConfigProto`` of a
    graph run's managed session; for a task of a cluster, ``cluster.session_config(job,
    task_index)``, whose device filters let the task start or restart while another task is
    down. ``on_nan`` ("stop", "rollback" or "ignore") and ``max_rollbacks``: what a checkpoint
    due on a model that is not finite does (``finite.Policy``); both backends follow it.
    ``keep_best`` and ``keep_best_mode``: the metric whose best checkpoint retention keeps
    beside the newest ``keep`` (eager runs; ``eager.best``). ``preemption_notice``: "auto",
    "off", or a function of no arguments that returns True on a preemption notice (as
    TensorFlow's ``termination_watcher_fn``), polled every second (``notebook/notices.py``).
    """
    logdir: Optional[str] = _option(None, _check_logdir, Option(
        "Directory for checkpoints and event files (no *, ?, [ or \\ in it); a relative path "
        "is relative to the kernel's working directory, the notebook's folder. Re-running the "
        "cell resumes from its newest checkpoint. Without it nothing is saved. Default: none.",
        metavar="PATH"))
    name: Optional[str] = _option(None, _check_name, Option(
        "Name of the run in %%supervise stop/resume/... Default: the logdir's last component "
        "('run' without a logdir)."))
    # Notebook-friendly defaults: a crash loses at most a minute, the plots move every 10 s.
    save_model_secs: float = _option(60, _number(), Option(
        "Seconds between checkpoints (0: only the final one). Eager code: a checkpoint whose "
        "write takes longer makes the next one due this long after that write ended; one due "
        "while a write still runs waits for it, up to one more interval, without stopping "
        "training. Default: %(default)s.",
        metavar="SECS", kind=float))
    save_summaries_secs: float = _option(10, _number(), Option(
        "Seconds between summaries and step-rate records (0: none); the panel draws what the "
        "event files hold. Eager code writes its scalars more often while a session is young "
        "(every 0.5 s, then less often as it ages), and every session's last step always. "
        "Default: %(default)s.",
        metavar="SECS", kind=float))
    checkpoint_basename: str = _option("model.ckpt", check_basename, Option(
        "File name prefix of the checkpoints (no /, *, ?, [ or \\ in it). "
        "Default: %(default)s.", metavar="NAME"))
    keep: int = _option(5, _number(integer=True, minimum=1), Option(
        "How many of the newest checkpoints are kept. Default: %(default)s.", metavar="N",
        kind=int))
    keep_best: Optional[str] = _option(None, _check_metric, Option(
        "Keep also the checkpoint at which METRIC was best so far (e.g. val_loss), beside the "
        "newest --keep N: a full training state, never deleted by retention, replaced once a "
        "better one is on disk. METRIC comes from fit's epoch-end logs (validation included; "
        "never from an epoch cut by a stop), from sv.report(METRIC=...) in a loop, or from "
        "sv.step(METRIC=...) at the checkpoints a loop writes anyway. Eager runs only. "
        "Default: none.", metavar="METRIC"))
    keep_best_mode: str = _option(AUTO, _check_mode, Option(
        "With --keep-best: 'min' (lower is better), 'max', or 'auto': from the metric's "
        "name, as Keras decides (a loss or an error is best at its minimum; an accuracy, AUC, "
        "precision, recall... at its maximum; a name that says neither needs min or max). "
        "Default: %(default)s.",
        metavar="MODE", choices=MODES))
    max_steps: Optional[int] = _option(None, _number(integer=True, minimum=1, allow_none=True),
                                       Option(
        "Stop cleanly (final checkpoint, status 'finished') when the global step reaches N; "
        "the loop must check sv.should_stop(). Default: no limit.", metavar="N", kind=int))
    init_fn: Optional[Callable] = _option(None, _check_init_fn)
    repeat: bool = _option(False, None, Option(
        "The cell body is one training step: run it again and again until the run stops (no "
        "while loop needed).", kind=bool))
    master: str = _option("", _check_master, Option(
        "TensorFlow master of a cluster whose server for this task runs elsewhere, e.g. "
        "grpc://host:2222 (not with --cluster). Default: an in-process session."))
    task_index: int = _option(0, _number(integer=True), Option(
        "This task's index in its --job (with --master: among the workers). "
        "Default: %(default)s.", metavar="N", kind=int))
    is_chief: Optional[bool] = _option(None)
    # The training tasks of a TensorFlow 2 multi-worker run (TF_CONFIG; ``task_index`` is this
    # task's place among them, the chief first): each runs the same cell.
    workers: int = _option(1, _number(integer=True, minimum=1))
    # A worker started before its chief notices the chief within seconds, not half a minute.
    recovery_wait_secs: float = _option(5, _number(), Option(
        "How often a non-chief checks whether the chief's model is ready (TensorFlow's "
        "Supervisor: 30). Default: %(default)s.", metavar="SECS", kind=float))
    stall_secs: float = _option(30, _number(), Option(
        "A running run that makes no step for max(10 x its recent median step time, SECS) is "
        "stalled: the panel's header and timeline say since when, until steps come again "
        "(before a session's first step time is known: 10 x SECS). 0: never. "
        "Default: %(default)s.", metavar="SECS", kind=float))
    stop_grace_secs: float = _option(30, _number(), Option(
        "How long a stop waits for the service threads to end, and for a checkpoint write in "
        "flight: a write that hangs is then given up, and the session ends saying which step "
        "is not on disk. Default: %(default)s.",
        metavar="SECS", kind=float))
    preemption_notice: object = _option(preemption.AUTO, _check_notice, Option(
        "What a cloud machine's preemption notice does. 'auto': where the metadata service of "
        "AWS, Google Cloud or Azure answers (asked once per kernel, with a short timeout; "
        "elsewhere nothing is polled), the kernel polls its notice as the provider advises, "
        "and on one the run writes a checkpoint at once and stops before the machine does "
        "(its panel, output and event file say so). 'off': this run is not stopped by a "
        "notice. From Python, RunConfig(preemption_notice=fn) takes a function of no "
        "arguments that returns True on a notice instead. The environment variable "
        "JUPYTER_SUPERVISOR_METADATA_URL sets the service's address (a proxy, a test). "
        "Default: %(default)s.", metavar="WHEN", choices=preemption.CHOICES))
    session_config: Optional[object] = _option(None, _check_session_config)
    on_nan: str = _option(finite.STOP, finite.check_on_nan, Option(
        finite.ON_NAN_HELP + " Default: %(default)s.", metavar="ACTION",
        choices=finite.ON_NAN_MODES))
    max_rollbacks: int = _option(finite.DEFAULT_MAX_ROLLBACKS,
                                 _number(integer=True, minimum=1), Option(
        "With --on-nan rollback: how many rollbacks a session makes before it stops as with "
        "'stop'. Default: %(default)s.", metavar="N", kind=int))

    def __post_init__(self):
        _check_logdir("logdir", self.logdir)
        if self.logdir is not None:
            object.__setattr__(self, "logdir", os.path.expanduser(os.fspath(self.logdir)))
        if self.name is None:
            object.__setattr__(self, "name", _default_name(self.logdir))
        for field in dataclasses.fields(self):
            check = field.metadata.get("check")
            if check is not None:
                check(field.name, getattr(self, field.name))
        if self.is_chief is None:
            object.__setattr__(self, "is_chief", self.task_index == 0)
        if self.keep_best is None and self.keep_best_mode != AUTO:
            raise ValueError(invalid("keep_best_mode", self.keep_best_mode,
                                     f"{AUTO!r} without a metric to keep: a mode says which "
                                     "values of that metric are better. Give the metric too "
                                     "(--keep-best val_loss)"))
        if self.keep_best is not None and self.logdir is None:
            raise ValueError(invalid("keep_best", self.keep_best,
                                     "a logdir too: without one nothing is saved, so no "
                                     "checkpoint can be kept (--logdir PATH)"))
        if self.keep_best is not None and self.keep_best_direction is None:
            raise ValueError(invalid(
                "keep_best_mode", self.keep_best_mode,
                f"{MIN!r} or {MAX!r}: the name {self.keep_best!r} does not say whether it is "
                "best at its minimum or its maximum (as Keras' names do: a loss, an error, an "
                "accuracy, an AUC...)"))

    @staticmethod
    def options() -> List[Tuple[str, object, Option, Optional[Callable[[str, object], None]]]]:
        """``[(field name, default, Option, check)]`` of the fields that are options of the
        magic, in their order."""
        return [(field.name, field.default, field.metadata["option"], field.metadata["check"])
                for field in dataclasses.fields(RunConfig) if field.metadata.get("option")]

    @property
    def role(self) -> str:
        """'local' (no master, one worker), 'chief' or 'worker'."""
        if not self.is_chief:
            return "worker"
        return "chief" if self.master or self.workers > 1 else "local"

    @property
    def role_text(self) -> str:
        """The role as the panel and ``%supervise`` say it: "chief on grpc://...", "worker
        1 of 2", "chief (worker 0 of 2)"; '' for a local run."""
        if self.role == "local":
            return ""
        if self.master:
            return f"{self.role} on {self.master}"
        place = f"worker {self.task_index} of {self.workers}"
        return f"chief ({place})" if self.is_chief else place

    @property
    def keep_best_direction(self) -> Optional[str]:
        """MIN or MAX: which values of ``keep_best`` are better (``keep_best_mode``, or with
        AUTO what the metric's name says: ``names.direction_of``); None without
        ``keep_best``."""
        if self.keep_best is None:
            return None
        if self.keep_best_mode != AUTO:
            return self.keep_best_mode
        return direction_of(self.keep_best)

    @property
    def saves(self) -> bool:
        """True when this task writes checkpoints and event files (a chief with a logdir)."""
        return bool(self.logdir) and bool(self.is_chief)


def _default_name(logdir: Optional[str]) -> str:
    if not logdir:
        return "run"
    return logdir.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or logdir
