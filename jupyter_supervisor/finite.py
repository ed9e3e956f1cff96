"""The finiteness check made with every checkpoint, shared by both backends.

A diverged run (a NaN or infinite loss or weight) must never be checkpointed: with the default
retention every good checkpoint would be pushed out minutes after the divergence. So before a
checkpoint gets its name, a backend checks

* the trainable variables, over the very values the save writes, in TensorFlow, never with a
  Python loop over arrays, in one of two forms. Before a write: ``finite_flags``, one fused
  computation on every core (per variable, on its device: its sum is finite, else
  ``reduce_all(is_finite)``, see ``_all_finite``; stacked into one bool vector fetched at
  once). Beside a graph Saver's write, where it holds the files back until the check passed:
  a CheckNumerics per variable one after the other, on one core and gentle on the memory the
  write reads too, so that it costs the save little. In graph mode ``graph/saver_guard.py``
  puts the check in the Saver's own session run: beside the write as the gate of the merge
  of a sharded Saver's parts (the Supervisor's own Saver is sharded where that writes the
  same files), or before the write of a plain Saver; its ``variable_check`` builds the fused
  form once in the Supervisor's graph, before the graph is finalized, for the variables a
  guard cannot cover. In eager mode ``VariableCheck.eager`` wraps the fused form in a
  ``tf.function`` for the live variables, and ``VariableCheck.of_copies`` checks the host
  copies of a snapshot (``eager/snapshot.py``) in the writer thread, before it writes them: in
  the background, so the fused form, which takes far less CPU time than the gentle one;
* the most recent value of every scalar summary the run reported (those that are not finite
  as ``NonFiniteScalar``; the graph Supervisor keeps them in ``graph/summaries.py``'s
  ``ScalarWatch``): a NaN loss is usually the first sign. In mixed precision a Keras
  ``LossScaleOptimizer`` skips a step whose float16 values overflowed (that loss is not
  finite, by design): while its loss scale is at least ``MIN_LOSS_SCALE`` the weights alone
  decide (``loss_scale_absorbs``).

What to do when the check fails is the run's ``on_nan`` policy, ``Policy``: ``stop`` (the
default: no checkpoint, the run fails with ``NonFiniteError`` saying what to do), ``rollback``
(restore the newest good checkpoint at the next step boundary and go on, at most
``max_rollbacks`` times, then stop) or ``ignore`` (no check: TensorFlow's behaviour). The
policy decides, counts and words it, once; a backend only says where a rollback happens (at a
step boundary of its training thread) and performs the restore it is told to.

Nothing of IPython or ipywidgets. TensorFlow is imported when a check is built, so that the
policy's names and ``check_policy`` serve ``RunConfig`` and the magic without it.
"""
import contextlib
import glob
import logging
import math
import threading
import time
import weakref
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from . import compat, events
from ._validate import check_number, invalid

logger = logging.getLogger("jupyter_supervisor")

STOP, ROLLBACK, IGNORE = "stop", "rollback", "ignore"
ON_NAN_MODES = (STOP, ROLLBACK, IGNORE)
DEFAULT_MAX_ROLLBACKS = 3

# Variables of these types can hold a NaN or an infinity; the others are not checked.
FLOAT_TYPES = ("float16", "bfloat16", "float32", "float64")

# How many names a message lists before "and N more".
_NAMES_SHOWN = 3


# What each mode does, as the magic's help says it.
ON_NAN_HELP = (
    "What happens when a checkpoint is due and the model is not finite (a NaN or an infinity "
    "in a trainable variable or in the newest value of a scalar summary; checked with every "
    "checkpoint: periodic, final, Save, sv.save_checkpoint(); the variables in the background, "
    "before the write (eager) or beside it (graph), which gets the checkpoint's name only if "
    "they pass). 'stop': nothing is saved and the run fails with a message naming the step, "
    "what was not finite and the newest good checkpoint (lower the learning rate, then resume "
    "from it). 'rollback': nothing is saved; the newest good checkpoint is restored at the "
    "body's next step (eager: the step of the save, or, when only the weights were not "
    "finite, the first step after that check) and "
    "training goes on, at most --max-rollbacks times (each shown in the panel and the event "
    "file), then as 'stop'; the checkpoint that ends a fit or the run stops it too. In a Keras "
    "fit the data goes on where it was (the bad batch is not trained again). 'ignore': no "
    "check (TensorFlow's behaviour: a diverged model is saved and pushes good checkpoints "
    "out). A checkpoint that was not written never removes an older one.")


