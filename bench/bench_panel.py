"""Benchmark of the panel: what it costs the kernel and sends to the browser, the message a view
opening on a long run gets, and how long the browser takes to draw it.

Prints figures, asserts nothing. Each figure has baselines measured in the same run:
- no panel (the same fake run and history, nothing displayed);
- the former panel (the package as of BASELINE_REV, read from git into a temporary folder and
  run in a subprocess): HTML widgets whose plots the kernel rendered as SVG.

Figures (targets of issue 25):
- kernel CPU: the refresher thread's CPU clock per second, while a fake run reports 12 tags every
  second, its step twice a second and a Keras-like Progress twice a second: <= 0.2 % of a core;
- traffic to the browser: widget messages/s and KB/s: <= 10 messages/s, <= 20 KB/s;
- the full-series message a view gets when it opens on a 10^6-step run of 12 tags: <= 1 MB
  (the former panel: the state of its widgets, plots included);
- the time Chromium takes to draw it (the front end's module on a page of its own, driven with
  a stand-in for anywidget's model; the former panel: its SVG put into the page), layout
  included: <= 200 ms;
- memory of history + panel after 10^6 summary points: flat, <= 20 MB.

    .venv/bin/python bench/bench_panel.py [--seconds 20]
"""
import argparse
import base64
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc

# The package as it was before the panel became a client-side view.
BASELINE_REV = "c7d81d2"
TAGS = tuple(f"tag{i:02d}" for i in range(12))
CHROMIUM = "/usr/bin/chromium"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Traffic:
    """Counts what widgets send to the frontend: a Comm that measures instead of sending."""

    def __init__(self):
        import comm  # pylint: disable=import-outside-toplevel
        from comm.base_comm import BaseComm  # pylint: disable=import-outside-toplevel

        self.lock = threading.Lock()
        self.messages = 0
        self.bytes = 0
        self.counting = False
        self.last = None
        traffic = self

        class CountingComm(BaseComm):
            def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
                size = len(json.dumps({"msg_type": msg_type, "data": data,
                                       "metadata": metadata}, default=str))
                size += sum(memoryview(b).nbytes for b in buffers or ())
                with traffic.lock:
                    traffic.last = (data, buffers)
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
    """The run the panel shows (what view/text.py's PanelRun declares)."""

    class config:  # pylint: disable=invalid-name,too-few-public-methods
        init_fn = None

    def __init__(self, history, max_steps=None):
        self.name, self.logdir, self.max_steps = "bench", "/tmp/bench-logdir", max_steps
        self.role, self.role_text, self.master = "local", "", ""
        self.history = history
        self.can_stop, self.can_resume, self.can_save = True, False, True

    def stop(self, wait=False):
        pass

    def resume(self):
        pass

    def save_now(self):
        pass


def _set_running(history):
    try:
        history.set_status("running", active=True)
    except TypeError:  # the former history: set_status(status)
        history.set_status("running")


