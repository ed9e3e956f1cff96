"""A training process for tests/test_keep_best.py: a Keras fit under --keep 1 --keep-best
val_loss (eager_models.overfitting: each of its first three epochs is a new best) that holds the
save of the new best of step PAUSE_AT after its files are written and before the ``checkpoint``
state file lists them (printing ``PAUSED <path>``), so that the test can SIGKILL it exactly
there.

usage: python kill_writing_best.py LOGDIR PAUSE_AT
"""
import os
import sys
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from eager_models import overfitting  # noqa: E402
from jupyter_supervisor.config import RunConfig  # noqa: E402
from jupyter_supervisor.eager import EagerSupervisor  # noqa: E402
from jupyter_supervisor.eager.writer import CheckpointWriter  # noqa: E402


def hold_before_listing(pause_at):
    """Makes the writer hold the save of the best of step ``pause_at`` between its files and
    the state file (``CheckpointWriter._record`` lists a written checkpoint)."""
    record = CheckpointWriter._record  # pylint: disable=protected-access

    def held(writer, path, best=False):
        if best and path.endswith(f"-{pause_at}"):
            print("PAUSED", path, flush=True)
            threading.Event().wait()
        record(writer, path, best)

    CheckpointWriter._record = held  # pylint: disable=protected-access


def main(logdir, pause_at):
    hold_before_listing(pause_at)
    model, arguments = overfitting()
    sv = EagerSupervisor(RunConfig(logdir=logdir, keep=1, keep_best="val_loss",
                                   save_model_secs=0, save_summaries_secs=0))
    with sv.session():
        model.fit(**arguments, epochs=6, verbose=0, callbacks=[sv.callback])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
