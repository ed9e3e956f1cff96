"""The largest model whose final checkpoint a kernel restart from the page still writes, with
jupyter_client's default ``KernelManager.shutdown_wait_time`` (5 s: SIGTERM at 2.5 s, SIGKILL
at 5 s), on this machine.

For each size (MB of float32 weights, doubling from ``--start``), a real kernel trains an eager
custom loop over one variable of that size (``sv.track(big=...)``, ``--save-model-secs 600``:
no periodic checkpoint is due); the client then shuts it down as the page's restart does
(``shutdown_kernel(now=False)``, the path a restart takes before it starts the new process).
A size passes when the newest checkpoint afterwards holds the step the run had reached. The
sizes stop at the first that fails (or ``--max``).

Baseline, measured in the same run: a plain ``tf.train.Checkpoint.write`` of the same variable
in this process. Printed per size: the seconds the shutdown took, that plain write's seconds,
and their ratio (what the stop, the snapshot and the kernel's end add to the bare write);
then the largest size that passed, and the window as a multiple of its plain write.

    .venv/bin/python bench/bench_preemption.py [--start 256] [--max 4096]
"""
import argparse
import os
import platform
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import tensorflow as tf  # noqa: E402

from helpers import Kernel  # noqa: E402  (the tests' kernel driver)

BODY = """%%supervise --logdir big --save-model-secs 600
sv.track(big=big)
while not sv.should_stop():
    big[:1].assign(big[:1] + 1.0)
    sv.step()
"""


def plain_write_secs(megabytes, directory):
    """Seconds of one tf.train.Checkpoint.write of ``megabytes`` of float32 (the baseline)."""
    variable = tf.Variable(tf.zeros([megabytes * 2**20 // 4]))
    start = time.monotonic()
    tf.train.Checkpoint(big=variable).write(os.path.join(directory, "plain"))
    return time.monotonic() - start


def shutdown_saves(megabytes, workdir):
    """(saved, seconds of the shutdown) for a run over ``megabytes`` of weights."""
    kernel = Kernel(workdir)
    try:
        window = kernel.km.shutdown_wait_time
        kernel.ok(f"big = tf.Variable(tf.zeros([{megabytes * 2**20 // 4}]))")
        kernel.ok(BODY)
        kernel.wait_until("(get_run('big').global_step or 0) > 5", "training")
        reached = kernel.value("get_run('big').global_step")
        start = time.monotonic()
        kernel.km.shutdown_kernel(now=False)
        seconds = time.monotonic() - start
    finally:
        kernel.kc.stop_channels()
        if kernel.km.has_kernel:
            kernel.km.shutdown_kernel(now=True)
    newest = tf.train.latest_checkpoint(os.path.join(workdir, "big"))
    saved = newest is not None and int(newest.rsplit("-", 1)[1]) >= reached
    return saved, seconds, window


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", type=int, default=256, help="first size, MB")
    parser.add_argument("--max", type=int, default=4096, help="largest size tried, MB")
    args = parser.parse_args()
    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"TensorFlow {tf.__version__}")
    print(f"{'MB':>6} {'saved':>6} {'shutdown s':>11} {'plain write s':>14} {'ratio':>6}")
    largest = None
    megabytes = args.start
    while megabytes <= args.max:
        workdir = tempfile.mkdtemp(prefix="bench_preemption_")
        try:
            plain = plain_write_secs(megabytes, workdir)
            saved, seconds, window = shutdown_saves(megabytes, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(f"{megabytes:>6} {str(saved):>6} {seconds:>11.2f} {plain:>14.2f} "
              f"{seconds / plain:>6.2f}", flush=True)
        if not saved:
            break
        largest = (megabytes, plain, window)
        megabytes *= 2
    if largest is None:
        print(f"No size from {args.start} MB was saved within the default window.")
        return
    size, plain, window = largest
    print(f"Largest model saved within the default restart window ({window:g} s): {size} MB "
          f"(the window is {window / plain:.1f}x its plain write here).")


if __name__ == "__main__":
    main()
