"""Soak: a days-long run in minutes. Prints figures; asserts nothing.

One run of 10^6 steps of a tiny graph under the real machinery of a notebook: ``%%supervise`` in
an IPython InteractiveShell (TrainingRun, Supervisor, its checkpoint / summary / step-rate
services, RunHistory, output routing, ``--max-steps``), with a live ``Panel`` whose refresher
runs all along (ipywidgets present, no frontend). Checkpoints every 0.2 s and summaries every
0.1 s are ~300 and ~600 times more often than the notebook defaults (60 s and 10 s), so a few
minutes here stand for days of a real run's bookkeeping.

Every second it samples, from /proc/self: resident memory, threads, open file descriptors, and
Python's allocated blocks (which tell Python objects from native memory); from the logdir: event
files, checkpoint files and checkpoints (retention keeps --keep of them); from the run's history:
points kept and checkpoints listed. At the end: first / last / max of each after a warm-up, and
the slope against the step count (per 100k steps), which is what "flat" means: a leak shows as a
slope that does not go to zero. Also the run's steps/s against the same loop bare (no
Supervisor; measured before and after the run), what is left open after the run and the panel
closed, and the caches of other libraries that grow with a run, each with its bound.

One of those is not ours and grows with every checkpoint: TensorFlow's Saver globs the files of
each new checkpoint, and fnmatch caches every pattern (up to 32768, ~0.8 KB each).
--clear-pattern-cache empties that cache every second, a control that shows what remains.

If 10^6 steps would take longer than --max-seconds here, the run is stopped there (a clean stop,
with a final checkpoint) and the figures say so, with the time 10^6 steps would take. More steps
(--steps 4000000, ~4 min) also show the history's downsampling (a sawtooth).

    .venv/bin/python bench/bench_soak.py [--steps 1000000] [--max-seconds 280]
        [--clear-pattern-cache]
"""
import argparse
import contextlib
import fnmatch
import gc
import io
import os
import shutil
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

import jupyter_supervisor  # noqa: E402
from jupyter_supervisor.view.panel import Panel  # noqa: E402

v1 = tf.compat.v1
LOOP = "while not sv.should_stop():\n    sess.run(train_op)\n"
FIELDS = ("rss_mb", "py_blocks", "threads", "fds", "event_files", "ckpt_files", "checkpoints",
          "history_points", "history_ckpts")


def build_model():
    """The tiniest real model: a global step, one weight, a loss with two scalar summaries."""
    gs = v1.train.get_or_create_global_step()
    w = v1.get_variable("w", initializer=5.0)
    loss = tf.square(w - 1.0)
    v1.summary.scalar("loss", loss)
    v1.summary.scalar("w", w)
    train_op = v1.train.GradientDescentOptimizer(1e-7).minimize(loss, global_step=gs)
    return {"gs": gs, "w": w, "loss": loss, "train_op": train_op}


def bare_steps_per_sec(model, steps: int) -> float:
    """The same loop in a plain session on a thread: the baseline."""
    rate = []

    graph = model["train_op"].graph
    with graph.as_default():
        init = v1.variables_initializer(v1.global_variables())

    def loop():
        with v1.Session(graph=graph) as sess:
            sess.run(init)
            op = model["train_op"]
            start = time.perf_counter()
            for _ in range(steps):
                sess.run(op)
            rate.append(steps / (time.perf_counter() - start))

    thread = threading.Thread(target=loop)
    thread.start()
    thread.join()
    return rate[0]


def proc_sample():
    """Resident memory, Python's allocated blocks (Python objects only: tells a Python leak
    from native memory), OS threads and open file descriptors."""
    with open("/proc/self/status", encoding="ascii") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return {"rss_mb": rss_kb / 1024, "py_blocks": sys.getallocatedblocks(),
            "threads": len(os.listdir("/proc/self/task")),
            "fds": len(os.listdir("/proc/self/fd"))}


