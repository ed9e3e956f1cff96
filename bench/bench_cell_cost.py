"""The fixed cost of a supervised cell: a short ``model.fit`` under ``sv.callback`` against the
same fit bare, in one process, on the same model (as a notebook re-runs a cell), alternating.

Each round runs, in a rotating order:
  bare    model.fit(x, y, epochs=1, verbose=0)
  ours    the same fit in an EagerSupervisor session (fresh logdir, default intervals: the
          only checkpoint is the final one), then close(): what a %%supervise cell adds
  write   tf.train.Checkpoint(model=..., optimizer=...).write(path) of the same objects: the
          floor a final save is measured against
Printed: the median seconds of each, the median of the per-round differences ours - bare (the
fixed cost per cell; target <= 0.15 s at the 0.9 MB model) and, from the supervisor's own
Saved record, the median seconds of its final save against ``write`` (target <= 1.2 x).
The first round (tracing, first calls) is reported apart: "first" is what the first
supervised cell of a kernel pays. With ``--rebuild``, every mode gets a model built anew (not
timed), as a cell that builds its model and fits it: bare and ours then both pay Keras' trace
of the new model's train function. ``--save-model-secs`` sets ours' interval (default 60: the
only checkpoint is the final one; a small one makes periodic saves, whose write is traced once
per model structure). The machine is shared: read medians, and repeat.

    .venv/bin/python bench/bench_cell_cost.py [--rounds 9] [--width 256] [--profile]
    .venv/bin/python bench/bench_cell_cost.py --rebuild [--save-model-secs 0.05]
"""
import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

from jupyter_supervisor import events  # noqa: E402
from jupyter_supervisor.config import RunConfig  # noqa: E402
from jupyter_supervisor.eager import EagerSupervisor  # noqa: E402


def mlp(width, features=64):
    model = keras.Sequential([keras.Input((features,)), keras.layers.Dense(width, "relu"),
                              keras.layers.Dense(width, "relu"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    # Built now, as the supervisor builds it before fit to restore into it: an optimizer
    # built inside fit's first call makes Keras trace its train function twice, which would
    # count against bare.
    model.optimizer.build(model.trainable_variables)
    return model


def megabytes(model) -> float:
    variables = model.variables + model.optimizer.variables
    return sum(np.prod(v.shape) * 4 for v in variables) / 1e6


class SaveTimes:
    """Listener: the seconds of each CheckpointSaved record."""

    def __init__(self):
        self.seconds = []

    def __call__(self, record):
        if isinstance(record, events.CheckpointSaved):
            self.seconds.append(record.seconds)


def bare(model, x, y, logdir):
    start = time.perf_counter()
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    return time.perf_counter() - start, None


SAVE_MODEL_SECS = [60.0]  # ours' interval (--save-model-secs)


def ours(model, x, y, logdir):
    start = time.perf_counter()
    sv = EagerSupervisor(RunConfig(logdir=logdir, save_model_secs=SAVE_MODEL_SECS[0]))
    saves = SaveTimes()
    sv.add_listener(saves)
    try:
        with sv.session():
            model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[sv.callback])
    finally:
        sv.close()
    sv.flush_events(10)
    return time.perf_counter() - start, saves.seconds[-1] if saves.seconds else None


def write(model, x, y, logdir):
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    start = time.perf_counter()
    checkpoint.write(os.path.join(logdir, "plain"))
    return time.perf_counter() - start, None


MODES = {"bare": bare, "ours": ours, "write": write}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--width", type=int, default=256,
                        help="units of the hidden layers (256: 0.9 MB with Adam's slots)")
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--rebuild", action="store_true",
                        help="a model built anew for every cell (as a cell that builds it)")
    parser.add_argument("--save-model-secs", type=float, default=60.0,
                        help="ours' interval (60: only the final checkpoint)")
    parser.add_argument("--profile", action="store_true",
                        help="profile the supervised cells after the first; print the top")
    args = parser.parse_args()
    SAVE_MODEL_SECS[0] = args.save_model_secs

    model = mlp(args.width)
    rng = np.random.default_rng(0)
    x = rng.random((args.samples, 64), dtype=np.float32)
    y = x.sum(axis=1, keepdims=True)
    model.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0)  # traced before timing
    print(f"model: {megabytes(model):.2f} MB (weights + Adam), fit of {args.samples // 32} "
          f"batches; TF {tf.__version__}, Keras {keras.__version__}, load "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"{'a model built anew for each cell' if args.rebuild else 'the same model'}, ours "
          f"saving every {args.save_model_secs:g} s")

    first = {}
    for mode in ("bare", "ours", "write"):
        if args.rebuild:
            model = mlp(args.width)
        logdir = tempfile.mkdtemp(prefix="bench_cell_")
        first[mode] = MODES[mode](model, x, y, logdir)
        shutil.rmtree(logdir, ignore_errors=True)
    print(f"first cell of the process: bare {first['bare'][0]:.3f} s, ours "
          f"{first['ours'][0]:.3f} s (+{first['ours'][0] - first['bare'][0]:.3f}), final save "
          f"{first['ours'][1] or 0:.3f} s; plain write {first['write'][0]:.3f} s")

    profiler = cProfile.Profile() if args.profile else None
    seconds = {m: [] for m in MODES}
    final = []
    names = list(MODES)
    for r in range(args.rounds):
        for mode in names[r % 3:] + names[:r % 3]:
            if args.rebuild:
                model = mlp(args.width)
            logdir = tempfile.mkdtemp(prefix="bench_cell_")
            try:
                if profiler is not None and mode == "ours":
                    profiler.enable()
                took, saved = MODES[mode](model, x, y, logdir)
                if profiler is not None and mode == "ours":
                    profiler.disable()
            finally:
                shutil.rmtree(logdir, ignore_errors=True)
            seconds[mode].append(took)
            if saved is not None:
                final.append(saved)
    med = {m: statistics.median(s) for m, s in seconds.items()}
    extra = statistics.median(o - b for o, b in zip(seconds["ours"], seconds["bare"]))
    print(f"median of {args.rounds} rounds: bare {med['bare']:.3f} s, ours {med['ours']:.3f} s; "
          f"fixed cost per cell ours - bare: {extra:+.3f} s (target <= +0.150)")
    if final:
        ratio = statistics.median(final) / med["write"]
        print(f"final save {statistics.median(final):.3f} s (CheckpointSaved: snapshot to "
              f"files) vs tf.train.Checkpoint.write {med['write']:.3f} s: {ratio:.2f} x "
              "(target <= 1.20)")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
