"""Training steps per second under our Supervisor, against a bare session loop and TF's Supervisor.

The same small graph (a few matmuls, a scalar summary, assign_add on the global step) runs under
  bare  a plain tf.compat.v1.Session loop: no services
  ours  jupyter_supervisor.Supervisor, summaries / checkpoints / step counter every 1 s
  tf    tf.compat.v1.train.Supervisor with the same settings
alternated in one process (the order rotates each round, so that none always runs first), each
with a fresh graph and logdir. Printed: per-round figures, the median steps/sec of each, and the
ratios against bare (median of the per-round ratios, each against the bare run of its own
round). Target: ours >= 0.98 of bare. Figures only; nothing is asserted.

    .venv/bin/python bench/bench_supervisor.py [--rounds 5] [--seconds 3] [--size 64]
"""
import argparse
import logging
import os
import platform
import shutil
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from jupyter_supervisor import Supervisor  # noqa: E402

v1 = tf.compat.v1
MODES = ("bare", "ours", "tf")
INTERVAL_SECS = 1


def build_graph(size):
    """A new graph: three chained matmuls feeding a loss, its summary, and a step increment."""
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("w", initializer=v1.random_normal_initializer(stddev=0.1),
                            shape=[size, size])
        x = tf.ones([size, size])
        h = tf.matmul(tf.matmul(tf.matmul(x, w), w), w)
        loss = tf.reduce_mean(tf.square(h))
        v1.summary.scalar("loss", loss)
        with tf.control_dependencies([loss]):
            train_op = v1.assign_add(step, 1)
    return graph, train_op


def steps_per_sec(sess, train_op, seconds):
    """Runs ``train_op`` for ``seconds``; returns the measured steps per second."""
    sess.run(train_op)  # the first run pays for graph setup in the runtime
    steps = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        sess.run(train_op)
        steps += 1
    return steps / (time.perf_counter() - start)


def run_bare(size, seconds, logdir):
    del logdir
    graph, train_op = build_graph(size)
    with graph.as_default():
        init = v1.global_variables_initializer()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        return steps_per_sec(sess, train_op, seconds)


def run_supervised(make, size, seconds, logdir):
    graph, train_op = build_graph(size)
    with graph.as_default():
        sv = make(graph=graph, logdir=logdir, save_summaries_secs=INTERVAL_SECS,
                  save_model_secs=INTERVAL_SECS)
        with sv.managed_session() as sess:
            return steps_per_sec(sess, train_op, seconds)


RUNNERS = {
    "bare": run_bare,
    "ours": lambda *a: run_supervised(Supervisor, *a),
    "tf": lambda *a: run_supervised(v1.train.Supervisor, *a),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time of each run")
    parser.add_argument("--size", type=int, default=64, help="matrix size of the matmuls")
    args = parser.parse_args()

    v1.disable_eager_execution()
    tf.get_logger().setLevel(logging.ERROR)
    logging.getLogger("jupyter_supervisor").setLevel(logging.ERROR)
    root = tempfile.mkdtemp(prefix="bench_supervisor-")
    print(f"TensorFlow {tf.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; {args.rounds} rounds x {args.seconds:g} s per mode, "
          f"{args.size}x{args.size} matmuls, services every {INTERVAL_SECS} s; "
          f"load average {os.getloadavg()[0]:.2f}")
    try:
        for mode in MODES:  # warm-up: imports, kernels, thread pools
            RUNNERS[mode](args.size, 0.3, os.path.join(root, f"warmup-{mode}"))
        rates = {mode: [] for mode in MODES}
        for rnd in range(args.rounds):
            order = MODES[rnd % len(MODES):] + MODES[:rnd % len(MODES)]
            for mode in order:
                logdir = os.path.join(root, f"{mode}-{rnd}")
                rates[mode].append(RUNNERS[mode](args.size, args.seconds, logdir))
                shutil.rmtree(logdir, ignore_errors=True)
            print(f"round {rnd + 1}: " + "  ".join(
                f"{mode} {rates[mode][-1]:8.0f}/s" for mode in MODES))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print()
    print(f"{'mode':6} {'median steps/s':>15} {'vs bare (median of rounds)':>28} "
          f"{'min..max of rounds':>20}")
    for mode in MODES:
        ratios = [r / b for r, b in zip(rates[mode], rates["bare"])]
        print(f"{mode:6} {statistics.median(rates[mode]):15.0f} "
              f"{statistics.median(ratios):28.3f} "
              f"{min(ratios):9.3f}..{max(ratios):.3f}")
    ours = statistics.median(r / b for r, b in zip(rates["ours"], rates["bare"]))
    tf_ratio = statistics.median(r / b for r, b in zip(rates["tf"], rates["bare"]))
    print(f"\nours / bare = {ours:.3f} (target >= 0.98); ours / tf = {ours / tf_ratio:.3f}; "
          f"load average now {os.getloadavg()[0]:.2f} (other processes skew the figures)")


if __name__ == "__main__":
    main()
