"""What the finiteness check costs a checkpoint, at 100 MB of variables (issue 15).

Graph mode: one graph of float32 variables (``--mb`` megabytes in ``--variables`` variables)
and two Savers over them, writing to the same file system, alternated each round (the order
rotates):
  plain    tf.compat.v1.train.Saver().save, what TensorFlow's Supervisor does
  guarded  the same Saver after finite.guard_saver, what the Supervisor does: the check runs in
           the save's own session run, over the tensors it writes, before the write
plus the check alone (``VariableCheck.run``: one fused op, one session run).

Eager mode: a whole save (``saving.CheckpointWriter``: the check, the snapshot of the variables,
the files), the check alone (``finite.VariableCheck.eager``, one tf.function call) and the
snapshot alone (``saving.Snapshot.copy``: what the training thread waits for without a check;
TensorFlow shares the buffers until the next update, so it is cheap).

Both modes run twice: every saved byte a weight (plain SGD, no optimizer state: the worst case,
the check reads the whole checkpoint), and each weight saved with two slots of its size (Adam's
moments: the check reads a third of the checkpoint, since it covers the trainable variables).

Printed: per-round figures, the medians and the fastest of the rounds; the check's cost as a
share of a save: (guarded - plain) / plain for graph mode, check / whole save for eager mode.
Target: under 2 %. A save's time swings by a factor of 3 to 5 from round to round (page cache,
file deletions), so the fastest round, the save's own cost, is the figure that reproduces; the
medians are printed beside it. Also printed: the memory bandwidth the check runs at (it reads
every byte once; nothing exact can read less). Files go to a temp dir (``--dir /dev/shm``:
memory, no disk: the worst case for the share). Figures only.

    .venv/bin/python bench/bench_finite.py [--rounds 15] [--dir /dev/shm] [--mb 100] [--variables 25]
"""
import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from jupyter_supervisor import finite  # noqa: E402
from jupyter_supervisor.eager import saving  # noqa: E402

v1 = tf.compat.v1
SAVERS = ("plain", "guarded")


def build(mb, count, slots):
    """``count`` weights (trainable) and ``slots`` optimizer-like slots per weight (not
    trainable, saved, not checked), ``mb`` megabytes saved in all."""
    graph = tf.Graph()
    with graph.as_default():
        rows = max(1, int(mb * 2**20 / 4 / count / (1 + slots) / 1000))
        init = v1.random_normal_initializer(stddev=0.1)
        weights = [v1.get_variable(f"layer{i}/kernel", shape=[rows, 1000], initializer=init)
                   for i in range(count)]
        extra = [v1.get_variable(f"layer{i}/kernel/slot{j}", shape=[rows, 1000],
                                 initializer=init, trainable=False)
                 for i in range(count) for j in range(slots)]
        names = [v.op.name for v in weights]
        savers = {}
        for name in SAVERS:
            savers[name] = v1.train.Saver(weights + extra, max_to_keep=2)
            if name == "guarded":
                assert finite.guard_saver(savers[name], graph, names) == set(names)
        check = finite.VariableCheck.in_graph(weights, graph)
        init = v1.global_variables_initializer()
    size = rows * 1000 * 4 * count * (1 + slots) / 2**20
    return graph, savers, check, init, size


def timed(fn, repeat=1):
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def summarize(label, figures):
    """Prints and returns the medians and the fastest of each figure's rounds."""
    med = {name: statistics.median(values) for name, values in figures.items()}
    low = {name: min(values) for name, values in figures.items()}
    for kind, fig in (("medians", med), ("fastest", low)):
        print(f"{label}, {kind}: " + ", ".join(f"{n} {v * 1000:.1f} ms" for n, v in fig.items()))
    return med, low


def rotated(names, round_):
    return names[round_ % len(names):] + names[:round_ % len(names)]