def _thread_cpu(thread) -> float:
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def report(history, stop, steps_per_sec=1000):
    """A fake run's reports: its step twice a second, a Keras-like Progress twice a second,
    12 tags every second, a line of output every second, a checkpoint every 10 s."""
    from jupyter_supervisor import events  # pylint: disable=import-outside-toplevel
    started = time.monotonic()
    tick = 0
    while not stop.wait(0.5):
        tick += 1
        step = int((time.monotonic() - started) * steps_per_sec)
        history.note_step(step)
        progress = getattr(events, "Progress", None)
        if progress is not None:
            history.on_event(progress(step, step // 1000, 100, step % 1000, 1000, {}, time.time()))
        if tick % 2 == 0:
            history.on_event(events.SummaryWritten(
                step, {tag: 1.0 / (1 + step / 1e4) + i for i, tag in enumerate(TAGS)},
                time.time()))
            history.append_output(f"step {step}: loss {1.0 / (1 + step / 1e4):.4f}\n")
        if tick % 20 == 0:
            history.on_event(events.CheckpointSaved(
                step, f"/tmp/bench-logdir/model.ckpt-{step}", time.time(), 0.05))


def measure_live(seconds):
    """The panel's refresher CPU and traffic while a fake run reports (see report)."""
    from jupyter_supervisor.view.history import RunHistory  # pylint: disable=C0415
    from jupyter_supervisor.view.panel import Panel  # pylint: disable=C0415
    traffic = Traffic()
    history = RunHistory()
    _set_running(history)
    panel = Panel(FakeRun(history, max_steps=10 ** 9))
    panel.display()          # no kernel here: prints the text form, starts the refresher
    refresher = panel._thread  # pylint: disable=protected-access
    stop = threading.Event()
    reporter = threading.Thread(target=report, args=(history, stop))
    reporter.start()
    time.sleep(2.0)          # warm-up: the first series and state are sent
    traffic.start()
    cpu0, wall0 = _thread_cpu(refresher), time.monotonic()
    time.sleep(seconds)
    cpu1, wall1 = _thread_cpu(refresher), time.monotonic()
    messages, sent = traffic.stop()
    stop.set()
    reporter.join()
    panel.close()
    wall = wall1 - wall0
    return {"cpu_share": (cpu1 - cpu0) / wall, "messages_per_s": messages / wall,
            "kb_per_s": sent / wall / 1024}


def long_history():
    """A 10^6-step run's history: 12 tags summarized every 10 steps."""
    from jupyter_supervisor import events  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.view.history import RunHistory  # pylint: disable=C0415
    history = RunHistory()
    for step in range(0, 1_000_000, 10):
        history.on_event(events.SummaryWritten(
            step, {tag: 1.0 / (1 + step / 1e4) + 0.01 * ((step * 7919) % 101) + i
                   for i, tag in enumerate(TAGS)}, 1.7e9 + step / 100))
    return history


def measure_open_new(history):
    """What a view opening on ``history`` gets: the answer to its first request, holding
    nothing (JSON + buffer)."""
    from jupyter_supervisor.view.widget import SeriesFeed  # pylint: disable=C0415
    parts, buffer = SeriesFeed.answer({"bench": history.snapshot().scalars}, {})
    content = {"type": "answer", "id": 1, "parts": parts}
    return {"bytes": len(json.dumps(content)) + len(buffer), "content": content,
            "buffer": base64.b64encode(buffer).decode()}


def measure_open_old(history):
    """The former panel: the state of every widget (a view that opens fetches all of it),
    its SVG plots of the first six tags included."""
    from jupyter_supervisor.view.panel import Panel  # pylint: disable=C0415
    panel = Panel(FakeRun(history, max_steps=10 ** 6))
    panel.tick(force=True)
    size, svg = 0, ""
    for widget in panel.widgets.values():
        state = widget.get_state()
        size += len(json.dumps(state, default=str))
        value = state.get("value")
        if isinstance(value, str) and value.startswith("<svg"):
            svg = value
    panel.close()
    return {"bytes": size, "svg": svg}


# -- drawing in Chromium -------------------------------------------------------------------

PAGE_NEW = """
<html><head><style>%s</style></head>
<body style="width:1200px"><div id="root"></div><script type="module">
const module = await import("data:text/javascript;base64,%s");
const handlers = {};
const state = {state: {}, settings: {}, compare: false, runs: ["bench"]};
const model = {get: (k) => state[k], on: (e, f) => { (handlers[e] ||= []).push(f); },
               off: () => {}, send: () => {}};
module.default.render({model, el: document.getElementById("root")});
window.drawSeries = (content, base64Buffer) => {
  const bytes = Uint8Array.from(atob(base64Buffer), (c) => c.charCodeAt(0));
  const started = performance.now();
  for (const f of handlers["msg:custom"]) f(content, [new DataView(bytes.buffer)]);
  document.body.getBoundingClientRect();
  return performance.now() - started;
};
window.ready = true;
</script></body></html>
"""


def measure_draw(new, old_svg, repeats=5):
    """Milliseconds Chromium takes to draw the full series (median of ``repeats``, each on a
    fresh page): the panel's front end from the message, and the former panel's SVG put into a page."""
    from playwright.sync_api import sync_playwright  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.view import widget  # pylint: disable=import-outside-toplevel
    esm = widget._esm().encode()  # pylint: disable=protected-access
    page_new = PAGE_NEW % (widget._css(), base64.b64encode(esm).decode())  # pylint: disable=W0212
    new_ms, old_ms, points = [], [], 0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run"])
        for _ in range(repeats):
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_content(page_new)
            page.wait_for_function("() => window.ready === true")
            new_ms.append(page.evaluate("([c, b]) => drawSeries(c, b)",
                                        [new["content"], new["buffer"]]))
            points = page.evaluate("() => Array.from(document.querySelectorAll('.jsv-chart'))"
                                   ".reduce((n, e) => n + Number(e.dataset.points), 0)")
            page.close()
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_content("<html><body><div id='root'></div></body></html>")
            old_ms.append(page.evaluate("""(svg) => {
                const started = performance.now();
                document.getElementById('root').innerHTML = svg;
                document.body.getBoundingClientRect();
                return performance.now() - started; }""", old_svg))
            page.close()
        browser.close()
    return sorted(new_ms)[len(new_ms) // 2], sorted(old_ms)[len(old_ms) // 2], points


def measure_memory(points):
    """Traced memory of history + panel after ``points`` summary points (4 tags)."""
    from jupyter_supervisor import events  # pylint: disable=import-outside-toplevel
    from jupyter_supervisor.view.history import RunHistory  # pylint: disable=C0415
    from jupyter_supervisor.view.panel import Panel  # pylint: disable=C0415
    warm = Panel(FakeRun(RunHistory()))
    warm.tick(force=True)
    warm.close()
    gc.collect()
    tracemalloc.start()
    history = RunHistory()
    panel = Panel(FakeRun(history, max_steps=points))
    readings, step, fed = [], 0, 0
    marks = {points // 100, points // 10, points}
    while fed < points:
        step += 1
        history.on_event(events.SummaryWritten(step, {t: float(step % 97) for t in TAGS[:4]},
                                               0.0))
        history.append_output(f"step {step}\n")
        fed += 4
        if any(fed - 4 < mark <= fed for mark in marks):
            panel.tick(force=True)
            gc.collect()
            readings.append((fed, tracemalloc.get_traced_memory()[0]))
    panel.close()
    tracemalloc.stop()
    return readings


def measure_in_package(package_dir, seconds):
    """Runs this file's ``--measure`` in a subprocess importing the package from
    ``package_dir``; its figures as a dict."""
    env = dict(os.environ, PYTHONPATH=package_dir)
    out = subprocess.run([sys.executable, __file__, "--measure", "--seconds", str(seconds)],
                         env=env, cwd=package_dir, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(seconds):
    """This process's package: live cost, and the open message (as JSON on the last line)."""
    import jupyter_supervisor.view.panel as panel  # pylint: disable=import-outside-toplevel
    live = measure_live(seconds)
    history = long_history()
    if hasattr(panel, "Comparison"):   # the client-side view
        opened = measure_open_new(history)
    else:
        opened = measure_open_old(history)
    print(json.dumps({"live": live, "open": opened}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="how long the live cost is measured (default 20)")
    parser.add_argument("--points", type=int, default=1_000_000,
                        help="summary points for the memory figure (default 10^6)")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.seconds)
        return
    with tempfile.TemporaryDirectory(prefix="bench_panel-") as old_dir:
        archive = subprocess.run(["git", "archive", BASELINE_REV, "jupyter_supervisor"],
                                 cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", old_dir], input=archive, check=True)
        old = measure_in_package(old_dir, args.seconds)
    new = measure_in_package(ROOT, args.seconds)
    print(f"== live: 12 tags every 1 s, step and progress twice a second, {args.seconds:g} s")
    for name, figures in (("panel", new["live"]), (f"former panel ({BASELINE_REV})", old["live"])):
        print(f"{name:28s} kernel CPU {figures['cpu_share'] * 100:6.3f} % of a core   "
              f"{figures['messages_per_s']:5.1f} messages/s   {figures['kb_per_s']:6.2f} KB/s")
    print("no panel                     kernel CPU  0.000 % of a core       0 messages/s"
          "     0 KB/s")
    print(f"ratio panel/former: CPU {new['live']['cpu_share'] / old['live']['cpu_share']:.2f}, "
          f"messages {new['live']['messages_per_s'] / old['live']['messages_per_s']:.2f}, "
          f"bytes {new['live']['kb_per_s'] / old['live']['kb_per_s']:.2f}   "
          "(targets: <= 0.2 % of a core, <= 10 messages/s, <= 20 KB/s)")
    print("== a view opening on a 10^6-step run of 12 tags")
    new_ms, old_ms, points = measure_draw(new["open"], old["open"]["svg"])
    print(f"panel: one message of {new['open']['bytes'] / 1e6:.3f} MB ({points:,} points), "
          f"drawn in {new_ms:.1f} ms in Chromium")
    print(f"former panel: widget state of {old['open']['bytes'] / 1e6:.3f} MB (6 plots as SVG), "
          f"its SVG laid out in {old_ms:.1f} ms")
    print(f"ratio panel/former: size {new['open']['bytes'] / old['open']['bytes']:.2f}, "
          f"draw time {new_ms / old_ms:.2f}   (targets: <= 1 MB, <= 200 ms)")
    print("== memory of history + panel as summary points arrive (tracemalloc)")
    for fed, current in measure_memory(args.points):
        print(f"{fed:>10,} points: {current / 2**20:6.2f} MB")


if __name__ == "__main__":
    main()
