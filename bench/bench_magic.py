"""How much %%supervise costs, measured in one real kernel (jupyter_client), printed as figures
and ratios against baselines measured in the same run. Nothing is asserted.

  (a) round trip of a trivial cell (execute request -> reply): idle, and while a run trains
      (target: idle + 5 ms at most);
  (b) steps/s of a training loop under %%supervise, against the same loop bare in a thread of
      the same kernel (target: 0.97 or more); also under --max-steps (far from the limit);
  (c) seconds from executing a %%supervise cell to its reply (target: 0.3 s or less).

The machine is shared, so the measurements are interleaved: every loop lives for the whole
benchmark, paused on an Event, and short windows of each alternate; (a) alternates batches of
idle and busy round trips the same way. Medians are reported.

Usage: .venv/bin/python bench/bench_magic.py [--window 1] [--rounds 9] [--round-trips 300]
"""
import argparse
import ast
import os
import queue
import statistics
import sys
import tempfile
import time

from jupyter_client.manager import KernelManager

SETUP = r'''
import threading, time
import tensorflow as tf
import jupyter_supervisor
tf.compat.v1.disable_eager_execution()

def build_model():
    global gs, loss, train_op
    tf.compat.v1.reset_default_graph()
    gs = tf.compat.v1.train.get_or_create_global_step()
    w = tf.compat.v1.get_variable("w", shape=[64, 64],
                                  initializer=tf.compat.v1.glorot_uniform_initializer())
    x = tf.random.normal([32, 64])
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - x))
    tf.compat.v1.summary.scalar("loss", loss)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=gs)

# Every loop: pausable on its Event, counting its steps the same way.
go = {k: threading.Event() for k in ("bare", "supervised", "limited")}
count = {k: 0 for k in go}

def start_bare():
    build_model()
    sess = tf.compat.v1.Session()
    sess.run(tf.compat.v1.global_variables_initializer())
    op, gate, done = train_op, go["bare"], threading.Event()
    def loop():
        while not done.is_set():
            if not gate.is_set():
                gate.wait(0.05)
                continue
            sess.run(op)
            count["bare"] += 1
    threading.Thread(target=loop, daemon=True).start()
    return done

def window(kind, seconds):
    """Steps/s of loop `kind` over `seconds` (after a short warm-up), then pauses it."""
    pause = threading.Event()
    go[kind].set()
    pause.wait(0.1)
    start, t0 = count[kind], time.perf_counter()
    pause.wait(seconds)
    rate = (count[kind] - start) / (time.perf_counter() - t0)
    go[kind].clear()
    return rate

def compare(seconds, rounds):
    rates = {k: [] for k in go}
    for _ in range(rounds):
        for kind in go:
            rates[kind].append(window(kind, seconds))
    return rates
'''

# The loop as a user writes it, plus the pause and the counter the bare loop has too.
# Two runs live at once: their bodies share the notebook namespace, so each names its own op.
BODY = """
op_{kind}, gate_{kind} = train_op, go[{kind!r}]
while not sv.should_stop():
    if not gate_{kind}.is_set():
        gate_{kind}.wait(0.05)
        continue
    sess.run(op_{kind})
    count[{kind!r}] += 1
"""
PLAIN = "while not sv.should_stop():\n    sess.run(train_op)\n"


