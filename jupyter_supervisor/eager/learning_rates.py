"""Which learning rate a resumed run trains with: the one it had reached, or one the code changed.

A checkpoint holds every optimizer variable, the learning rate included (a Keras optimizer
given a number keeps it in a variable, which ``ReduceLROnPlateau`` or an assignment changes
during training). A fresh kernel's optimizer holds the rate its code sets. Restoring the
checkpoint's rate continues the run; keeping the code's honours a rate the user changed between
runs (a lower one after a divergence, the usual fix). The two are told apart by the rate the
code set when the checkpoint's session started, saved beside it (``coded``):

* the rate now (the code's) equals the checkpoint's: nothing to decide (a resume in the same
  kernel), and the saved code's rate is carried on;
* the code's rate now equals the saved one: the code did not change, so the checkpoint's rate,
  the one training reached, is restored;
* it differs: the code changed (or a cell assigned a rate before the re-run): the code's wins;
* the checkpoint does not record the code's rate (it was written before that was saved): the
  code's wins, as it always did.

A learning rate that is a schedule is computed from the restored ``iterations``: there is
nothing to decide. (A change between a number and a schedule is refused by the restore:
``restore.restore``.) What was decided is said once, in the run's output, when the rates differ.
"""
import logging
from typing import Dict, List, Optional

import numpy as np

from .variables import is_variable

logger = logging.getLogger("jupyter_supervisor")


def _rates(objects: Dict[str, object]) -> Dict[str, object]:
    """{name: learning-rate variable} of the tracked optimizers whose rate is a number (Keras'
    ``learning_rate`` is then the variable itself; a mixed-precision LossScaleOptimizer's is
    its inner optimizer's)."""
    found = {}
    for name, obj in objects.items():
        rate = getattr(obj, "learning_rate", None) if hasattr(obj, "apply_gradients") else None
        if rate is not None and is_variable(rate):
            found[name] = rate
    return found


def _value(variable) -> float:
    return float(np.asarray(variable.numpy()))


class LearningRates:
    """The learning rates of one session's tracked optimizers: ``capture`` before a restore
    (the code's), ``settle`` after it; ``coded`` is what every checkpoint of the session saves
    beside the rates themselves: {optimizer's name: the rate its code set}."""

    def __init__(self, objects: Dict[str, object]):
        self._variables = _rates(objects)
        self._now: Dict[str, float] = {}
        self.coded: Dict[str, float] = {}

    def capture(self) -> None:
        """Before a restore: the rates the optimizers hold now (the code's)."""
        self._now = {name: _value(v) for name, v in self._variables.items()}
        self.coded = dict(self._now)

    def settle(self, path: str, saved: Optional[Dict[str, float]]) -> None:
        """After the restore of ``path``, whose run's code set the rates ``saved`` (None: the
        checkpoint does not record them): the rate each optimizer trains with (see the module
        docstring)."""
        notes: List[str] = []
        for name, variable in self._variables.items():
            now, restored = self._now[name], _value(variable)
            before = (saved or {}).get(name)
            if restored == now:
                if before is not None:
                    self.coded[name] = before
                continue
            if before == now:
                self.coded[name] = before
                notes.append(
                    f"The learning rate of {name!r} is {restored:g}, restored from the "
                    f"checkpoint: training had changed it from the {now:g} the code sets (a "
                    "callback such as ReduceLROnPlateau, or an assignment). To train at "
                    "another rate, change it in the code.")
                continue
            variable.assign(now)
            if before is None:
                notes.append(
                    f"The learning rate of {name!r} is {now:g}, the code's: the checkpoint "
                    f"holds {restored:g} but not the rate its code set (it was written before "
                    "that was saved), so a rate changed in the code cannot be told from one "
                    "training reached.")
            else:
                notes.append(
                    f"The learning rate of {name!r} is {now:g}, the code's: the checkpoint's "
                    f"run had reached {restored:g} from the {before:g} its code set, and the "
                    "code (or an assignment) changed it since.")
        for note in notes:
            logger.warning("%s (%s)", note, path)

    def keep(self, path: str) -> None:
        """After a rollback to ``path`` (a checkpoint of this session): the rates captured
        before it are kept, the newest decision of the code or of training (a rate lowered
        since that checkpoint stays low)."""
        for name, variable in self._variables.items():
            now, restored = self._now[name], _value(variable)
            if restored != now:
                variable.assign(now)
                logger.warning("The checkpoint %s holds the learning rate %g for %r; the run "
                               "keeps %g, the rate it had.", path, restored, name, now)
