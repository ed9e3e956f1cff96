"""What the live panel costs training: %%supervise (panel shown) against TF's own Supervisor and a
bare loop, in one real kernel, at 1 s and 10 s summary intervals, with 1 and with 8 scalar tags.

Everything runs in one kernel started with jupyter_client; this process is the frontend: it
receives every display and comm message the panel sends (counted below), as JupyterLab's server
would. For each configuration (summary interval x tags) and round, the three modes run one after
the other, the order rotating each round, each on a fresh graph and logdir, with checkpoints as
often as summaries:
  bare       the loop `sess.run(train_op)` in a thread of the kernel, plain Session
  tf         the same loop under tf.compat.v1.train.Supervisor (managed_session, in a thread)
  supervise  the same loop as a %%supervise cell; its panel is displayed (the cell's output)
Each run warms up, then its steps are counted over a window (at least two summary intervals).
Printed per configuration: median steps/s of each mode, median of the per-round ratios
supervise/tf and supervise/bare (target: supervise >= 0.99 of tf), and beside them the kernel's
CPU time in the panel per second of training: the refresher thread's CPU clock
(time.pthread_getcpuclockid; CPU time holds up on a loaded machine where wall-clock ratios do
not), the IOPub thread's, the comm traffic this frontend received, and
the panel's share of the kernel's CPU: the most the panel can take from training, so
1 - share bounds supervise/tf from below as far as the panel goes. Nothing is asserted.

On a loaded machine the steps/s of one mode can differ from another's by what the scheduler
gave the kernel ("kernel CPU", in cores): steps/s = that / CPU per step. Read steps/s ratios
with the load average in mind; the CPU figures are the ones that reproduce.

    PYTHONPATH=. .venv/bin/python bench/bench_training_cost.py [--rounds 5] [--window 5]
        [--configs 1x1,10x8] [--diagnose]
"""
import argparse
import ast
import json
import os
import queue
import statistics
import sys
import tempfile

from jupyter_client.manager import KernelManager

CONFIGS = ((1.0, 1), (1.0, 8), (10.0, 1), (10.0, 8))   # (summary seconds, scalar tags)
MODES = ("bare", "tf", "supervise")
# --diagnose: %%supervise without one of its parts, to see what each costs.
DIAGNOSTIC = ("sup-nopanel", "sup-ignore")

