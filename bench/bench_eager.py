"""The eager backend's cost: training speed under it against bare eager code and Keras' own
callbacks, and how long a checkpoint blocks the training thread (asynchronous vs synchronous).

1. loop   a tf.function + GradientTape step on a small MLP, for ``--seconds`` per run:
            bare   the loop alone
            ours   sv.track(...) + sv.step(loss=loss), at RunConfig's default intervals
                   (checkpoints 60 s, summaries 10 s) and at 1 s intervals
2. fit    model.fit on the same MLP for ``--epochs``:
            bare   fit(verbose=0)
            ours   callbacks=[sv.callback] (default intervals)
            keras  BackupAndRestore + ModelCheckpoint + TensorBoard (each per epoch)
            batchcb  a callback with an empty on_train_batch_end: what Keras itself costs for
                   any batch-level callback (it converts the logs to floats after each batch)
0. step   microseconds one sv.step(loss=tensor) costs, without training (what the loop adds
          per step between checkpoints: the figure that noise on a shared machine cannot hide)
3. save   seconds the training thread is blocked by one checkpoint of a ~100 MB model
          (weights only, ``--big`` units square), asynchronous (the copy) vs synchronous (the
          whole write), and the asynchronous write's own time.

Modes alternate in one process, the order rotating each round; printed are the medians and the
ratios against bare (median of per-round ratios), per second of wall time and per second of
this process's CPU time (all its threads: on a shared machine the wall-time figures mostly
measure the neighbours). Target: ours >= 0.98 of bare at the default intervals. Figures only;
nothing is asserted.

    .venv/bin/python bench/bench_eager.py [--rounds 3] [--seconds 3] [--epochs 3] [--big 5000]
"""
import argparse
import os
import platform
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

from jupyter_supervisor.config import RunConfig  # noqa: E402
from jupyter_supervisor.eager import EagerSupervisor  # noqa: E402