def graph_mode(args, where, slots):
    graph, savers, check, init, size = build(args.mb, args.variables, slots)
    print(f"\ngraph mode: {size:.0f} MB saved, {args.variables} float32 weights"
          + (f" and {slots} slots per weight (as Adam's two moments), only the weights checked"
             if slots else ", all checked (no optimizer slots: the worst case)"))
    figures = {name: [] for name in SAVERS + ("check",)}
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        step = 0
        for name, saver in savers.items():  # warm up: executors and the file cache
            saver.save(sess, os.path.join(where, name), global_step=step)
        assert check.run(sess) == []
        for round_ in range(args.rounds):
            for name in rotated(list(figures), round_):
                step += 1
                if name == "check":
                    seconds = timed(lambda: check.run(sess), repeat=5)
                else:
                    prefix = os.path.join(where, name)
                    seconds = timed(lambda: savers[name].save(  # pylint: disable=cell-var-from-loop
                        sess, prefix, global_step=step, write_meta_graph=False))
                figures[name].append(seconds)
            print(f"round {round_ + 1}: " + ", ".join(
                f"{name} {figures[name][-1] * 1000:.1f} ms" for name in figures))
    med, low = summarize("graph mode", figures)
    for label, fig in (("fastest", low), ("median", med)):
        print(f"  [{label}] the Supervisor's save (guarded) vs TensorFlow's (plain): "
              f"{(fig['guarded'] - fig['plain']) / fig['plain'] * 100:+.1f} % (target < 2 %)")
    print(f"  the check alone: {med['check'] * 1000:.1f} ms, {med['check'] / low['plain'] * 100:.1f}"
          f" % of the fastest plain save; it reads {size / (1 + slots):.0f} MB at "
          f"{size / (1 + slots) / 1024 / med['check']:.0f} GB/s")


def eager_mode(args, where, slots):
    rows = int(args.mb * 2**20 / 4 / args.variables / (1 + slots) / 1000)
    variables = [tf.Variable(tf.random.normal([rows, 1000]), name=f"layer{i}")
                 for i in range(args.variables)]
    module = tf.Module()
    module.layers = variables
    module.slots = [tf.Variable(tf.zeros([rows, 1000]), trainable=False)
                    for _ in range(args.variables * slots)]
    print(f"\neager mode: {rows * 4000 * args.variables * (1 + slots) / 2**20:.0f} MB saved, "
          f"{slots} slots per weight")
    check = finite.VariableCheck.eager(variables)
    snapshot = saving.Snapshot({"model": module})
    assert snapshot.copy() and check.run() == []  # traced here, once
    writer = saving.CheckpointWriter({"model": module}, where, "eager", keep=2, existing=[])
    figures = {"save": [], "check": [], "copy": []}
    step = 0
    for round_ in range(args.rounds):
        for name in rotated(list(figures), round_):
            if name == "copy":
                seconds = timed(snapshot.copy, repeat=3)
            elif name == "check":
                seconds = timed(check.run, repeat=3)
            else:
                step += 1
                seconds = timed(lambda: (check.run(), writer.save(step), writer.wait()))  # pylint: disable=cell-var-from-loop
            figures[name].append(seconds)
        print(f"eager round {round_ + 1}: " + ", ".join(
            f"{name} {figures[name][-1] * 1000:.1f} ms" for name in figures))
    med, low = summarize("eager mode", figures)
    print(f"  the check / a whole save: {med['check'] / low['save'] * 100:.1f} % of the fastest, "
          f"{med['check'] / med['save'] * 100:.1f} % of the median (target < 2 %); the training "
          f"thread waits for check + snapshot: {(med['check'] + med['copy']) * 1000:.1f} ms per save")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--variables", type=int, default=25)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    where = tempfile.mkdtemp(prefix="bench_finite_", dir=args.dir)
    print(f"TensorFlow {tf.__version__}, {platform.machine()}, {os.cpu_count()} CPUs; writing "
          f"to {where}; {args.rounds} rounds")
    try:
        for slots in (0, 2):
            graph_mode(args, where, slots)
            eager_mode(args, where, slots)
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
