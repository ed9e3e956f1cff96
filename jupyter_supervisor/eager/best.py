"""The best checkpoint of an eager run (``--keep-best METRIC``): which values of METRIC are
better, the best one so far, and what every checkpoint records of it (plain JSON, in the run's
state: a resume knows its best). A rollback keeps the best on disk: a best refused as not
finite was never written (``forget``).

Values come three ways (``Checkpointer`` acts on them): a fit's epoch end (weighed at the
boundary after every callback's ``on_epoch_end``, so the checkpoint holds what they decided
there) and ``sv.report`` measure the model as it is at that step boundary, so a better value
there makes a checkpoint at once (``offer``); a loop's ``sv.step`` scalars are noted
(``note``) and weighed at each checkpoint the loop writes anyway (``at_save``): a training
scalar changes at every step, and a checkpoint at each of its improvements would be a
checkpoint at nearly every step. The newest decision (``decided``) is what a checkpoint
written now records; ``best`` is the newest one whose checkpoint is complete on disk (what
retention keeps, the panel shows, ``restore_best`` restores).
"""
import difflib
import logging
import math
from typing import Mapping, NamedTuple, Optional

from ..events import describe_best
from ..names import MAX, MIN, checkpoint_step
from .reporting import to_float

logger = logging.getLogger("jupyter_supervisor")


class Best(NamedTuple):
    """The checkpoint of ``step`` holds the best ``value`` of ``metric`` (``mode``: MIN or MAX)
    so far; ``epoch``: the fit epoch (0-based) whose end it is, or None."""
    metric: str
    mode: str
    value: float
    step: int
    epoch: Optional[int] = None

    def text(self) -> str:
        """'val_loss 0.2311 (min) at step 300, the end of epoch 3'."""
        return describe_best(*self)

    def among(self, paths) -> bool:
        """True when its checkpoint is one of ``paths`` (a logdir's checkpoints)."""
        return any(checkpoint_step(path) == self.step for path in paths)

    def as_json(self) -> dict:
        """Plain JSON (``from_json`` reads it back)."""
        return self._asdict()

    @classmethod
    def from_json(cls, data) -> Optional["Best"]:
        """The Best of ``as_json``'s output; None for anything else (nothing recorded)."""
        if not isinstance(data, dict):
            return None
        try:
            best = cls(str(data["metric"]), str(data["mode"]), float(data["value"]),
                       int(data["step"]), None if data.get("epoch") is None
                       else int(data["epoch"]))
        except (KeyError, TypeError, ValueError):
            return None
        return best if best.mode in (MIN, MAX) else None