def mlp(width=256, features=64):
    model = keras.Sequential([keras.Input((features,)), keras.layers.Dense(width, "relu"),
                              keras.layers.Dense(width, "relu"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    return model


def data(n=4096, features=64):
    rng = np.random.default_rng(0)
    x = rng.random((n, features), dtype=np.float32)
    return x, x.sum(axis=1, keepdims=True)


def loop_run(mode, seconds, logdir):
    model = mlp()
    opt = model.optimizer
    x, y = data(256)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        return loss

    train_step()  # traced before timing
    if mode == "bare":
        steps, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            train_step()
            steps += 1
        return rates(steps, start, cpu)
    intervals = {} if mode == "ours" else {"save_model_secs": 1, "save_summaries_secs": 1}
    sv = EagerSupervisor(RunConfig(logdir=logdir, **intervals))
    try:
        with sv.session():
            sv.track(model=model, optimizer=opt)
            start, cpu = time.perf_counter(), time.process_time()
            first = sv.read_step()
            while not sv.should_stop():
                sv.step(loss=train_step())
                if time.perf_counter() - start >= seconds:
                    sv.request_stop()
            return rates(sv.read_step() - first, start, cpu)
    finally:
        sv.close()


def fit_run(mode, epochs, logdir):
    model = mlp()
    x, y = data()
    model.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0)  # traced before timing
    steps = epochs * (len(x) // 32)
    callbacks, sv = [], None
    if mode == "ours":
        sv = EagerSupervisor(RunConfig(logdir=logdir))
        callbacks = [sv.callback]
    elif mode == "batchcb":
        callbacks = [type("Empty", (keras.callbacks.Callback,),
                          {"on_train_batch_end": lambda self, batch, logs=None: None})()]
    elif mode == "keras":
        callbacks = [keras.callbacks.BackupAndRestore(os.path.join(logdir, "backup")),
                     keras.callbacks.ModelCheckpoint(os.path.join(logdir, "m.weights.h5"),
                                                     save_weights_only=True),
                     keras.callbacks.TensorBoard(os.path.join(logdir, "tb"))]
    start, cpu = time.perf_counter(), time.process_time()
    if sv is None:
        model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, callbacks=callbacks)
    else:
        try:
            with sv.session():
                model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, callbacks=callbacks)
        finally:
            sv.close()
    return rates(steps, start, cpu)


def rates(steps, start, cpu):
    """(steps per wall second, steps per CPU second of this process) since start, cpu."""
    return (steps / (time.perf_counter() - start), steps / (time.process_time() - cpu))


def compare(name, modes, run, rounds):
    figures = {m: [] for m in modes}
    for r in range(rounds):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        for mode in order:
            logdir = tempfile.mkdtemp(prefix=f"bench_eager_{name}_{mode}_")
            try:
                figures[mode].append(run(mode, logdir))
            finally:
                shutil.rmtree(logdir, ignore_errors=True)
        print(f"  {name} round {r + 1}: " + ", ".join(
            f"{m} {figures[m][-1][0]:.1f}/s wall {figures[m][-1][1]:.1f}/s cpu" for m in modes),
            flush=True)
    for i, clock in enumerate(("wall", "cpu")):
        print(f"{name}: steps per {clock} second (median) " + ", ".join(
            f"{m} {statistics.median(v[i] for v in figures[m]):.1f}" for m in modes))
        for mode in modes[1:]:
            ratio = statistics.median(o[i] / b[i] for o, b in zip(figures[mode],
                                                                 figures["bare"]))
            print(f"{name}: {mode} / bare = {ratio:.3f} ({clock})")


def step_cost(steps=20000):
    logdir = tempfile.mkdtemp(prefix="bench_eager_step_")
    sv = EagerSupervisor(RunConfig(logdir=logdir))
    loss = tf.constant(1.0)
    try:
        with sv.session():
            sv.track(w=tf.Variable(1.0))
            start = time.perf_counter()
            for _ in range(steps):
                sv.step(loss=loss)
            print(f"step: sv.step(loss=...) costs {(time.perf_counter() - start) / steps * 1e6:.1f}"
                  " us", flush=True)
    finally:
        sv.close()
        shutil.rmtree(logdir, ignore_errors=True)


def save_blocking(units, repeats):
    """Seconds the training thread waits for one checkpoint of a units x units model."""
    out = {}
    for async_save in (True, False):
        logdir = tempfile.mkdtemp(prefix="bench_eager_save_")
        model = keras.Sequential([keras.Input((units,)), keras.layers.Dense(units)])
        sv = EagerSupervisor(RunConfig(logdir=logdir, save_model_secs=3600, keep=1),
                             async_save=async_save)
        blocked, total = [], []
        try:
            with sv.session():
                sv.track(model=model)
                for _ in range(repeats + 1):
                    sv.step()
                    start = time.perf_counter()
                    sv._checkpointer._save()  # pylint: disable=protected-access  (the boundary's save)
                    blocked.append(time.perf_counter() - start)
                    sv._checkpointer.writer.wait()  # pylint: disable=protected-access
                    total.append(time.perf_counter() - start)
        finally:
            sv.close()
            shutil.rmtree(logdir, ignore_errors=True)
        # The first save makes the host copies: reported apart.
        out[async_save] = (blocked[0], statistics.median(blocked[1:]),
                           statistics.median(total[1:]))
    mb = units * (units + 1) * 4 / 1e6
    for async_save, (first, blocked, total) in out.items():
        kind = "async" if async_save else "sync "
        print(f"save {mb:.0f} MB {kind}: training thread blocked {blocked * 1000:.0f} ms "
              f"(first save {first * 1000:.0f} ms), write done after {total * 1000:.0f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--big", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}, Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    step_cost()
    compare("loop", ["bare", "ours", "ours_1s"],
            lambda mode, logdir: loop_run(mode, args.seconds, logdir), args.rounds)
    compare("fit", ["bare", "ours", "keras", "batchcb"],
            lambda mode, logdir: fit_run(mode, args.epochs, logdir), args.rounds)
    save_blocking(args.big, args.repeats)


if __name__ == "__main__":
    main()
