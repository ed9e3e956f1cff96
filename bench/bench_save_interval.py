"""Saving at equal intervals: ours against Keras' callbacks and a hand-written
``tf.train.CheckpointManager`` loop, for models of a few sizes, each against bare training of
the same steps in the same run.

For each model size (weights + Adam's two slots, float32: ``--sizes`` in MB) and save interval
(``--intervals`` in seconds), the number of steps N that bare training does in one interval is
measured first; then every mode trains the same ``--saves`` x N steps (batch 32, a two-layer MLP
sized to the target), modes alternating, the order rotating each round:
  fit        model.fit bare (no callback)
  fit-ours   model.fit(callbacks=[sv.callback]) under an EagerSupervisor, save_model_secs=interval
  fit-keras  model.fit with BackupAndRestore(save_freq=N) + ModelCheckpoint(save_freq=N,
             weights only): what a Keras user sets for resume + keep; both write in the
             training thread
  loop       a tf.function step in a Python loop, bare
  loop-ours  the same loop under sv.track(model=..., optimizer=...) + sv.step(), same interval
  loop-mgr   the same loop with tf.train.CheckpointManager(...).save() every N steps
Printed per size x interval: each mode's median wall seconds, the ratio bare/mode (steps/s
against bare, 1.00 = free), the saves it made, and the training thread's time blocked per save:
(the mode's overhead - bare's) / saves, the median over rounds, where a run's overhead is its
seconds less its steps at its own median step time (``overhead``: robust to a load that
changes between runs, which the plain difference of seconds is not; it includes what a
background write takes from training by sharing the cores). "in its step": the time the steps
that saved took over the median step (the save call itself, on a machine quiet enough). Ours
also makes a final save when its session ends; it is counted (and its time is in ours' figure
but not in "in its step"). Each mode runs once untimed first (tracing; what the first cell of
a kernel pays is bench_cell_cost.py's).
Graph code: TF's own Supervisor against ours at 1 s and 10 s intervals:
bench/bench_training_cost.py.

The machine is shared (2 cores, other processes): wall-clock figures are noisy; read medians
and repeat. Nothing is asserted.

    .venv/bin/python bench/bench_save_interval.py                      # ~4 min: 1 and 50 MB, 1 s
    .venv/bin/python bench/bench_save_interval.py --sizes 1,50,150 --intervals 1,10 --rounds 3
"""
import argparse
import math
import os
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
from jupyter_supervisor.backend import RunConfig  # noqa: E402
from jupyter_supervisor.eager import EagerSupervisor  # noqa: E402

FEATURES = 256
BATCH = 32
MODES = ("fit", "fit-ours", "fit-keras", "loop", "loop-ours", "loop-mgr")


def width_for(megabytes: float) -> int:
    """Hidden units of the MLP whose weights and Adam slots (12 bytes a parameter) take
    ``megabytes``: W*W + (FEATURES + 3) * W + 1 parameters."""
    params = megabytes * 1e6 / 12
    b = FEATURES + 3
    return max(8, int((-b + math.sqrt(b * b + 4 * params)) / 2))


def build(width: int):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(width, "relu"),
                              keras.layers.Dense(width, "relu"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-4), "mse")
    return model


def dataset():
    rng = np.random.default_rng(0)
    x = rng.random((1024, FEATURES), dtype=np.float32)
    y = x.mean(axis=1, keepdims=True)
    return x, y, tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()


class Counter:
    """Listener: checkpoints written."""

    def __init__(self):
        self.saves = 0

    def __call__(self, record):
        if isinstance(record, events.CheckpointSaved):
            self.saves += 1


class BatchClock(keras.callbacks.Callback):
    """The time at the start of each batch of a fit."""

    def __init__(self, marks: list):
        super().__init__()
        self.marks = marks

    def on_train_batch_begin(self, batch, logs=None):
        self.marks.append(time.perf_counter())


def overhead(seconds: float, marks: list, steps: int) -> float:
    """Seconds of a run not spent stepping at its own median step time (``marks``: the time
    at each step's start): what saving and the session's start and end took from the training
    thread. Measured against the run's own pace, it holds up when the load changes between
    runs."""
    step = statistics.median(b - a for a, b in zip(marks, marks[1:]))
    return seconds - steps * step


def peak(marks: list, saves: int) -> float:
    """Seconds per save that the ``saves`` longest steps took over the median step (``marks``:
    the time at each step's start): the training thread's wait in the steps that saved, on a
    machine quiet enough that they are the longest."""
    intervals = sorted(b - a for a, b in zip(marks, marks[1:]))
    if saves <= 0:
        return 0.0
    median = statistics.median(intervals)
    return sum(i - median for i in intervals[-saves:]) / saves