SETUP = r'''
import logging, re, threading, time
import tensorflow as tf
import jupyter_supervisor
from jupyter_supervisor.view import panel as _panel_module
tf.compat.v1.disable_eager_execution()
tf.get_logger().setLevel(logging.ERROR)
logging.getLogger("jupyter_supervisor").setLevel(logging.ERROR)
v1 = tf.compat.v1

def build(tags):
    """A fresh default graph: the issue's model, `tags` scalar summaries."""
    global train_op
    v1.reset_default_graph()
    gs = v1.train.get_or_create_global_step()
    w = v1.get_variable("w", shape=[64, 64], initializer=v1.glorot_uniform_initializer())
    x = tf.random.normal([32, 64])
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - x))
    for i in range(tags):
        v1.summary.scalar(f"loss_{i}", loss * (i + 1))
    train_op = v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=gs)
    return v1.get_default_graph()

count = [0]
done = threading.Event()

def start_bare(tags):
    graph = build(tags)
    op = train_op
    def loop():
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            while not done.is_set():
                sess.run(op)
                count[0] += 1
    done.clear()
    thread = threading.Thread(target=loop, daemon=True, name="train-bare")
    thread.start()
    return thread

def start_tf(tags, logdir, secs):
    graph = build(tags)
    op = train_op
    def loop():
        sv = v1.train.Supervisor(graph=graph, logdir=logdir, save_summaries_secs=secs,
                                 save_model_secs=secs)
        with sv.managed_session() as sess:
            while not sv.should_stop() and not done.is_set():
                sess.run(op)
                count[0] += 1
    done.clear()
    thread = threading.Thread(target=loop, daemon=True, name="train-tf")
    thread.start()
    return thread

def _cpu(thread):
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, TypeError, AttributeError):
        return 0.0

def cpu_clocks():
    """{thread: its CPU seconds so far} of every live Python thread."""
    return {t: _cpu(t) for t in threading.enumerate() if t.ident is not None}

def cpu_by_kind(before, wall):
    """CPU seconds per second of wall time since `before` (cpu_clocks()), by kind of thread:
    the name without its numbers; a run's thread without the run's name; "train" for the
    bench's loops. Threads that ended since are left out."""
    kinds = {}
    for t, start in before.items():
        if not t.is_alive():
            continue
        kind = re.sub(r"[-_ ]*\d+", "", t.name.split(" (")[0])
        if t.name.startswith("train-"):
            kind = "train"
        elif t.name.startswith(("jupyter_supervisor-panel-", "jupyter_supervisor-run-")):
            kind = t.name.rsplit("-", 1)[0]
        kinds[kind] = kinds.get(kind, 0.0) + (_cpu(t) - start) / wall
    return kinds

def _threads(prefix):
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]

def measure(warmup, seconds):
    """Waits for the first step, warms up, then counts steps over `seconds`: steps/s, CPU
    seconds per second of the panel refresher(s) and of IOPub."""
    pause = threading.Event()
    deadline = time.monotonic() + 120
    while count[0] == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the loop made no step in 120 s")
        pause.wait(0.02)
    pause.wait(warmup)
    panels = _threads("jupyter_supervisor-panel-")
    iopub = _threads("IOPub")
    all0 = cpu_clocks()
    cpu0 = [_cpu(t) for t in panels]
    io0 = [_cpu(t) for t in iopub]
    n0, t0, p0, w0 = count[0], time.perf_counter(), time.process_time(), time.time()
    pause.wait(seconds)
    n1, t1, p1, w1 = count[0], time.perf_counter(), time.process_time(), time.time()
    cpu1 = [_cpu(t) for t in panels]
    io1 = [_cpu(t) for t in iopub]
    wall = t1 - t0
    threads = cpu_by_kind(all0, wall)
    return {"rate": (n1 - n0) / wall, "from": w0, "to": w1,
            "cpu_per_step": (p1 - p0) / max(1, n1 - n0),
            "cpu_per_sec": (p1 - p0) / wall,
            "panel": (sum(cpu1) - sum(cpu0)) / wall,
            "iopub": (sum(io1) - sum(io0)) / wall,
            "threads": threads}

def stop_thread(thread):
    done.set()
    thread.join(60)
    count[0] = 0
'''

BODY = """\
%%supervise --logdir {logdir} --save-summaries-secs {secs:g} --save-model-secs {secs:g}
op = train_op
while not sv.should_stop():
    sess.run(op)
    count[0] += 1
"""


