"""What the finiteness check costs a checkpoint, at 100 MB of variables (issue 15).

One graph of float32 variables (``--mb`` megabytes in ``--variables`` variables) and two Savers
over them writing to the same file system:
  plain    tf.compat.v1.train.Saver.save, as TensorFlow does it
  guarded  the same Saver after finite.guard_saver: the check runs in the save's own session
           run, over the tensors it writes (what the Supervisor does)
alternated each round (the order rotates), plus the check alone (``VariableCheck.run``: one
fused op, one session run) and its eager form (``VariableCheck.eager``: one tf.function call).
Printed: per-round figures and the medians, and the check's cost as a share of a plain save:
(guarded - plain) / plain, and check alone / plain. Target: under 2 %. Figures only.

    .venv/bin/python bench/bench_finite.py [--rounds 7] [--mb 100] [--variables 25]
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

v1 = tf.compat.v1


def build(mb, count):
    graph = tf.Graph()
    with graph.as_default():
        rows = max(1, int(mb * 2**20 / 4 / count / 1000))
        variables = [v1.get_variable(f"layer{i}/kernel", shape=[rows, 1000],
                                     initializer=v1.random_normal_initializer(stddev=0.1))
                     for i in range(count)]
        plain = v1.train.Saver(variables, max_to_keep=2)
        guarded = v1.train.Saver(variables, max_to_keep=2)
        names = [v.op.name for v in variables]
        assert finite.guard_saver(guarded, graph, names) == set(names)
        check = finite.VariableCheck.in_graph(variables, graph)
        init = v1.global_variables_initializer()
    size = sum(rows * 1000 * 4 for _ in variables) / 2**20
    return graph, plain, guarded, check, init, size


def timed(fn, repeat=1):
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--variables", type=int, default=25)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    graph, plain, guarded, check, init, size = build(args.mb, args.variables)
    where = tempfile.mkdtemp(prefix="bench_finite_", dir=args.dir)
    print(f"{size:.0f} MB in {args.variables} float32 variables; TensorFlow {tf.__version__}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs; writing to {where}")
    figures = {"plain": [], "guarded": [], "check": []}
    try:
        with v1.Session(graph=graph) as sess:
            sess.run(init)
            savers = {"plain": plain, "guarded": guarded}
            step = 0
            for name, saver in savers.items():  # warm up: executors and the file cache
                saver.save(sess, os.path.join(where, name), global_step=step)
            assert check.run(sess) == []
            for round_ in range(args.rounds):
                order = ["plain", "guarded", "check"]
                order = order[round_ % 3:] + order[:round_ % 3]
                for name in order:
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
    finally:
        shutil.rmtree(where, ignore_errors=True)

    # Eager (TensorFlow 2's default outside the graph above): the same check, as a tf.function.
    rows = int(args.mb * 2**20 / 4 / args.variables / 1000)
    variables = [tf.Variable(tf.random.normal([rows, 1000])) for _ in range(args.variables)]
    eager_check = finite.VariableCheck.eager(variables)
    assert eager_check.run() == []  # traced here, once
    eager = statistics.median(timed(eager_check.run, repeat=5) for _ in range(args.rounds))

    med = {name: statistics.median(values) for name, values in figures.items()}
    print(f"median: plain save {med['plain'] * 1000:.1f} ms, guarded save "
          f"{med['guarded'] * 1000:.1f} ms, check alone {med['check'] * 1000:.2f} ms"
          f", eager check {eager * 1000:.2f} ms")
    print(f"check in the save (guarded - plain) / plain: "
          f"{(med['guarded'] - med['plain']) / med['plain'] * 100:+.1f} %")
    print(f"check alone / plain save: {med['check'] / med['plain'] * 100:.1f} % (target < 2 %)")


if __name__ == "__main__":
    main()