class Bench:
    def __init__(self, megabytes: float):
        self.model = build(width_for(megabytes))
        self.megabytes = sum(int(np.prod(v.shape)) * 4 for v in self.model.variables) * 3 / 1e6
        self.x, self.y, self.data = dataset()
        # Traced before timing.
        self.model.fit(self.data, steps_per_epoch=2, epochs=1, verbose=0, shuffle=False)
        model, optimizer = self.model, self.model.optimizer
        self.iterator = iter(self.data)

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        self.train_step = train_step
        self.step_once()

    def step_once(self):
        return self.train_step(*next(self.iterator))

    def steps_per_second(self, seconds: float = 2.0) -> float:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            self.step_once()
            steps += 1
        self.step_once().numpy()
        return steps / (time.perf_counter() - start)

    def run(self, mode: str, steps: int, every: int, interval: float, logdir: str):
        """(wall seconds, saves, overhead seconds, in-step seconds per save) of ``steps``
        steps in ``mode``."""
        marks = []
        took, saves = self._run(mode, steps, every, interval, logdir, marks)
        marks.append(time.perf_counter())  # after the last step (ours: before its final save)
        inside = saves - 1 if mode.endswith("-ours") else saves  # ours' final: after the steps
        return took, saves, overhead(took, marks[:-1], steps), peak(marks, inside)

    def _run(self, mode, steps, every, interval, logdir, marks):
        model = self.model
        clock = [BatchClock(marks)]
        if mode.endswith("-ours"):
            sv = EagerSupervisor(RunConfig(logdir=logdir, save_model_secs=interval,
                                           save_summaries_secs=0))
            counter = Counter()
            sv.add_listener(counter)
            start = time.perf_counter()
            try:
                with sv.session():
                    if mode == "fit-ours":
                        model.fit(self.data, steps_per_epoch=steps, epochs=1, verbose=0,
                                  shuffle=False, callbacks=clock + [sv.callback])
                    else:
                        sv.track(model=model, optimizer=model.optimizer)
                        for _ in range(steps):
                            marks.append(time.perf_counter())
                            sv.step(loss=self.step_once())
            finally:
                sv.close()
            took = time.perf_counter() - start
            sv.flush_events(30)
            return took, counter.saves
        start = time.perf_counter()
        if mode == "fit":
            model.fit(self.data, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False,
                      callbacks=clock)
            return time.perf_counter() - start, 0
        if mode == "fit-keras":
            callbacks = [
                keras.callbacks.BackupAndRestore(os.path.join(logdir, "backup"),
                                                 save_freq=every),
                keras.callbacks.ModelCheckpoint(os.path.join(logdir, "m.weights.h5"),
                                                save_weights_only=True, save_freq=every)]
            model.fit(self.data, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False,
                      callbacks=clock + callbacks)
            return time.perf_counter() - start, steps // every
        manager = None
        if mode == "loop-mgr":
            manager = tf.train.CheckpointManager(
                tf.train.Checkpoint(model=model, optimizer=model.optimizer), logdir,
                max_to_keep=5)
        saves, loss = 0, None
        for step in range(1, steps + 1):
            marks.append(time.perf_counter())
            loss = self.step_once()
            if manager is not None and step % every == 0:
                manager.save(checkpoint_number=step)
                saves += 1
        loss.numpy()
        return time.perf_counter() - start, saves


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,50", help="model sizes in MB (e.g. 1,50,150)")
    parser.add_argument("--intervals", default="1", help="save intervals in s (e.g. 1,10)")
    parser.add_argument("--saves", type=int, default=4, help="intervals per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    modes = args.modes.split(",")
    print(f"TF {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}; medians of {args.rounds} rounds; wall clock, noisy")
    for size in (float(s) for s in args.sizes.split(",")):
        bench = Bench(size)
        rate = bench.steps_per_second()
        for interval in (float(i) for i in args.intervals.split(",")):
            every = max(1, round(rate * interval))
            steps = every * args.saves
            for mode in modes:  # warm-up, not timed: each mode's first tracing and calls
                logdir = tempfile.mkdtemp(prefix="bench_interval_")
                try:
                    bench.run(mode, min(steps, 2 * every), every, interval, logdir)
                finally:
                    shutil.rmtree(logdir, ignore_errors=True)
            seconds = {m: [] for m in modes}
            saves = {m: [] for m in modes}
            extra = {m: [] for m in modes}
            peaks = {m: [] for m in modes}
            for r in range(args.rounds):
                for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
                    logdir = tempfile.mkdtemp(prefix="bench_interval_")
                    try:
                        took, made, spent, step = bench.run(mode, steps, every, interval, logdir)
                    finally:
                        shutil.rmtree(logdir, ignore_errors=True)
                    seconds[mode].append(took)
                    saves[mode].append(made)
                    extra[mode].append(spent)
                    peaks[mode].append(step)
            print(f"\n{bench.megabytes:.1f} MB model, save every {interval:g} s = {every} steps "
                  f"(bare: {rate:.1f} steps/s), {steps} steps per run")
            print(f"  {'mode':10s} {'seconds':>8s} {'vs bare':>8s} {'saves':>6s} "
                  f"{'blocked/save':>13s} {'in its step':>13s}")
            for mode in modes:
                bare = "fit" if mode.startswith("fit") else "loop"
                med = statistics.median(seconds[mode])
                made = statistics.median(saves[mode])
                line = f"  {mode:10s} {med:8.2f}"
                if bare in seconds and mode != bare:
                    ratio = statistics.median(b / s for b, s in zip(seconds[bare],
                                                                    seconds[mode]))
                    blocked = statistics.median(
                        (s - b) / n for s, b, n in zip(extra[mode], extra[bare],
                                                       saves[mode]) if n)
                    line += (f" {ratio:8.2f} {made:6g} {blocked * 1000:10.0f} ms "
                             f"{statistics.median(peaks[mode]) * 1000:10.0f} ms")
                print(line)


if __name__ == "__main__":
    main()