def what_is_open():
    """(fd targets, OS thread names), to say what is left over after the run."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
    names = []
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/comm",
                                                 encoding="utf-8") as f:
            names.append(f.read().strip())
    return targets, names


def bounded_caches():
    """Caches of other libraries that grow with the run, each with its bound: (name, entries,
    bound, why)."""
    from matplotlib import font_manager  # pylint: disable=import-outside-toplevel
    found = []
    for name, cached, why in (
            ("fnmatch patterns", getattr(fnmatch, "_compile_pattern", None),
             "TensorFlow's Saver globs the files of each new checkpoint, a new pattern each"),
            ("matplotlib fonts", getattr(font_manager, "_get_font", None),
             "an open font file per font and thread: each panel's refresher is a thread")):
        info = getattr(cached, "cache_info", lambda: None)()
        if info is not None:
            found.append((name, info.currsize, info.maxsize, why))
    return found


def leftovers(before, after):
    """What ``after`` holds more of than ``before`` (multisets)."""
    rest = list(before)
    extra = []
    for item in after:
        if item in rest:
            rest.remove(item)
        else:
            extra.append(item)
    return extra


def logdir_sample(logdir):
    names = os.listdir(logdir)
    return {"event_files": sum(n.startswith("events.out.tfevents") for n in names),
            "ckpt_files": sum(n.startswith("model.ckpt-") for n in names),
            "checkpoints": sum(n.startswith("model.ckpt-") and n.endswith(".index")
                               for n in names)}


def history_sample(run):
    snap = run.history.snapshot()
    return {"history_points": sum(len(s.steps) for s in snap.scalars.values()),
            "history_ckpts": len(snap.checkpoints)}


def slope_per_100k(samples, field):
    """Least-squares slope of ``field`` against the step, per 100k steps."""
    xs = [s["step"] for s in samples]
    ys = [s[field] for s in samples]
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return float("nan")
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var * 100_000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--save-model-secs", type=float, default=0.2)
    parser.add_argument("--save-summaries-secs", type=float, default=0.1)
    parser.add_argument("--keep", type=int, default=5)
    parser.add_argument("--max-seconds", type=float, default=280.0,
                        help="Stop the run there if it has not reached --steps.")
    parser.add_argument("--sample-secs", type=float, default=1.0)
    parser.add_argument("--warmup", type=float, default=0.2,
                        help="Fraction of the samples left out of the slopes.")
    parser.add_argument("--clear-pattern-cache", action="store_true",
                        help="A control: empty fnmatch's pattern cache every second (TensorFlow's "
                             "Saver fills it, one pattern per checkpoint), so that what remains "
                             "of the slopes is not that cache.")
    args = parser.parse_args()

    v1.disable_eager_execution()
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_supervisor")
    model = build_model()
    ip.user_ns.update(model)

    bare_before = bare_steps_per_sec(model, 30_000)
    gc.collect()
    before = proc_sample()
    open_before = what_is_open()

    workdir = tempfile.mkdtemp(prefix="soak-")
    logdir = os.path.join(workdir, "soak")
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        ip.run_cell(f"%%supervise --logdir {logdir} --max-steps {args.steps} "
                    f"--save-model-secs {args.save_model_secs} "
                    f"--save-summaries-secs {args.save_summaries_secs} --keep {args.keep}\n"
                    + LOOP)
    run = jupyter_supervisor.get_run("soak")
    with contextlib.redirect_stdout(io.StringIO()):
        panel = Panel(run)
        panel.display()  # widgets and the refresher; no frontend receives them

    clearing_done = threading.Event()
    if args.clear_pattern_cache:
        def clear_every_second():
            while not clearing_done.wait(1.0):
                fnmatch._compile_pattern.cache_clear()  # pylint: disable=protected-access

        clearer = threading.Thread(target=clear_every_second, daemon=True)
        clearer.start()

    samples = []
    stopped_early = False
    next_sample = time.monotonic()
    while not run.wait(max(next_sample - time.monotonic(), 0)):
        next_sample += args.sample_secs
        if run.status == "running":
            sample = {"t": time.monotonic() - started, "step": run.global_step or 0}
            sample.update(proc_sample())
            sample.update(logdir_sample(logdir))
            sample.update(history_sample(run))
            samples.append(sample)
        if not stopped_early and time.monotonic() - started > args.max_seconds:
            stopped_early = True
            run.stop(wait=False)
    elapsed = time.monotonic() - started
    final_step = run.global_step
    status = run.status
    error = run.error_text
    end_files = logdir_sample(logdir)
    end_history = history_sample(run)
    clearing_done.set()
    if args.clear_pattern_cache:
        clearer.join()
    panel_renders = panel.renders
    max_points = run.history._max_points  # pylint: disable=protected-access
    panel.close()
    # The event dispatcher ends after 2 s without events; a session closes in the background.
    deadline = time.monotonic() + 30
    while any(t.name.startswith("jupyter_supervisor") for t in threading.enumerate()) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    gc.collect()
    after = proc_sample()
    open_after = what_is_open()
    bare_after = bare_steps_per_sec(model, 30_000)

    print(f"soak: {final_step:,} steps in {elapsed:.1f} s, run {status}; checkpoints every "
          f"{args.save_model_secs} s, summaries every {args.save_summaries_secs} s, "
          f"--keep {args.keep}, panel refreshing ({panel_renders} plot renders)")
    if error:
        print("error:\n" + error)
    rate = final_step / elapsed
    bare = (bare_before + bare_after) / 2
    print(f"steps/s: {rate:,.0f} supervised (whole run, panel live) vs {bare:,.0f} bare "
          f"(mean of {bare_before:,.0f} before and {bare_after:,.0f} after) = {rate / bare:.2f} "
          "of bare")
    if final_step < args.steps:
        print(f"stopped at --max-seconds {args.max_seconds:g}: {args.steps:,} steps would take "
              f"{args.steps / rate:,.0f} s here")
    summaries = args.save_summaries_secs and elapsed / args.save_summaries_secs
    checkpoints = args.save_model_secs and elapsed / args.save_model_secs
    print(f"bookkeeping done: ~{checkpoints:,.0f} checkpoints and ~{summaries:,.0f} summaries "
          f"(at the notebook defaults of 60 s / 10 s: {elapsed * 300 / 3600:,.1f} h of a "
          f"real run's checkpoints, {elapsed * 100 / 3600:,.1f} h of its summaries)")

    print("\nsamples (every ~{:g} s; a selection):".format(args.sample_secs))
    header = ("t", "step") + FIELDS
    print(" ".join(f"{h:>14}" for h in header))
    shown = samples if len(samples) <= 16 else [
        samples[round(i * (len(samples) - 1) / 15)] for i in range(16)]
    for s in shown:
        print(" ".join(f"{s[h]:>14,.1f}" if isinstance(s[h], float) else f"{s[h]:>14,}"
                       for h in header))

    steady = samples[int(len(samples) * args.warmup):]
    print(f"\nflatness over the {len(steady)} samples after the first {args.warmup:.0%} "
          f"(warm-up), from step {steady[0]['step']:,}; slope per 100k steps:")
    print(f"{'':>16}{'first':>14}{'last':>14}{'max':>14}{'slope/100k':>14}")
    for field in FIELDS:
        values = [s[field] for s in steady]
        print(f"{field:>16}{values[0]:>14,.1f}{values[-1]:>14,.1f}{max(values):>14,.1f}"
              f"{slope_per_100k(steady, field):>14,.3f}")
    tags = len(run.history.snapshot().scalars)
    print(f"\nretention: at most {max(s['checkpoints'] for s in samples)} checkpoints on disk "
          f"at a time (--keep {args.keep}; one more while a save replaces the oldest), "
          f"{end_files['checkpoints']} at the end; {end_files['event_files']} event file(s). "
          f"The history lists {end_history['history_ckpts']} checkpoints (it keeps the newest "
          f"64) and {end_history['history_points']:,} points of {tags} tags (each tag is "
          f"downsampled at {max_points:,} points: a sawtooth below {tags * max_points:,}, "
          f"reached after {max_points:,} summaries, {max_points * args.save_summaries_secs:g} s "
          "here)")
    print(f"after the run, its threads and panel.close(): threads {after['threads']} (before "
          f"the run {before['threads']}), fds {after['fds']} (before {before['fds']}), python "
          f"blocks {after['py_blocks']:,} (before {before['py_blocks']:,}), rss "
          f"{after['rss_mb']:.0f} MB (before {before['rss_mb']:.0f} MB: the first run imports "
          "and builds what later ones reuse)")
    for name, size, bound, why in bounded_caches():
        print(f"  bounded cache: {name} {size:,} entries of at most {bound:,} ({why})")
    # What the pattern cache holds, by emptying it (this process ends next): Python blocks the
    # run left behind beyond that cache and the history it still holds would be a leak.
    import fnmatch  # pylint: disable=import-outside-toplevel
    blocks = sys.getallocatedblocks()
    fnmatch._compile_pattern.cache_clear()  # pylint: disable=protected-access
    gc.collect()
    held = blocks - sys.getallocatedblocks()
    start = steady[0]["py_blocks"]
    print(f"  Python blocks: {steady[-1]['py_blocks'] - start:+,} over the steady state; after "
          f"the run ended {after['py_blocks'] - start:+,} against its start, of which fnmatch's "
          f"cache held {held:,} (emptied: {after['py_blocks'] - held - start:+,})")
    extra_fds = leftovers(open_before[0], open_after[0])
    extra_threads = leftovers(open_before[1], open_after[1])
    if extra_fds or extra_threads:
        print(f"  left open: files {extra_fds or 'none'}; threads {extra_threads or 'none'}")
    ip.run_line_magic("unload_ext", "jupyter_supervisor")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