def check_on_nan(name: str, value) -> None:
    """Raises ValueError (the form of ``_validate``) unless ``value`` is one of
    ``ON_NAN_MODES``."""
    if value not in ON_NAN_MODES:
        raise ValueError(invalid(name, value,
                                 "one of " + ", ".join(repr(m) for m in ON_NAN_MODES)))


def check_policy(on_nan, max_rollbacks) -> None:
    """Raises ValueError (the form of ``_validate``) for an unknown ``on_nan`` or a
    ``max_rollbacks`` that is not an integer >= 1."""
    check_on_nan("on_nan", on_nan)
    check_number("max_rollbacks", max_rollbacks, integer=True, minimum=1)


class NonFiniteError(RuntimeError):
    """The model is not finite (a NaN or an infinity in a trainable variable or in the newest
    value of a scalar summary), so it was not checkpointed and the run stopped.

    ``step``: the global step of the failed check; ``problem``: what was not finite, first
    sign first; ``newest_good``: the newest checkpoint written before (None without one).
    """

    def __init__(self, message: str, step: Optional[int] = None, problem: str = "",
                 newest_good: Optional[str] = None):
        super().__init__(message)
        self.step = step
        self.problem = problem
        self.newest_good = newest_good


class Rollback(NamedTuple):
    """A rollback the policy decided: ``step`` and ``problem`` of the refused checkpoint, and
    ``path``, the newest good checkpoint to restore."""
    step: Optional[int]
    problem: str
    path: str


class Policy:
    """The ``on_nan`` policy of one session: what a checkpoint refused as not finite leads to.

    A backend calls ``refused`` when nothing was saved; that returns the ``Rollback`` to make
    (kept as ``pending`` until ``take``n), or raises ``NonFiniteError``. The backend restores
    ``Rollback.path`` at its next step boundary, then calls ``rolled_back`` (or
    ``rollback_failed``). Not thread-safe: a backend calls it under its save lock."""

    def __init__(self, on_nan: str = STOP, max_rollbacks: int = DEFAULT_MAX_ROLLBACKS):
        check_policy(on_nan, max_rollbacks)
        self.on_nan = on_nan
        self.max_rollbacks = max_rollbacks
        self.rollbacks = 0                          # made in this session
        self.pending: Optional[Rollback] = None     # decided, not yet taken

    @property
    def checks(self) -> bool:
        """False with ``on_nan="ignore"``: nothing is checked."""
        return self.on_nan != IGNORE

    def reset(self) -> None:
        """A new session: no rollback made, none pending."""
        self.rollbacks, self.pending = 0, None

    def refused(self, step: Optional[int], problem: str, newest_good: Optional[str], *,
                final: bool) -> Rollback:
        """Nothing was saved for ``step`` because ``problem``. With ``on_nan="rollback"``, not
        for the ``final`` checkpoint (which ends the run), with a good checkpoint and while
        rollbacks are left: returns the rollback (also ``pending``). Else raises
        NonFiniteError (logged), naming ``newest_good``."""
        if (self.on_nan == ROLLBACK and not final and newest_good
                and self.rollbacks < self.max_rollbacks):
            self.pending = Rollback(step, problem, newest_good)
            logger.info("Training diverged at step %s: %s. Not saved; rolling back to %s.",
                        step, problem, newest_good)
            return self.pending
        error = NonFiniteError(
            non_finite_message(step, problem, newest_good, rollbacks=self.rollbacks,
                               final=final), step, problem, newest_good)
        logger.error("%s", error)
        raise error

    def take(self) -> Optional[Rollback]:
        """The pending rollback, now to be made (None: none)."""
        pending, self.pending = self.pending, None
        return pending

    def rollback_failed(self, rollback: Rollback, error: BaseException) -> "NonFiniteError":
        """The error that stops the run when the restore of ``rollback`` raised ``error``."""
        from .checkpoints import describe_error  # pylint: disable=import-outside-toplevel
        return NonFiniteError(
            f"Training diverged at step {rollback.step}: {rollback.problem}. Rolling back to "
            f"{rollback.path} failed ({describe_error(error)}), and the run stopped. Nothing "
            "was saved for the diverged state.", rollback.step, rollback.problem, rollback.path)

    def rolled_back(self, rollback: Rollback, restored_step: Optional[int], event_file,
                    hub: "events.EventHub") -> None:
        """After the restore of ``rollback`` (at ``restored_step``): counts it, logs it, marks
        it in ``event_file`` (or None) as a restart from the checkpoint, so that TensorBoard
        drops the diverged points, and reports ``events.RolledBack``."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        self.rollbacks += 1
        message = rollback_message(rollback.step, rollback.problem, rollback.path,
                                   restored_step, self.rollbacks, self.max_rollbacks)
        logger.warning("%s", message)
        if event_file is not None:
            session_log = tf.compat.v1.SessionLog
            event_file.add_session_log(session_log(status=session_log.START, msg=message),
                                       (restored_step or 0) + events.START_AFTER)
        hub.emit(events.RolledBack, rollback.step, restored_step, rollback.path,
                 rollback.problem, self.rollbacks, self.max_rollbacks, time.time())


# ------------------------------------------------------------------------------- variables

def finite_flags(variables: Sequence, names: Optional[Sequence[str]] = None):
    """A bool vector: element i is True iff ``variables[i]`` holds no NaN and no infinity.

    Builds one reduction per variable, on the variable's device (on a cluster only the bools
    cross the network), stacked into one tensor so that a single fetch (a session run, or one
    call of a ``tf.function``) evaluates them all, in parallel on TensorFlow's threads. Works in
    a graph and inside a ``tf.function``. ``names``: the reductions' op names (graph mode).
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    flags = []
    for i, variable in enumerate(variables):
        device = getattr(variable, "device", "") or ""
        with tf.device(device) if device else contextlib.nullcontext():
            flags.append(tf.identity(_all_finite(tf, variable),
                                     name=names[i] if names else None))
    return tf.stack(flags, name="flags" if names else None)


