"""Benchmark of the panel: traffic to the browser, plot render time, memory of a long run.

Prints figures, asserts nothing. Each figure comes with a baseline measured in the same run:
- traffic: the panel's widget messages and bytes per second while a fake run reports thousands of
  steps a second, against a naive view that sets a widget on every reported step;
  and the fake run's own throughput with the panel refreshing, against without a panel;
- plot render time: PlotRenderer (one reused figure, palette PNG) against a new Figure per
  render written as full-colour PNG; and SvgRenderer (the panel's default: the browser draws),
  in CPU time of the rendering thread, against PlotRenderer;
- memory after 10^6 summary points: history + panel + renderer, against keeping every point.

Targets (issue 4): <= 10 messages/s, <= 100 KB/s, <= 20 MB and flat.

    .venv/bin/python bench/bench_panel.py [--seconds 10]
"""
import argparse
import gc
import json
import statistics
import threading
import time
import tracemalloc

import numpy as np

import comm
from comm.base_comm import BaseComm

from jupyter_supervisor import events
from jupyter_supervisor.view.history import RunHistory
from jupyter_supervisor.view.panel import Panel
from jupyter_supervisor.view.plots import PlotRenderer, SvgRenderer

TAGS = ("loss", "accuracy", "learning_rate", "grad_norm")


class Traffic:
    """Counts what widgets send to the frontend: a Comm that measures instead of sending."""

    def __init__(self):
        self.lock = threading.Lock()
        self.messages = 0
        self.bytes = 0
        self.counting = False
        traffic = self

        class CountingComm(BaseComm):
            def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
                size = len(json.dumps({"msg_type": msg_type, "data": data,
                                       "metadata": metadata}, default=str))
                size += sum(memoryview(b).nbytes for b in buffers or ())
                with traffic.lock:
                    if traffic.counting:
                        traffic.messages += 1
                        traffic.bytes += size

        comm.create_comm = lambda *a, **k: CountingComm(*a, **k)

    def start(self):
        with self.lock:
            self.messages = self.bytes = 0
            self.counting = True

    def stop(self):
        with self.lock:
            self.counting = False
            return self.messages, self.bytes


class FakeRun:
    """The duck-typed run the panel shows (see view/panel.py's docstring)."""

    def __init__(self, history, max_steps=None):
        self.name, self.logdir, self.max_steps = "bench", "/tmp/bench-logdir", max_steps
        self.role, self.master = "local", ""
        self.history = history
        self.can_stop, self.can_resume, self.can_save = True, False, True

    def stop(self, wait=False):
        pass

    def resume(self):
        pass

    def save_now(self):
        pass


def train(history, seconds, step_work=200):
    """A fake training loop reporting like a Supervisor, as fast as it can; returns steps/s.

    Every step: a little arithmetic (the "training"), note_step. Every 10 steps a summary of
    four scalars, every 100 a line of output, every second a step rate, every 3 s a checkpoint.
    """
    rng = np.random.default_rng(0)
    noise = rng.normal(size=4096)
    step = 0
    started = time.perf_counter()
    next_rate = next_checkpoint = started
    while True:
        now = time.perf_counter()
        if now - started >= seconds:
            break
        step += 1
        sum(range(step_work))
        if history is None:
            continue
        history.note_step(step)
        if step % 10 == 0:
            n = noise[step % 4096]
            decay = 1.0 / (1 + step / 1e4)
            history.on_event(events.SummaryWritten(step, {
                "loss": decay + 0.05 * n, "accuracy": 1 - decay, "learning_rate": 0.01,
                "grad_norm": abs(n)}, time.time()))
        if step % 100 == 0:
            history.append_output(f"step {step}: loss {1.0 / (1 + step / 1e4):.4f}\n")
        if now >= next_rate:
            next_rate += 1.0
            history.on_event(events.StepRate(step, step / max(now - started, 1e-9), time.time()))
        if now >= next_checkpoint:
            next_checkpoint += 3.0
            history.on_event(events.CheckpointSaved(
                step, f"/tmp/bench-logdir/model.ckpt-{step}", time.time(), 0.05))
    return step / (time.perf_counter() - started)


def bench_traffic(seconds, rounds=4):
    traffic = Traffic()
    print(f"== traffic to the frontend while a fake run reports as fast as it can "
          f"({rounds} rounds of {seconds / rounds:g} s, with the panel and without, alternated)")

    # Baseline: a view that sets a widget whenever the run reports a step.
    import ipywidgets  # pylint: disable=import-outside-toplevel
    label = ipywidgets.HTML()
    history = RunHistory()
    history.set_status("running")
    original = history.note_step

    def naive_note_step(step):
        original(step)
        label.value = f"step {step}"

    history.note_step = naive_note_step
    naive_seconds = seconds / rounds
    traffic.start()
    naive_rate = train(history, naive_seconds)
    naive_messages, naive_bytes = traffic.stop()

    # The machine is shared: alternate rounds so that both see the same load.
    bare_rates, panel_rates = [], []
    messages = sent = renders = 0
    for _ in range(rounds):
        bare_rates.append(train(RunHistory(), seconds / rounds))
        history = RunHistory()
        panel = Panel(FakeRun(history, max_steps=10 ** 9))
        panel.display()      # no kernel here: prints the text form, starts the refresher
        history.set_status("running")
        traffic.start()
        panel_rates.append(train(history, seconds / rounds))
        round_messages, round_bytes = traffic.stop()
        messages += round_messages
        sent += round_bytes
        renders += panel.renders
        panel.close()
    ratios = [p / b for p, b in zip(panel_rates, bare_rates)]
    print(f"fake run: {statistics.median(panel_rates):,.0f} steps/s with the panel refreshing, "
          f"{statistics.median(bare_rates):,.0f} without (median ratio "
          f"{statistics.median(ratios):.2f}, rounds {', '.join(f'{r:.2f}' for r in ratios)})")
    print(f"panel:    {messages / seconds:6.1f} messages/s  {sent / seconds / 1024:7.1f} KB/s  "
          f"({renders} plot renders in {seconds:g} s)    target <= 10 messages/s, <= 100 KB/s")
    print(f"naive:    {naive_messages / naive_seconds:8.1f} messages/s  "
          f"{naive_bytes / naive_seconds / 1024:7.1f} KB/s  (a widget set on every step, "
          f"{naive_rate:,.0f} steps/s)")
    print(f"ratio panel/naive: messages {messages / seconds / (naive_messages / naive_seconds):.5f}"
          f", bytes {sent / seconds / (naive_bytes / naive_seconds):.5f}")