class Kernel:
    """A kernel of this Python; counts the comm messages (and their bytes) it sends."""

    def __init__(self, workdir):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=workdir, env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.comm = []     # (kernel's send time, bytes) of every comm message received

    def _reply(self, msg_id, timeout=600):
        while True:
            reply = self.kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"]

    def _drain(self):
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.01)
            except queue.Empty:
                return
            if msg["msg_type"].startswith("comm_"):
                size = len(json.dumps(msg["content"], default=str))
                size += sum(len(b) for b in msg.get("buffers") or ())
                self.comm.append((msg["header"]["date"].timestamp(), size))

    def execute(self, code):
        content = self._reply(self.kc.execute(code))
        self._drain()
        if content["status"] != "ok":
            raise RuntimeError(f"{code!r} failed: {content.get('evalue')}")

    def value(self, expression):
        content = self._reply(self.kc.execute("", silent=True,
                                              user_expressions={"v": expression}))
        result = content["user_expressions"]["v"]
        if result["status"] != "ok":
            raise RuntimeError(f"{expression}: {result['evalue']}")
        return ast.literal_eval(result["data"]["text/plain"])

    def shutdown(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def run_one(kernel, mode, secs, tags, logdir, warmup, window):
    if mode == "bare":
        kernel.execute(f"_t = start_bare({tags})")
    elif mode == "tf":
        kernel.execute(f"_t = start_tf({tags}, {logdir!r}, {secs})")
    else:
        kernel.execute(f"build({tags})")
        body = BODY.format(logdir=logdir, secs=secs)
        if mode == "sup-ignore":  # no finiteness check before a checkpoint
            body = body.replace("%%supervise ", "%%supervise --on-nan ignore ", 1)
        kernel.execute(body)
        if mode == "sup-nopanel":  # the panel closed: no refresher, no comm traffic
            kernel.execute("_panel_module.close_all()")
    kernel.comm.clear()
    result = kernel.value(f"measure({warmup}, {window})")
    kernel._drain()
    # The window's comm traffic: what the frontend received, sent within the window.
    sizes = [size for sent, size in kernel.comm if result["from"] <= sent <= result["to"]]
    result["comm_kb"] = sum(sizes) / 1024 / window
    result["comm_msgs"] = len(sizes) / window
    if mode not in ("bare", "tf"):
        name = os.path.basename(logdir)
        failed = kernel.value(f"jupyter_supervisor.get_run({name!r}).error_text")
        if failed:
            raise RuntimeError(f"run {name} failed:\n{failed}")
        kernel.execute(f"%supervise stop {name}\ncount[0] = 0\n_panel_module.close_all()")
    else:
        kernel.execute("stop_thread(_t)")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=5.0,
                        help="seconds counted per run at 1 s summaries (2.2x that at 10 s)")
    parser.add_argument("--warmup", type=float, default=1.5)
    parser.add_argument("--threads", type=int, default=0,
                        help="TensorFlow's inter- and intra-op threads for every mode (0: its "
                             "default, one per core); 1 leaves a core to the other threads and "
                             "makes the figures much less noisy on a 2-core machine")
    parser.add_argument("--diagnose", action="store_true",
                        help=f"add the modes {', '.join(DIAGNOSTIC)}: %%%%supervise without its "
                             "panel, and without the finiteness check")
    parser.add_argument("--configs", default="all",
                        help="'all' or e.g. '1x1,10x8' (summary seconds x tags)")
    args = parser.parse_args()
    configs = CONFIGS if args.configs == "all" else tuple(
        (float(s), int(t)) for s, t in (c.split("x") for c in args.configs.split(",")))

    modes = MODES + (DIAGNOSTIC if args.diagnose else ())
    workdir = tempfile.mkdtemp(prefix="bench_training_cost-")
    kernel = Kernel(workdir)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; TensorFlow threads "
          f"{args.threads or 'default'}; {args.rounds} rounds, "
          f"modes alternated (order rotating), windows {args.window:g} s at 1 s summaries, "
          f"{2.2 * args.window:g} s at 10 s", flush=True)
    results = {(c, m): [] for c in configs for m in modes}
    try:
        kernel.execute("%load_ext jupyter_supervisor\n" + SETUP)
        if args.threads:
            kernel.execute(f"tf.config.threading.set_inter_op_parallelism_threads({args.threads})"
                           f"\ntf.config.threading.set_intra_op_parallelism_threads({args.threads})")
        run_one(kernel, "supervise", 1.0, 1, os.path.join(workdir, "warm"), 0.5, 0.5)
        run_one(kernel, "tf", 1.0, 1, os.path.join(workdir, "warmtf"), 0.5, 0.5)
        for rnd in range(args.rounds):
            for ci, config in enumerate(configs):
                secs, tags = config
                window = args.window if secs < 5 else 2.2 * args.window
                shift = (rnd + ci) % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    logdir = os.path.join(workdir, f"{mode[:3]}{int(secs)}x{tags}r{rnd}")
                    results[(config, mode)].append(
                        run_one(kernel, mode, secs, tags, logdir, args.warmup, window))
                line = "  ".join(f"{m} {results[(config, m)][-1]['rate']:6.0f}" for m in modes)
                sup = results[(config, "supervise")][-1]
                print(f"round {rnd + 1} summaries {secs:g} s, {tags} tag(s): {line} steps/s; "
                      f"panel {sup['panel'] * 1e3:.2f} ms/s", flush=True)
    finally:
        kernel.shutdown()

    med = statistics.median
    print()
    print("Per configuration, medians over rounds; ratios are medians of per-round ratios.")
    print("  steps/s (wall clock; noisy on a shared machine) and process CPU per step (all threads"
          " of the kernel, TensorFlow's included; holds up under load).")
    print("  'as fast as tf' = tf CPU/step / supervise CPU/step: the steps/s ratio a CPU-bound run"
          " would see.  Target: supervise >= 0.99 of tf.")
    for config in configs:
        secs, tags = config
        runs = {m: results[(config, m)] for m in modes}
        rates = {m: [r["rate"] for r in runs[m]] for m in modes}
        cpu = {m: [r["cpu_per_step"] for r in runs[m]] for m in modes}
        sup = runs["supervise"]

        def paired(values, a, b):
            return med([x / y for x, y in zip(values[a], values[b])])

        print(f"\nsummaries and checkpoints every {secs:g} s, {tags} scalar tag(s):")
        print("  steps/s     " + "  ".join(f"{m} {med(rates[m]):7.0f}" for m in modes)
              + f"   supervise/tf {paired(rates, 'supervise', 'tf'):.3f}"
              f"  supervise/bare {paired(rates, 'supervise', 'bare'):.3f}"
              f"  tf/bare {paired(rates, 'tf', 'bare'):.3f}")
        print("  CPU/step    " + "  ".join(f"{m} {med(cpu[m]) * 1e6:5.0f} us" for m in modes)
              + f"   as fast as tf: supervise {paired(cpu, 'tf', 'supervise'):.3f}"
              f"  (tf vs bare {paired(cpu, 'bare', 'tf'):.3f})")
        print("  kernel CPU  " + "  ".join(
            f"{m} {med(r['cpu_per_sec'] for r in runs[m]):5.2f}" for m in modes)
              + " cores (what the shared machine gave it: steps/s = this / CPU per step)")
        print(f"  panel       refresher CPU {med(r['panel'] for r in sup) * 1e3:.2f} ms per s of "
              f"training; IOPub thread "
              f"{med(r['iopub'] for r in sup) * 1e3:.2f} ms/s (under tf "
              f"{med(r['iopub'] for r in runs['tf']) * 1e3:.2f}); comm to the frontend "
              f"{med(r['comm_kb'] for r in sup):.1f} KB/s in {med(r['comm_msgs'] for r in sup):.1f}"
              " messages/s")
        for mode in ("tf", "supervise"):
            kinds = sorted({k for r in runs[mode] for k in r["threads"]})
            per_kind = {k: med(r["threads"].get(k, 0.0) for r in runs[mode]) for k in kinds}
            shown = sorted(per_kind.items(), key=lambda kv: -kv[1])
            print(f"  {mode} threads (ms CPU per s): " + ", ".join(
                f"{k} {v * 1e3:.1f}" for k, v in shown if v * 1e3 >= 0.05))
        own = {"tf": "train", "supervise": "jupyter_supervisor-run"}
        per_step = {m: med(r["threads"].get(own[m], 0.0) / r["rate"] for r in runs[m])
                    for m in own}
        print(f"  training thread's own CPU per step: tf {per_step['tf'] * 1e6:.1f} us, "
              f"supervise {per_step['supervise'] * 1e6:.1f} us (the body's Python and the "
              "session call; TensorFlow's op threads not included)")
        share = med((r["panel"] + r["iopub"]) / r["cpu_per_sec"] for r in sup)
        print(f"  panel share of the kernel's CPU (refresher + IOPub): {share * 100:.2f} %, "
              f"so supervise >= {1 - share:.3f} of tf as far as the panel goes")
        for mode in DIAGNOSTIC:
            if mode in runs:
                print(f"  {mode:12s} supervise/tf {paired(rates, mode, 'tf'):.3f}, as fast as tf "
                      f"{paired(cpu, 'tf', mode):.3f}; training thread's CPU per step "
                      f"{med(r['threads'].get('jupyter_supervisor-run', 0) / r['rate'] for r in runs[mode]) * 1e6:.1f} us")
    print(f"\nload average now {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