def _all_finite(tf, value):
    """A scalar bool: ``value`` holds no NaN and no infinity.

    For float32 and float64, first the sum of its elements, one pass that allocates nothing: a
    NaN or an infinity anywhere makes the sum NaN or infinite (IEEE arithmetic never turns them
    back into a finite number), so a finite sum proves the whole tensor finite. Only a
    non-finite sum (a bad value, or finite values whose sum overflows) pays for the exact
    element-wise test. Half types overflow too easily: they take the exact test at once.
    """
    exact = lambda: tf.reduce_all(tf.math.is_finite(value))  # noqa: E731
    if value.dtype.base_dtype.name not in ("float32", "float64"):
        return exact()
    return tf.cond(tf.math.is_finite(tf.reduce_sum(value)), lambda: tf.constant(True), exact)


def float_variables(variables) -> list:
    """The variables of ``variables`` that can hold a NaN or an infinity: those a check
    checks."""
    return [v for v in variables if v.dtype.base_dtype.name in FLOAT_TYPES]


def variable_name(variable) -> str:
    """The name a check gives ``variable``: its own, without ``:0``."""
    name = getattr(variable, "name", "") or ""
    return name[:-2] if name.endswith(":0") else name


class VariableCheck:
    """The fused check of a fixed list of variables; ``names`` are theirs, without ``:0``.

    Build it with ``graph.saver_guard.variable_check`` (a graph backend; then ``run(sess)``)
    or ``eager`` (an eager backend; then ``run()``). ``run`` returns the names of the
    variables that are not finite ([] when all are). A check of no float variable costs
    nothing and always passes.
    """

    def __init__(self, names: List[str], evaluate: Callable[..., object]):
        self.names = names
        self._evaluate = evaluate

    @classmethod
    def eager(cls, variables: Sequence) -> "VariableCheck":
        """The check of ``variables`` (tf.Variables) as one ``tf.function``, traced at its
        first run (in a time that grows with the number of variables). The same
        variables get the same check, for as long as they live (``_EagerChecks``): each
        supervisor of a model re-run in a kernel would otherwise trace it again, and
        TensorFlow warns of retracing from the fifth."""
        variables = float_variables(variables)
        return _EAGER_CHECKS.get(cls, variables)

    @classmethod
    def of_copies(cls, variables: Sequence, copies: Sequence) -> "VariableCheck":
        """The check of ``copies``, host tensors holding the values of the float ``variables``
        at an instant (a snapshot's, in their order), named after the variables; its function
        is ``copies_flags``'s."""
        if not copies:
            return cls([], lambda: [])
        flags = copies_flags(copies)
        return cls([variable_name(v) for v in variables], lambda: flags(*copies).numpy())

    @classmethod
    def untraced(cls, variables: Sequence) -> "VariableCheck":
        """The check of ``variables`` (tf.Variables), run op by op, nothing traced: for a
        check run once, where tracing ``eager``'s would cost more than running it (a few
        milliseconds for a small model, against a tenth of a second or more to trace)."""
        variables = float_variables(variables)
        if not variables:
            return cls([], lambda: [])
        return cls([variable_name(v) for v in variables], lambda: finite_flags(variables).numpy())

    traces = 0   # eager: times its function was traced (once, at its first run)

    def run(self, *sess) -> List[str]:
        """The names of the variables holding a NaN or an infinity now ([] if none)."""
        if not self.names:
            return []
        return [name for name, ok in zip(self.names, self._evaluate(*sess)) if not ok]


