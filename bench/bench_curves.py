"""What the curves cost an eager run: the training thread's work at a step boundary, and how
fast the event file grows over days.

1. boundary  microseconds of one ``sv.step(loss=..., ...)`` (no training: the boundary alone)
             with the curves' work (``Reporter.boundary``: its timers, and when a point,
             a Progress or a step rate is due, its hand-over to the dispatcher thread) against
             the same boundary without it (``Reporter.boundary`` a no-op), with 1 and 8 scalar
             tensors; beside them, a real training step of ``bench_eager``'s MLP (its bare
             loop) for scale. Modes alternate, the order rotating each round; printed
             are medians and the ratio curves / no curves (median of per-round ratios), and the
             curves' cost as a share of the training step.
2. growth    a session of ``--days`` simulated days (a clock the bench moves; a boundary every
             0.05 s, 8 scalars, summaries every 10 s): the event file's size after the first
             hour, the second, one day and the end, and bytes per hour over the last day, against
             what one summary of the 8 scalars every 10 s would write (TensorFlow's summary
             service at the same interval). The file's rate must not grow with the steps per
             second nor with the session's age.

Figures only; nothing is asserted.

    .venv/bin/python bench/bench_curves.py [--rounds 5] [--steps 20000] [--days 3]
"""
import argparse
import glob
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from jupyter_supervisor import events  # noqa: E402
from jupyter_supervisor.config import RunConfig  # noqa: E402
from jupyter_supervisor.eager import EagerSupervisor  # noqa: E402
from jupyter_supervisor.eager import reporting  # noqa: E402

import bench_eager  # noqa: E402  (this folder is on sys.path: the script's own)


def boundary_cost(mode, tags, steps):
    """Microseconds per sv.step(**scalars) (``mode``: "curves" or "none")."""
    logdir = tempfile.mkdtemp(prefix="bench_curves_")
    sv = EagerSupervisor(RunConfig(logdir=logdir))
    scalars = {f"tag{i}": tf.constant(float(i)) for i in range(tags)}
    original = reporting.Reporter.boundary
    if mode == "none":
        reporting.Reporter.boundary = lambda self, step, values, progress: None
    try:
        with sv.session():
            sv.track(w=tf.Variable(1.0))
            start = time.perf_counter()
            for _ in range(steps):
                sv.step(**scalars)
            return (time.perf_counter() - start) / steps * 1e6
    finally:
        reporting.Reporter.boundary = original
        sv.close()
        shutil.rmtree(logdir, ignore_errors=True)


def training_step_cost():
    """Microseconds per step of bench_eager's MLP, bare (its "loop" bench, for a second)."""
    per_wall_second, _ = bench_eager.loop_run("bare", 1.0, None)
    return 1e6 / per_wall_second


def boundary(rounds, steps):
    for tags in (1, 8):
        ratios, costs = [], {"curves": [], "none": []}
        for r in range(rounds):
            order = ("curves", "none") if r % 2 == 0 else ("none", "curves")
            got = {mode: boundary_cost(mode, tags, steps) for mode in order}
            for mode, cost in got.items():
                costs[mode].append(cost)
            ratios.append(got["curves"] / got["none"])
        train = training_step_cost()
        extra = statistics.median(costs["curves"]) - statistics.median(costs["none"])
        print(f"boundary, {tags} scalar(s): curves {statistics.median(costs['curves']):.1f} us, "
              f"none {statistics.median(costs['none']):.1f} us, ratio "
              f"{statistics.median(ratios):.3f}; the curves' {extra:.1f} us = "
              f"{extra / train:.2%} of a {train:.0f} us training step", flush=True)


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def growth(days):
    logdir = tempfile.mkdtemp(prefix="bench_curves_growth_")
    hub = events.EventHub()
    clock = _Clock()
    reporter = reporting.Reporter(hub, summaries_secs=10.0, clock=clock)
    reporter.open(logdir)
    reporter.started(0, None)
    scalars = {f"tag{i}": float(i) for i in range(8)}
    marks = {days * 86400 - 86400: None}   # where the last day starts
    marks.update({3600: "1 h", 7200: "2 h", 86400: "1 day", days * 86400: f"{days} days"})
    sizes = {}
    step = 0
    tick = 0.05
    try:
        for mark in sorted(marks):
            while clock.now < mark:
                step += 1
                clock.now = step * tick
                reporter.boundary(step, scalars, None)
            hub.flush()
            reporter.event_file._writer.flush()  # pylint: disable=protected-access
            [path] = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
            sizes[mark] = os.path.getsize(path)
    finally:
        reporter.close()
        shutil.rmtree(logdir, ignore_errors=True)
    for mark, label in sorted(marks.items()):
        if label:
            print(f"growth: event file after {label}: {sizes[mark] / 1e6:.2f} MB", flush=True)
    last_day = (sizes[days * 86400] - sizes[days * 86400 - 86400]) / 24
    # One summary of the 8 scalars, and one step rate, every 10 s, as written here.
    summary = len(tf.compat.v1.Summary(value=[
        tf.compat.v1.Summary.Value(tag=tag, simple_value=1.0) for tag in scalars])
        .SerializeToString())
    rate = len(tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(
        tag="global_step/sec", simple_value=1.0)]).SerializeToString())
    framing = 16 + 16     # the record's length and CRCs, the Event's wall time and step
    baseline = 360 * (summary + rate + 2 * framing)
    print(f"growth: the last day, {last_day / 1e3:.1f} KB/h; one summary and one step rate "
          f"every 10 s: {baseline / 1e3:.1f} KB/h (ratio {last_day / baseline:.2f})", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--days", type=int, default=3, help="at least 2")
    args = parser.parse_args()
    print(f"TensorFlow {tf.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}", flush=True)
    boundary(args.rounds, args.steps)
    growth(args.days)
    return 0


if __name__ == "__main__":
    sys.exit(main())
