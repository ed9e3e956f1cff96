"""The vocabulary shared by the run, its history, the panel and ``%supervise``: the run's
statuses, the kinds of alerts, the step-rate tag, the checkpoint-step pattern and which way a
metric improves. Decided here once; what the browser needs of it travels in the panel's state.
No TensorFlow, no widget.
"""
import re
from typing import Optional

# A run's statuses: the vocabulary of its state machine (``notebook/run.py``), which the
# history records and the panel and %supervise show as they are.
STARTING, RUNNING, STOPPING = "starting", "running", "stopping"
STOPPED, FINISHED, FAILED = "stopped", "finished", "failed"
STATUSES = (STARTING, RUNNING, STOPPING, STOPPED, FINISHED, FAILED)
ACTIVE_STATUSES = frozenset((STARTING, RUNNING, STOPPING))
FINAL_STATUSES = frozenset((STOPPED, FINISHED, FAILED))

# What a view may notify the user of (the panel state's "alerts", each with one of these
# kinds): a run that ended (finished, failed, stopped), one stopped by a model that is not
# finite, a stall raised and its end. "Kernel gone" only the view can tell (no heartbeat).
ALERT_NAN = "nan"
ALERT_STALLED, ALERT_STALL_ENDED = "stalled", "stall-ended"
ALERT_KINDS = (FINISHED, FAILED, STOPPED, ALERT_NAN, ALERT_STALLED, ALERT_STALL_ENDED)

# The tag of a step counter's records: TensorFlow's ``<global step op>/sec``; the eager
# backend's step counter writes ``STEP_RATE_TAG``. A rate has no "best" value.
RATE_SUFFIX = "/sec"
STEP_RATE_TAG = "global_step" + RATE_SUFFIX

# ``<prefix>-<step>``: how a checkpoint's path names its step (TensorFlow's Saver and
# CheckpointManager name them so).
CHECKPOINT_STEP = re.compile(r"-(\d+)$")


def is_rate(tag: str) -> bool:
    """True for a step counter's tag (``.../sec``)."""
    return tag.endswith(RATE_SUFFIX)


def checkpoint_step(path: str) -> Optional[int]:
    """The step in a ``<prefix>-<step>`` checkpoint path, or None for a step-less one."""
    match = CHECKPOINT_STEP.search(path)
    return int(match.group(1)) if match else None


# Which way a metric improves (``--keep-best-mode``, the panel's best values): Keras' modes.
MIN, MAX, AUTO = "min", "max", "auto"
MODES = (AUTO, MIN, MAX)
# Words that make a metric's name say it is best at its maximum, or its minimum, as Keras
# names its metrics (``val_`` is the validation's prefix).
_HIGHER = ("acc", "auc", "precision", "recall", "f1", "fbeta", "iou", "io_u", "r2", "score",
           "reward", "correlation", "cosine_similarity", "sensitivity", "specificity",
           "true_positives", "true_negatives")
_LOWER = ("loss", "error", "mse", "mae", "mape", "msle", "crossentropy", "hinge", "kld",
          "kl_divergence", "poisson", "logcosh", "perplexity", "false_positives",
          "false_negatives")


def direction_of(name: str) -> Optional[str]:
    """MAX or MIN when the metric's name says which way it improves (Keras' names: accuracy,
    auc, precision... are best at their maximum; a loss, an error, mse... at their
    minimum); None when it does not say."""
    lowered = name.lower()
    bare = lowered[4:] if lowered.startswith("val_") else lowered
    if bare == "loss" or any(word in bare for word in _LOWER):
        return MIN
    if any(word in bare for word in _HIGHER):
        return MAX
    return None
