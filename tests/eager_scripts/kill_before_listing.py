"""A training process for tests/test_eager.py: a custom loop under the eager backend that
checkpoints every SAVE_EVERY steps and holds the save of step PAUSE_AT after its files are
written and before the ``checkpoint`` state file lists them (printing ``PAUSED <path>``), so
that the test can SIGKILL it exactly there.

usage: python kill_before_listing.py LOGDIR KEEP PAUSE_AT
"""
import os
import sys
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from jupyter_supervisor.config import RunConfig  # noqa: E402
from jupyter_supervisor.eager import EagerSupervisor
from jupyter_supervisor.eager.writer import CheckpointWriter  # noqa: E402

SAVE_EVERY = 5


def hold_before_listing(pause_at):
    """Makes the writer hold the save of step ``pause_at`` between its files and the state
    file (``CheckpointWriter._record`` lists a written checkpoint)."""
    record = CheckpointWriter._record  # pylint: disable=protected-access

    def held(writer, path, *args):
        if path.endswith(f"-{pause_at}"):
            print("PAUSED", path, flush=True)
            threading.Event().wait()
        record(writer, path, *args)

    CheckpointWriter._record = held  # pylint: disable=protected-access


def main(logdir, keep, pause_at):
    hold_before_listing(pause_at)
    w = tf.Variable(0.0)
    sv = EagerSupervisor(RunConfig(logdir=logdir, keep=keep, save_model_secs=0,
                                   save_summaries_secs=0))
    with sv.session():
        sv.track(w=w)
        while not sv.should_stop():
            w.assign_add(1.0)
            if sv.step() % SAVE_EVERY == 0:
                sv.save_now()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
