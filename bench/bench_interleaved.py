"""%%supervise against TF's Supervisor and a bare loop, interleaved in short slices: the
per-step cost of the training loop, with the noise of a shared machine averaged out.

Why: on a 2-core VM the steps/s of one mode swing by 10-20 % between windows of a few seconds
(bench_training_cost.py shows it: a tight single-threaded loop varies as much), far more than
the 1 % this measures. Here the three loops run at once in one real kernel, each on its own
graph, each gated by an Event, each written as its user writes it (under a Supervisor,
``while not sv.should_stop(): sess.run(op)``); a controller lets exactly one train at a time
for ``--slice`` seconds, rotating (bare, tf, supervise, bare, ...), hundreds of times. A machine that slows down
slows the three alike within a cycle, so the per-cycle ratios are precise.

What it does not measure by itself: the background work of each run (checkpoint, summary and
step-counter threads of both Supervisors; the panel, step watcher and event dispatcher of
%%supervise) runs all the time, so it slows every mode alike and cancels out of the ratio. That
part is measured by the CPU clocks of those threads over the whole run (the panel's, ours
beyond TF's services), and printed beside: supervise/tf ~ (interleaved ratio) x (1 - our extra
background CPU, in cores), an upper bound on what the extra threads take when both cores are
busy. The panel is displayed (the cell's output); this process is its frontend and receives
its comm messages.

    PYTHONPATH=. .venv/bin/python bench/bench_interleaved.py [--cycles 150] [--slice 0.2]
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_training_cost import CONFIGS, SETUP, Kernel  # noqa: E402  pylint: disable=C0413

MODES = ("bare", "tf", "supervise")

KERNEL_CODE = r'''
gates = {m: threading.Event() for m in ("bare", "tf", "supervise")}
ready = {m: threading.Event() for m in gates}   # the loop's session (and services) started
counts = {m: 0 for m in gates}
finished = threading.Event()
tf_supervisors = []

def _loop_in(mode, sess, op, should_stop):
    """The loop as its user writes it: under a Supervisor, ``while not sv.should_stop()``."""
    gate = gates[mode]
    ready[mode].set()
    while not should_stop():
        gate.wait()
        sess.run(op)
        counts[mode] += 1

def start_gated(mode, tags, logdir=None, secs=None):
    graph = build(tags)
    op = train_op
    def loop():
        if mode == "bare":
            with v1.Session(graph=graph) as sess:
                sess.run(v1.global_variables_initializer())
                _loop_in(mode, sess, op, finished.is_set)
        else:
            sv = v1.train.Supervisor(graph=graph, logdir=logdir, save_summaries_secs=secs,
                                     save_model_secs=secs)
            tf_supervisors.append(sv)
            with sv.managed_session() as sess:
                _loop_in(mode, sess, op, sv.should_stop)
    thread = threading.Thread(target=loop, daemon=True, name=f"train-{mode}")
    thread.start()
    if not ready[mode].wait(120):
        raise RuntimeError(f"the {mode} loop did not start in 120 s")
    return thread

def interleave(cycles, slice_secs):
    """Per cycle, the steps/s of each mode in its slice; CPU seconds per second of the threads
    by kind over the whole measurement."""
    pause = threading.Event()
    modes = list(gates)
    loops = {m: _training_thread(m) for m in modes}
    steps0 = dict(counts)
    cpu0 = cpu_clocks()
    start = time.perf_counter()
    rates = []
    for i in range(cycles):
        row = {}
        for m in modes[i % 3:] + modes[:i % 3]:
            gates[m].set()
            n0, t0 = counts[m], time.perf_counter()
            pause.wait(slice_secs)
            n1, t1 = counts[m], time.perf_counter()
            gates[m].clear()
            row[m] = (n1 - n0) / (t1 - t0)
        rates.append(row)
    wall = time.perf_counter() - start
    if not all(t.is_alive() for t in cpu0 if t.name.startswith("train-")):
        raise RuntimeError("a training loop ended during the measurement")
    kinds = cpu_by_kind(cpu0, wall)
    per_step = {m: (_cpu(t) - cpu0[t]) / max(1, counts[m] - steps0[m]) for m, t in loops.items()}
    return {"rates": rates, "threads": kinds, "cpu_per_step": per_step}

def _training_thread(mode):
    """The thread that runs the mode's loop (the run's thread for %%supervise)."""
    for t in threading.enumerate():
        if t.name == f"train-{mode}" or (
                mode == "supervise" and t.name.startswith("jupyter_supervisor-run-")):
            return t
    raise RuntimeError(f"no training thread for {mode}")
'''

BODY = """\
%%supervise --logdir {logdir} --save-summaries-secs {secs:g} --save-model-secs {secs:g}
op, gate = ops["supervise"], gates["supervise"]
ready["supervise"].set()
while not sv.should_stop():
    gate.wait()
    sess.run(op)
    counts["supervise"] += 1