class _EagerChecks:
    """The eager ``VariableCheck`` of each list of variables in use, held by weak references
    to the variables: a check lives while its variables do; and the traced check of copies
    of each structure (``of_copies``)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._checks: Dict[tuple, tuple] = {}   # ids -> (weak references, check)
        # (and ("copies", specs) -> ((), a check whose ``function`` is the traced check)

    def get(self, cls, variables: list) -> "VariableCheck":
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        key = tuple(id(v) for v in variables)
        with self._lock:
            found = self._checks.get(key)
            if found is not None and all(ref() is v for ref, v in zip(found[0], variables)):
                return found[1]
        refs = tuple(weakref.ref(v, lambda _, k=key: self._drop(k)) for v in variables)
        if not variables:
            check = cls([], lambda: [])
        else:
            def traced():
                check.traces += 1
                # Weak references here too, or the check would keep its variables alive.
                return finite_flags([ref() for ref in refs])

            flags = tf.function(traced, autograph=False)
            check = cls([variable_name(v) for v in variables], lambda: flags().numpy())
        with self._lock:
            self._checks[key] = (refs, check)
        return check

    def _drop(self, key: tuple) -> None:
        with self._lock:
            found = self._checks.get(key)
            if found is not None and any(ref() is None for ref in found[0]):
                del self._checks[key]

    def of_copies(self, copies: Sequence) -> Callable:
        """The traced ``finite_flags`` of tensors like ``copies`` (dtypes and shapes), traced
        now if it is not yet: one per structure of a model, kept for the process (it holds no
        tensor); its entry counts its traces."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        key = ("copies",) + tuple((c.dtype.name, tuple(c.shape.as_list())) for c in copies)
        with self._lock:
            found = self._checks.get(key)
        if found is not None:
            return found[1].function
        entry = VariableCheck([], lambda: [])

        def traced(*values):
            entry.traces += 1
            return finite_flags(values)

        entry.function = tf.function(
            traced, autograph=False,
            input_signature=[tf.TensorSpec(c.shape, c.dtype) for c in copies],
        ).get_concrete_function()
        with self._lock:
            return self._checks.setdefault(key, ((), entry))[1].function


_EAGER_CHECKS = _EagerChecks()


def copies_flags(copies: Sequence) -> Callable:
    """A traced function: ``finite_flags`` of tensors like ``copies`` (a snapshot's host
    copies of float variables), one bool per tensor; one per structure of a model in a
    process, traced in the calling thread at the first call for that structure."""
    return _EAGER_CHECKS.of_copies(copies)


# The text the failure of a guarded save carries (``VariableCheck.guard``,
# ``graph.saver_guard``).
GUARD_TEXT = "jupyter_supervisor: a tensor to be saved is not finite"