def bench_render():
    print("== plot render time (2000 buckets per tag, median of 15)")
    history = RunHistory()
    rng = np.random.default_rng(1)
    for step in range(0, 2_000_000, 100):
        history.on_event(events.SummaryWritten(step, {
            f"tag{i:02d}": float(np.exp(-step / 5e5) + 0.1 * rng.normal()) for i in range(12)},
            0.0))
    scalars = history.snapshot().scalars
    for count in (1, 4, 12):
        tags = sorted(scalars)[:count]
        renderer = PlotRenderer()
        renderer.render(scalars, tags)
        times, sizes = [], []
        for _ in range(15):
            started = time.perf_counter()
            png = renderer.render(scalars, tags)
            times.append(time.perf_counter() - started)
            sizes.append(len(png))

        def fresh():
            started = time.perf_counter()
            baseline = PlotRenderer(colours=0)      # a new Figure, full-colour PNG
            return baseline.render(scalars, tags), time.perf_counter() - started

        base = [fresh() for _ in range(5)]
        base_time = statistics.median(t for _, t in base)
        base_size = statistics.median(len(p) for p, _ in base)
        ours, size = statistics.median(times), statistics.median(sizes)
        print(f"{count:2d} tags: {ours * 1000:6.1f} ms, {size / 1024:5.1f} KB"
              f"   new figure each time: {base_time * 1000:6.1f} ms, {base_size / 1024:5.1f} KB"
              f"   ratio time {ours / base_time:.2f}, size {size / base_size:.2f}")
        svg, png_cpu = SvgRenderer(), []
        svg_cpu, svg_sizes = [], []
        for _ in range(15):     # CPU time: what the render takes from the kernel's cores
            started = time.thread_time()
            svg_sizes.append(len(svg.render(scalars, tags).encode()))
            svg_cpu.append(time.thread_time() - started)
            started = time.thread_time()
            renderer.render(scalars, tags)
            png_cpu.append(time.thread_time() - started)
        svg_time, png_time = statistics.median(svg_cpu), statistics.median(png_cpu)
        print(f"         SVG (browser draws): {svg_time * 1000:5.2f} ms CPU, "
              f"{statistics.median(svg_sizes) / 1024:5.1f} KB   PNG: {png_time * 1000:6.1f} ms CPU"
              f"   ratio CPU SVG/PNG {svg_time / png_time:.3f}")


def bench_memory(points):
    print("== memory of history + panel + renderer as summary points arrive (tracemalloc)")
    # Import-time and first-render allocations are not the run's: do them before tracing.
    warm = Panel(FakeRun(RunHistory()))
    warm.tick(force=True)
    warm.close()
    gc.collect()
    tracemalloc.start()
    history = RunHistory()
    run = FakeRun(history, max_steps=points)
    panel = Panel(run)
    history.set_status("running")
    per_event = len(TAGS)
    marks = {points // 100, points // 10, points // 2, points}
    step = 0
    fed = 0
    readings = []
    while fed < points:
        step += 1
        history.on_event(events.SummaryWritten(step, {tag: float(step % 97) for tag in TAGS},
                                               0.0))
        history.append_output(f"step {step}\n")
        fed += per_event
        if any(fed - per_event < mark <= fed for mark in marks):
            panel.tick(force=True)
            gc.collect()
            readings.append((fed, tracemalloc.get_traced_memory()[0]))
    panel.close()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    for fed, current in readings:
        print(f"{fed:>10,} points: {current / 2**20:6.2f} MB")
    print(f"peak {peak / 2**20:.2f} MB    target <= 20 MB, flat")

    tracemalloc.start()
    every = [(s, float(s % 97)) for s in range(points)]
    baseline = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del every
    print(f"baseline, every point kept as (step, value): {baseline / 2**20:.2f} MB;  "
          f"ratio {readings[-1][1] / baseline:.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0,
                        help="how long the fake run trains with the panel (default 12)")
    parser.add_argument("--points", type=int, default=1_000_000,
                        help="summary points for the memory figure (default 10^6)")
    args = parser.parse_args()
    bench_traffic(args.seconds)
    bench_render()
    bench_memory(args.points)


if __name__ == "__main__":
    main()