"""

# Threads that do the same work under both Supervisors (checkpoint, summaries, step rate) and
# the training threads: not counted as the cost of %%supervise's extras.
SHARED = ("train", "jupyter_supervisor-run", "jupyter_supervisor-checkpoint",
          "jupyter_supervisor-summary", "jupyter_supervisor-step-counter")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=150)
    parser.add_argument("--slice", type=float, default=0.2, help="seconds per mode and cycle")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench_interleaved-")
    kernel = Kernel(workdir)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {args.cycles} cycles "
          f"of {args.slice:g} s per mode", flush=True)
    try:
        kernel.execute("%load_ext jupyter_supervisor\n" + SETUP + KERNEL_CODE)
        for secs, tags in CONFIGS:
            name = f"sup{int(secs)}x{tags}"
            kernel.execute("finished.clear()\nfor e in [*gates.values(), *ready.values()]: "
                           "e.clear()")
            kernel.execute(f"build({tags})\nops = {{'supervise': train_op}}")
            kernel.execute(BODY.format(logdir=os.path.join(workdir, name), secs=secs))
            kernel.execute("if not ready['supervise'].wait(120): raise RuntimeError('no start')\n"
                           f"_b = start_gated('bare', {tags})\n"
                           f"_t = start_gated('tf', {tags}, "
                           f"{os.path.join(workdir, 'tf' + name)!r}, {secs})")
            result = kernel.value(f"interleave({args.cycles}, {args.slice})")
            failed = kernel.value(f"jupyter_supervisor.get_run({name!r}).error_text")
            if failed:
                raise RuntimeError(f"run {name} failed:\n{failed}")
            kernel.execute("finished.set()\nfor s in tf_supervisors: s.request_stop()\n"
                           "tf_supervisors.clear()\nfor g in gates.values(): g.set()\n"
                           f"%supervise stop {name}\n_b.join(60)\n_t.join(60)\n"
                           "_panel_module.close_all()")
            report(secs, tags, result)
    finally:
        kernel.shutdown()


def report(secs, tags, result):
    rows, threads = result["rates"], result["threads"]
    med = statistics.median
    ratios = sorted(r["supervise"] / r["tf"] for r in rows)
    quart = statistics.quantiles(ratios, n=4)
    means = {m: statistics.fmean(r[m] for r in rows) for m in MODES}
    extra = sum(v for k, v in threads.items() if k.startswith("jupyter_supervisor")
                and k not in SHARED) + threads.get("IOPub", 0.0)
    ours = sum(threads.get(k, 0.0) for k in SHARED[2:])
    theirs = threads.get("Thread", 0.0)  # unnamed: TF's LooperThreads (checkpoint, summaries...)
    print(f"\nsummaries and checkpoints every {secs:g} s, {tags} scalar tag(s):")
    print("  steps/s (mean of slices)  " + "  ".join(f"{m} {means[m]:7.0f}" for m in MODES))
    per_step = result["cpu_per_step"]
    print("  CPU of the training thread per step (us)  " + "  ".join(
        f"{m} {per_step[m] * 1e6:.2f}" for m in MODES))
    print(f"  supervise/tf per cycle: median {med(ratios):.3f} (quartiles {quart[0]:.3f} - "
          f"{quart[2]:.3f}); ratio of means {means['supervise'] / means['tf']:.3f}; "
          f"tf/bare {med(r['tf'] / r['bare'] for r in rows):.3f}")
    print(f"  background CPU (ms per s, whole run, all three live): %%supervise extras "
          f"{extra * 1e3:.2f} (panel {threads.get('jupyter_supervisor-panel', 0) * 1e3:.2f}, "
          f"step watcher {threads.get('jupyter_supervisor-step-watcher', 0) * 1e3:.2f}, "
          f"events {threads.get('jupyter_supervisor-events', 0) * 1e3:.2f}, IOPub "
          f"{threads.get('IOPub', 0) * 1e3:.2f}); services: ours {ours * 1e3:.2f}, TF's "
          f"{theirs * 1e3:.2f}")
    bound = med(ratios) * (1 - extra - max(0.0, ours - theirs))
    print(f"  => supervise >= {bound:.3f} of tf (the interleaved ratio, less the extra "
          "background CPU as if it all came out of training)")


if __name__ == "__main__":
    main()