def remove_refused_save(checkpoint_path: str) -> None:
    """Deletes the parts a save refused by a finiteness guard (or cut short) wrote before its
    merge: the ``<checkpoint_path>_temp`` directory of TensorFlow's sharded saves, or on
    ``s3://``, where TensorFlow makes no temporary directory, the ``<checkpoint_path>.part-*``
    files next to the checkpoints."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    temp = compat.save_parts(checkpoint_path).directory
    # What failed is the model, not this. A leftover _temp goes at the next start
    # (remove_partial_saves, local disks); a leftover part on s3:// stays.
    with contextlib.suppress(tf.errors.OpError, OSError):
        if tf.io.gfile.exists(temp):
            tf.io.gfile.rmtree(temp)
    parts = []
    with contextlib.suppress(tf.errors.OpError, OSError):
        parts = tf.io.gfile.glob(compat.save_parts(glob.escape(checkpoint_path)).s3_prefix + "-*")
    for part in parts:
        with contextlib.suppress(tf.errors.OpError, OSError):
            tf.io.gfile.remove(part)


def is_guard_failure(error) -> bool:
    """True for the error of a save that a finiteness guard stopped (``VariableCheck.guard``,
    ``graph.saver_guard.guard_saver``)."""
    return GUARD_TEXT in str(error)


# ------------------------------------------------------------------------------- summaries

class NonFiniteScalar(NamedTuple):
    """A scalar summary whose newest value is not finite; ``since``: the step of the first
    of its non-finite values in a row (None for summaries without a step)."""
    tag: str
    value: float
    since: Optional[int]


# A Keras LossScaleOptimizer (mixed_float16) skips a step whose gradients are not finite and
# halves its loss scale: a float16 overflow, not divergence, even though that batch's loss (and
# fit's mean loss until the epoch ends) is not finite. Below this scale, halving no longer
# explains it: the unscaled loss or gradients are not finite for real. From the initial 2**15,
# that is 16 skips with no good step to double it back.
MIN_LOSS_SCALE = 1.0


def loss_scale_absorbs(objects) -> bool:
    """True when ``objects`` (what a run checkpoints) hold a Keras LossScaleOptimizer whose
    loss scale is still at least MIN_LOSS_SCALE: then a non-finite loss summary is a step it
    skipped, and the weights alone decide (they are checked with every checkpoint)."""
    for value in objects:
        scale = getattr(value, "dynamic_scale", None)
        if scale is None or type(value).__name__ != "LossScaleOptimizer":
            continue
        try:
            number = float(scale.numpy())
        except (AttributeError, TypeError, ValueError):
            continue
        if math.isfinite(number) and number >= MIN_LOSS_SCALE:
            return True
    return False


# -------------------------------------------------------------------------------- messages

def describe_problem(variables: Sequence[str], summaries: Sequence[NonFiniteScalar],
                     other_saved: bool = False) -> str:
    """What was not finite, the first sign first: the summaries by the step they went bad (a
    NaN loss usually shows before the weights), then the variables. ``other_saved``: a saved
    tensor that is not a trainable variable (an optimizer slot, a moving average) was not."""
    parts = []
    for scalar in summaries[:_NAMES_SHOWN]:
        since = "" if scalar.since is None else f" since step {scalar.since}"
        parts.append(f"summary {scalar.tag!r} is {_value_text(scalar.value)}{since}")
    if len(summaries) > _NAMES_SHOWN:
        parts.append(f"{len(summaries) - _NAMES_SHOWN} more summaries")
    if variables:
        shown = ", ".join(repr(name) for name in variables[:_NAMES_SHOWN])
        more = (f" and {len(variables) - _NAMES_SHOWN} more"
                if len(variables) > _NAMES_SHOWN else "")
        noun = "variable" if len(variables) == 1 else "variables"
        parts.append(f"{noun} {shown}{more} {'holds' if len(variables) == 1 else 'hold'} "
                     "NaN or infinite values")
    elif other_saved:
        parts.append("a saved variable that is not trainable (an optimizer slot, a moving "
                     "average) holds NaN or infinite values")
    return "; ".join(parts)


def _value_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "+inf" if value > 0 else "-inf"


def non_finite_message(step: Optional[int], problem: str, newest_good: Optional[str], *,
                       rollbacks: int = 0, final: bool = False) -> str:
    """The one-line message of a NonFiniteError: where, what, the newest good checkpoint and
    what to do. ``rollbacks``: how many were made before giving up; ``final``: the check of
    the checkpoint a stop writes."""
    at = f"at step {step}" if step is not None else "now"
    after = ""
    if rollbacks:
        after = (f" again after {rollbacks} rollback{'s' if rollbacks != 1 else ''} to the "
                 "newest good checkpoint")
    which = "the final checkpoint" if final else "this checkpoint"
    from .checkpoints import exists  # pylint: disable=import-outside-toplevel  (imports TF)
    if newest_good and not exists(newest_good):  # deleted meanwhile: not named
        kept = "Nothing was saved for this step; the checkpoints written before are gone."
        todo = "Lower the learning rate (or clip the gradients) and start again."
    elif newest_good:
        kept = (f"Nothing was saved for this step and no checkpoint was removed: the newest "
                f"good checkpoint is {newest_good}.")
        todo = ("Lower the learning rate (or clip the gradients), then resume from that "
                "checkpoint: re-run the cell, or `%supervise resume`.")
    else:
        kept = "Nothing was saved for this step, and there is no checkpoint before it."
        todo = "Lower the learning rate (or clip the gradients) and start again."
    return (f"Training diverged {at}{after}: {problem}. {which.capitalize()} was not written "
            f"and the run stopped. {kept} {todo}")


def rollback_message(step: Optional[int], problem: str, path: str, restored_step, count: int,
                     limit: int) -> str:
    """The log line of one rollback."""
    at = f"at step {step}" if step is not None else "now"
    return (f"Training diverged {at}: {problem}. Rolled back to {path} (step {restored_step}), "
            f"rollback {count} of {limit}; nothing was saved for the diverged state.")