class BestKeeper:
    """The best value of ``metric`` (better: lower with MIN, higher with MAX) and its
    checkpoint, for one session. Training thread only, but for ``kept`` (the writer
    thread: the checkpoint of a decision is on disk)."""

    def __init__(self, metric: str, mode: str):
        if mode not in (MIN, MAX):
            raise ValueError(f"mode: {mode!r} is not {MIN!r} or {MAX!r}")
        self.metric = metric
        self.mode = mode
        self.decided: Optional[Best] = None   # recorded by the checkpoints written from now
        self.best: Optional[Best] = None      # its checkpoint is complete on disk
        self.seen = False                     # a value of the metric came in this session
        self.offered: set = set()             # the names of every value that came
        self._noted: Optional[tuple] = None   # (step, value) of the newest sv.step value
        self._missing_said = False            # its absence from the first metrics is said

    def end_note(self) -> Optional[str]:
        """At the session's end: why no checkpoint was kept as the best, when values came but
        none of the metric; else None."""
        if not self.offered or self.seen:
            return None
        return (f"--keep-best {self.metric}: no value of {self.metric} came in this session "
                f"(the metrics were: {', '.join(sorted(self.offered))}), so no checkpoint was "
                "kept as its best. It comes from fit's epoch-end logs (validation_data gives "
                "val_loss...), from sv.report(...) in a loop, or from sv.step(...)'s scalars.")

    def better(self, value: float) -> bool:
        """True when ``value`` beats the decided best (a NaN or an infinity never does)."""
        if not math.isfinite(value):
            return False
        if self.decided is None:
            return True
        return value < self.decided.value if self.mode == MIN else value > self.decided.value

    def offer(self, values: Mapping[str, object], step: int,
              epoch: Optional[int] = None) -> Optional[Best]:
        """The Best that the state at ``step`` would be, when ``values`` (measured on it: a
        fit's epoch-end logs, ``sv.report``) hold a better value of the metric; else None."""
        value = self._value(values)
        if value is None or not self.better(value):
            return None
        return Best(self.metric, self.mode, value, step, epoch)

    def note(self, values: Mapping[str, object], step: int) -> None:
        """A loop's step scalars: the metric's newest value, weighed at the next checkpoint
        (``at_save``). Kept as given (a tensor is converted only then)."""
        self.offered.update(values)
        if self.metric in values:
            self.seen = True
            self._noted = (step, values[self.metric])

    def at_save(self, step: int) -> Optional[Best]:
        """The Best that the checkpoint of ``step`` is, when the newest step value of the
        metric (``note``) was reported at that step and beats the decided best; else None."""
        if self._noted is None or self._noted[0] != step:
            return None
        value = to_float(self._noted[1])
        if value is None or not self.better(value):
            return None
        return Best(self.metric, self.mode, value, step)

    def decide(self, best: Best) -> None:
        """A checkpoint of ``best`` is being written: the checkpoints from now record it."""
        self.decided = best

    def kept(self, best: Best) -> None:
        """The checkpoint of ``best`` is complete on disk."""
        self.best = best

    def forget(self, best: Optional[Best]) -> None:
        """The decision in flight did not make it to disk (a save refused as not finite): the
        best is ``best`` again (the newest one complete on disk)."""
        self.decided = self.best = best

    def state(self) -> Optional[dict]:
        """What a checkpoint written now records of the best (plain JSON)."""
        return None if self.decided is None else self.decided.as_json()

    def restored(self, state, existing) -> Optional[str]:
        """Takes the best that a restored checkpoint recorded (``state``) when it is of this
        metric and mode and its checkpoint is among ``existing`` (paths); returns why it was
        not taken, or None."""
        best = Best.from_json(state)
        self.decided = self.best = None
        if best is None:
            return None
        if not best.among(existing):
            return (f"The best checkpoint recorded ({best.text()}) is no longer in the logdir; "
                    f"the best {self.metric} is kept anew from this session's values.")
        if (best.metric, best.mode) != (self.metric, self.mode):
            return (f"The checkpoints of this logdir kept the best {best.metric} ({best.mode}); "
                    f"this run keeps the best {self.metric} ({self.mode}) from now on, and "
                    f"retention no longer keeps the checkpoint of step {best.step} for it.")
        self.decided = self.best = best
        return None

    def _value(self, values: Mapping[str, object]) -> Optional[float]:
        self.offered.update(values)
        if self.metric not in values:
            self._say_missing(values)
            return None
        self.seen = True
        return to_float(values[self.metric])

    def _say_missing(self, values: Mapping[str, object]) -> None:
        """Once, at the first metrics measured on a state (a fit's first epoch end, the first
        ``sv.report``) that lack the metric: which came, and the closest name. A loop's step
        scalars are not such metrics (its metric may come by ``report`` later): a metric that
        never came is said at the session's end (``offered``, ``seen``)."""
        if self._missing_said or self.seen or not values:
            return
        self._missing_said = True
        names = sorted(values)
        close = difflib.get_close_matches(self.metric, names, n=1, cutoff=0.6)
        logger.warning(
            "--keep-best %s: the metrics that came (%s) have no %s%s; no checkpoint is kept as "
            "its best until a value of %s comes.", self.metric, ", ".join(names), self.metric,
            f": did you mean {close[0]}?" if close else "", self.metric)