class Kernel:
    def __init__(self, workdir):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=workdir, env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def _reply(self, msg_id, timeout=600):
        while True:
            reply = self.kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"]

    def execute(self, code):
        """Runs ``code``; returns the seconds from the request to its reply."""
        start = time.perf_counter()
        content = self._reply(self.kc.execute(code))
        seconds = time.perf_counter() - start
        self._drain()
        if content["status"] != "ok":
            raise RuntimeError(f"{code!r} failed: {content.get('evalue')}")
        return seconds

    def value(self, expression):
        """The value of a Python literal expression evaluated in the kernel."""
        content = self._reply(self.kc.execute("", silent=True, user_expressions={"v": expression}))
        self._drain()
        result = content["user_expressions"]["v"]
        if result["status"] != "ok":
            raise RuntimeError(f"{expression}: {result['evalue']}")
        return ast.literal_eval(result["data"]["text/plain"])

    def _drain(self):
        while True:
            try:
                self.kc.get_iopub_msg(timeout=0.001)
            except queue.Empty:
                return

    def shutdown(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=1.0,
                        help="seconds of each steps/s window")
    parser.add_argument("--rounds", type=int, default=9,
                        help="windows of each loop, interleaved")
    parser.add_argument("--round-trips", type=int, default=300,
                        help="trivial cells timed, idle and busy each")
    args = parser.parse_args()

    kernel = Kernel(tempfile.mkdtemp(prefix="bench_magic-"))
    try:
        kernel.execute("%load_ext jupyter_supervisor\n" + SETUP)
        kernel.execute("bare_done = start_bare()")
        kernel.execute("build_model()")
        kernel.execute("%%supervise --logdir runs/supervised\n" + BODY.format(kind="supervised"))
        # The body reads `train_op` when it runs, not when its cell executes: let it take its
        # op before the next build_model() rebinds the name.
        kernel.value("window('supervised', 0.2)")
        kernel.execute("build_model()")
        kernel.execute("%%supervise --logdir runs/limited --max-steps 1000000000\n"
                       + BODY.format(kind="limited"))
        kernel.value("window('supervised', 0.5)")  # both runs are up and warm

        # (a) a trivial cell, alternating batches: idle, during the supervised run, and during
        # the same loop bare in a thread (what the loop itself costs the kernel).
        trips = {"idle": [], "supervised": [], "bare": []}
        batch = 20
        for _ in range(max(args.round_trips // batch, 1)):
            for kind, times in trips.items():
                if kind != "idle":
                    kernel.execute(f"go[{kind!r}].set()")
                times.extend(kernel.execute("pass") for _ in range(batch))
                if kind != "idle":
                    kernel.execute(f"go[{kind!r}].clear()")

        # (b) steps/s, interleaved windows.
        rates = kernel.value(f"compare({args.window}, {args.rounds})")
        failed = kernel.value("[r.error_text for r in jupyter_supervisor.runs() "
                              "if r.status == 'failed']")
        if failed:
            raise RuntimeError("A benchmark run failed:\n" + "\n".join(failed))
        kernel.execute("%supervise stop supervised")
        kernel.execute("%supervise stop limited")
        kernel.execute("bare_done.set()")

        # (c) a %%supervise cell to its reply: a fresh logdir (initializes), then re-runs
        # (restore); each run is stopped before the next.
        kernel.execute("build_model()")
        returns = []
        for _ in range(5):
            returns.append(kernel.execute(f"%%supervise --logdir runs/ret\n{PLAIN}"))
            kernel.execute("%supervise stop ret")
    finally:
        kernel.shutdown()

    med = statistics.median
    idle = med(trips["idle"])
    print(f"(a) trivial cell round trip, median of {len(trips['idle'])} each "
          "(alternating batches):")
    print(f"      idle                      {idle * 1e3:7.2f} ms")
    for kind, label in (("supervised", "during a %%supervise run"),
                        ("bare", "during the loop bare")):
        busy = med(trips[kind])
        print(f"      {label:<25} {busy * 1e3:7.2f} ms   added {(busy - idle) * 1e3:+.2f} ms, "
              f"ratio {busy / idle:.2f}" + (" (target: +5 ms at most)"
                                             if kind == "supervised" else ""))
    bare = med(rates["bare"])
    print(f"(b) steps/s, median of {args.rounds} interleaved {args.window:g} s windows:")
    print(f"      bare thread     {bare:9.0f}")
    for kind, label in (("supervised", "%%supervise"), ("limited", "--max-steps")):
        paired = [s / b for s, b in zip(rates[kind], rates["bare"])]
        print(f"      {label:<15} {med(rates[kind]):9.0f}   ratio {med(rates[kind]) / bare:.3f}, "
              f"median of paired ratios {med(paired):.3f} (target: 0.97 or more)")
    print(f"(c) %%supervise cell to its reply: median {med(returns):.3f} s; "
          f"first (initializes) {returns[0]:.3f} s; re-runs (restore) "
          f"{[round(x, 3) for x in returns[1:]]} (target: 0.3 s or less)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
