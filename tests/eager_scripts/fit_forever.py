"""A training process for tests/test_eager.py: fit under the eager backend, checkpointing often,
for more epochs than a test waits; the test kills it (SIGKILL) once a checkpoint exists.

usage: python fit_forever.py LOGDIR
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))

from eager_models import data, make_model  # noqa: E402  (beside the tests)

from jupyter_supervisor.config import RunConfig  # noqa: E402
from jupyter_supervisor.eager import EagerSupervisor  # noqa: E402


def main(logdir):
    x, y = data()
    model = make_model()
    sv = EagerSupervisor(RunConfig(logdir=logdir, save_model_secs=0.05,
                                   save_summaries_secs=1))
    with sv.session():
        model.fit(x, y, batch_size=8, epochs=100_000, shuffle=False, verbose=0,
                  callbacks=[sv.callback])


if __name__ == "__main__":
    main(sys.argv[1])
