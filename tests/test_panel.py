"""Panel: widget states driven by a real RunHistory, throttling on an injected clock, the
refresher thread, the text fallback, and show() in a real kernel."""
import collections
import html.parser
import os
import queue
import textwrap
import threading
import time

import pytest

from jupyter_supervisor import events
from jupyter_supervisor.view import panel as panel_module
from jupyter_supervisor.view.history import RunHistory
from jupyter_supervisor.view.panel import Panel, show, text_status, text_summary

from helpers import FakeClock, run_isolated


class FakeRun:
    """The attributes and methods of a TrainingRun that the panel reads (its module docstring
    lists them), and nothing else."""

    def __init__(self, history, *, name="mnist", logdir="/logs/mnist", max_steps=None,
                 role="local", master=""):
        self.name = name
        self.logdir = logdir
        self.max_steps = max_steps
        self.role = role
        self.master = master
        self.history = history
        self.exception = None
        self.can_stop = True
        self.can_resume = False
        self.can_save = True
        self.calls = []
        self.failures = {}      # method name -> exception it raises

    @property
    def status(self):
        return self.history.snapshot().status

    @property
    def global_step(self):
        return self.history.snapshot().step

    def _call(self, name, *args):
        self.calls.append((name,) + args)
        if name in self.failures:
            raise self.failures[name]

    def stop(self, wait=False):
        self._call("stop", wait)

    def resume(self):
        self._call("resume")

    def save_now(self):
        self._call("save_now")


class _Texts(html.parser.HTMLParser):
    """Text and attributes of the elements carrying a CSS class, in an HTML fragment."""

    def __init__(self):
        super().__init__()
        self.open = []          # [(tag, classes, attrs, text parts)]
        self.found = collections.defaultdict(list)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.open.append((tag, (attrs.get("class") or "").split(), attrs, []))

    def handle_endtag(self, tag):
        while self.open:
            name, classes, attrs, parts = self.open.pop()
            text = "".join(parts)
            for css_class in classes:
                self.found[css_class].append((text, attrs))
            if self.open:
                self.open[-1][3].append(text)
            if name == tag:
                return

    def handle_data(self, data):
        if self.open:
            self.open[-1][3].append(data)


def parts(fragment):
    parser = _Texts()
    parser.feed(fragment)
    parser.close()
    return parser.found


def text_of(widget, css_class):
    found = parts(widget.value)[css_class]
    assert found, f"no .{css_class} in {widget.value!r}"
    return found[0][0]


def attr_of(widget, css_class, name):
    return parts(widget.value)[css_class][0][1].get(name)


@pytest.fixture
def clock():
    return FakeClock(100.0)


@pytest.fixture
def make_panel(clock):
    panels = []

    def make(run=None, **kwargs):
        run = run or FakeRun(RunHistory(clock=clock), max_steps=1000)
        kwargs.setdefault("wall_clock", lambda: 1_000_000.0 + clock.now)
        panel = Panel(run, clock=clock, **kwargs)
        panels.append(panel)
        return panel, run

    yield make
    for panel in panels:
        panel.close()


Message = collections.namedtuple("Message", "thread comm_id msg_type data buffers")


@pytest.fixture
def comm_log(monkeypatch):
    """Every message the widgets send to the frontend, through a Comm that records them."""
    import comm
    from comm.base_comm import BaseComm

    log = []

    class RecordingComm(BaseComm):
        def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
            log.append(Message(threading.current_thread().name, self.comm_id, msg_type, data,
                               buffers))

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: RecordingComm(*a, **k))
    return log


def updates(log, widget=None):
    return [m for m in log if m.msg_type == "comm_msg" and m.data.get("method") == "update"
            and (widget is None or m.comm_id == widget.comm.comm_id)]


def feed_training(history, clock, steps, every=10, seconds_per_step=0.125):
    """What a Supervisor reports while training: steps, a summary every ``every`` steps."""
    for step in steps:
        clock.now += seconds_per_step
        history.note_step(step)
        if step % every == 0:
            history.on_event(events.SummaryWritten(step, {"loss": 1.0 / step}, clock.now))


# -- widget states -----------------------------------------------------------------------------


def test_widget_states_follow_the_events_of_a_run(make_panel, clock):
    panel, run = make_panel()
    history = run.history
    w = panel.widgets
    assert text_of(w["header"], "jsv-name") == "mnist"
    assert text_of(w["header"], "jsv-status") == "starting"
    assert text_of(w["header"], "jsv-step") == "-"
    assert "No checkpoint yet" in w["checkpoint"].value
    assert w["plot"].layout.display == "none" and w["plot"].value == ""
    assert (w["stop"].disabled, w["resume"].disabled, w["save"].disabled) == (False, True, False)

    history.on_event(events.SessionReady(step=0, restored_from=None, is_chief=True,
                                         wall_time=1_000_000.0))
    history.set_status("running")
    feed_training(history, clock, range(1, 101))          # 100 steps in 12.5 s
    history.on_event(events.CheckpointSaved(step=100, path="/logs/mnist/model.ckpt-100",
                                            wall_time=1_000_000.0 + clock.now - 25,
                                            seconds=0.42))
    assert panel.tick()
    assert "jsv-status-running" in attr_of(w["header"], "jsv-status", "class")
    assert text_of(w["header"], "jsv-step") == "100"
    assert attr_of(w["header"], "jsv-step", "data-step") == "100"
    assert text_of(w["header"], "jsv-rate") == "8.0 steps/s"
    assert text_of(w["header"], "jsv-elapsed") == "12 s"
    assert attr_of(w["header"], "jsv-progress", "data-fraction") == "0.100"
    assert text_of(w["header"], "jsv-eta") == "ETA 1 min 52 s"         # 900 steps at 8/s
    assert text_of(w["checkpoint"], "jsv-checkpoint-step") == "100"
    assert "20 s ago" in w["checkpoint"].value and "written in 0.42 s" in w["checkpoint"].value
    assert w["plot"].layout.display == "" and w["plot"].value.startswith("<svg")
    assert parts(w["plot"].value)["jsv-plot-title"][0][0] == "loss = 0.01  (step 100)"
    assert w["output"].value == "" and w["error"].value == ""

    history.append_output("epoch 1\nloss 0.5\n")
    clock.now += 1
    panel.tick()
    assert "epoch 1\nloss 0.5" in w["output"].value

    history.set_error("Traceback (most recent call last):\n  File \"<cell>\", line 3\n"
                      "ZeroDivisionError: division by zero\n")
    history.set_status("failed")
    run.can_stop, run.can_resume, run.can_save = False, True, False
    clock.now += 1
    panel.tick()
    assert text_of(w["header"], "jsv-status") == "failed"
    assert "jsv-rate" not in parts(w["header"].value)         # no rate field once it ended
    assert text_of(w["header"], "jsv-eta") == ""
    assert "ZeroDivisionError: division by zero" in w["error"].value
    assert "File &quot;&lt;cell&gt;&quot;, line 3" in w["error"].value   # escaped, not HTML
    assert (w["stop"].disabled, w["resume"].disabled, w["save"].disabled) == (True, False, True)


def test_every_part_has_its_stable_css_class(make_panel, clock):
    panel, run = make_panel()
    run.history.set_status("running")
    feed_training(run.history, clock, range(1, 21))
    panel.tick(force=True)
    w = panel.widgets
    classes = set()
    for widget in w.values():
        classes.update(widget._dom_classes)
        if hasattr(widget, "value") and isinstance(widget.value, str):
            classes.update(parts(widget.value))
    for css_class in ("jsv-panel", "jsv-status", "jsv-step", "jsv-rate", "jsv-progress",
                      "jsv-eta", "jsv-checkpoint", "jsv-plot", "jsv-output", "jsv-error",
                      "jsv-stop", "jsv-resume", "jsv-save", "jsv-warning"):
        assert css_class in classes, css_class


def test_no_progress_bar_without_max_steps(make_panel, clock):
    panel, _run = make_panel(FakeRun(RunHistory(clock=clock), max_steps=None))
    assert "jsv-progress" not in panel.widgets["header"].value


def test_checkpoints_kept_are_what_the_saver_keeps(make_panel, clock, tmp_path):
    import tensorflow as tf
    logdir = str(tmp_path)
    paths, kept = [], []
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        increment = tf.compat.v1.assign_add(step, 10)
        saver = tf.compat.v1.train.Saver(max_to_keep=2)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                value = sess.run(increment)
                paths.append(saver.save(sess, os.path.join(logdir, "model.ckpt"),
                                        global_step=value))
                kept.append(tuple(reversed(saver.last_checkpoints)))
    panel, run = make_panel(FakeRun(RunHistory(clock=clock), logdir=logdir))
    for i, path in enumerate(paths):
        run.history.on_event(events.CheckpointSaved(step=10 * (i + 1), path=path,
                                                    wall_time=1_000_000.0, seconds=0.1,
                                                    kept=kept[i]))
    clock.now += 1
    panel.tick()
    assert text_of(panel.widgets["checkpoint"], "jsv-kept") == "kept (2): 30, 20"


def test_a_restored_run_says_where_it_came_from(make_panel, clock):
    panel, run = make_panel()
    run.history.on_event(events.SessionReady(step=400, restored_from="/logs/mnist/model.ckpt-400",
                                             is_chief=True, wall_time=0.0))
    clock.now += 1
    panel.tick()
    assert text_of(panel.widgets["checkpoint"], "jsv-restored") == "model.ckpt-400"
    # Also once it saved again: where the session started stays on the line.
    run.history.on_event(events.CheckpointSaved(step=500, path="/logs/mnist/model.ckpt-500",
                                                wall_time=1_000_000.0, seconds=0.1))
    clock.now += 1
    panel.tick()
    assert text_of(panel.widgets["checkpoint"], "jsv-restored") == "model.ckpt-400"
    assert text_of(panel.widgets["checkpoint"], "jsv-checkpoint-step") == "500"


def test_a_fresh_session_says_it_was_initialized(make_panel, clock):
    panel, run = make_panel()
    run.history.set_status("starting")
    clock.now += 1
    panel.tick()
    assert "jsv-restored" not in parts(panel.widgets["checkpoint"].value)
    run.history.on_event(events.SessionReady(step=0, restored_from=None, is_chief=True,
                                             wall_time=0.0))
    clock.now += 1
    panel.tick()
    assert text_of(panel.widgets["checkpoint"], "jsv-restored") == "initialized"


def test_the_rate_says_measuring_until_there_is_one(make_panel, clock):
    panel, run = make_panel()
    run.history.set_status("running")
    clock.now += 1
    panel.tick()
    assert text_of(panel.widgets["header"], "jsv-rate") == "measuring…"


def test_a_keras_fit_shows_its_epoch_batch_and_eta(make_panel, clock):
    panel, run = make_panel(FakeRun(RunHistory(clock=clock), max_steps=None))
    run.history.set_status("running")
    for second in range(1, 4):
        clock.now += 1.0
        run.history.note_step(10 * second)                # 10 steps/s
    run.history.on_event(events.Progress(step=30, epoch=1, epochs=5, batch=10, batches=20,
                                         scalars={"loss": 0.5}, wall_time=0.0))
    clock.now += 1
    panel.tick()
    header = panel.widgets["header"]
    assert text_of(header, "jsv-fit") == "epoch 2/5, batch 10/20"
    assert attr_of(header, "jsv-progress", "data-fraction") == "0.300"  # 30 of 100 batches
    assert text_of(header, "jsv-eta") == "ETA 7 s"                       # 70 batches at 10/s


def test_without_a_logdir_the_panel_warns_that_nothing_is_saved(make_panel, clock):
    panel, _run = make_panel(FakeRun(RunHistory(clock=clock), logdir=None))
    warning = panel.widgets["warning"]
    assert warning.layout.display != "none"
    assert "nothing is saved" in warning.value
    assert panel.widgets["checkpoint"].value == ""
    panel, _run = make_panel(FakeRun(RunHistory(clock=clock), logdir="/logs"))
    assert panel.widgets["warning"].layout.display == "none"


def test_replicas_show_role_and_master(make_panel, clock):
    run = FakeRun(RunHistory(clock=clock), logdir=None, role="worker",
                  master="grpc://localhost:2223")
    panel, _run = make_panel(run)
    assert text_of(panel.widgets["header"], "jsv-role") == "worker on grpc://localhost:2223"
    assert "the chief writes" in panel.widgets["warning"].value
    run.history.on_event(events.WaitingForChief(master="grpc://localhost:2222", wall_time=0.0))
    clock.now += 1
    panel.tick()
    assert text_of(panel.widgets["header"], "jsv-status") == "waiting for chief"


def test_output_shows_its_tail_as_a_terminal_would(make_panel, clock):
    panel, run = make_panel()
    run.history.append_output("".join(f"line {i}\n" for i in range(100)))
    run.history.append_output("progress 10%\rprogress 50%\rprogress 100%\n<b>not bold</b>\n")
    clock.now += 1
    panel.tick()
    value = panel.widgets["output"].value
    assert "line 99" in value and "line 10\n" not in value
    assert "progress 100%" in value and "progress 50%" not in value
    assert "&lt;b&gt;not bold&lt;/b&gt;" in value


# -- buttons -----------------------------------------------------------------------------------


def test_buttons_call_the_run_and_follow_its_flags(make_panel, clock):
    panel, run = make_panel()
    w = panel.widgets
    w["stop"].click()
    w["save"].click()
    assert run.calls == [("stop", False), ("save_now",)]
    run.can_stop, run.can_resume = False, True
    panel.tick()                     # a click forces the next refresh, however soon
    assert w["stop"].disabled and not w["resume"].disabled
    w["resume"].click()
    assert run.calls[-1] == ("resume",)


def test_a_failing_button_is_shown_not_raised(make_panel, clock):
    panel, run = make_panel()
    run.failures["save_now"] = RuntimeError("no saver: the run has no logdir")
    panel.widgets["save"].click()                       # must not raise
    panel.tick()
    assert "Save failed: RuntimeError: no saver: the run has no logdir" in \
        panel.widgets["message"].value
    del run.failures["save_now"]
    panel.widgets["save"].click()
    panel.tick()
    assert panel.widgets["message"].value == ""


# -- throttling --------------------------------------------------------------------------------


def test_refreshes_are_throttled_by_the_clock(make_panel, clock):
    panel, run = make_panel(interval=0.25, plot_interval=1.0)
    history = run.history
    history.set_status("running")
    clock.now += 1
    assert panel.tick()
    history.note_step(5)
    clock.now += 0.1
    assert not panel.tick()                             # too soon: nothing changes
    assert text_of(panel.widgets["header"], "jsv-step") == "-"
    clock.now += 0.15
    assert panel.tick()
    assert text_of(panel.widgets["header"], "jsv-step") == "5"


def test_plots_render_at_most_once_a_second_and_only_with_new_points(make_panel, clock):
    panel, run = make_panel(interval=0.25, plot_interval=1.0)
    history = run.history
    renders = panel.renders
    history.on_event(events.SummaryWritten(1, {"loss": 1.0}, 0.0))
    clock.now += 0.25
    panel.tick()
    assert panel.renders == renders + 1
    for i in range(2, 5):                               # new points every quarter second
        history.on_event(events.SummaryWritten(i, {"loss": 1.0 / i}, 0.0))
        clock.now += 0.25
        panel.tick()
        assert panel.renders == renders + 1
    history.on_event(events.SummaryWritten(5, {"loss": 0.2}, 0.0))
    clock.now += 0.25                                   # one second after the first render
    panel.tick()
    assert panel.renders == renders + 2
    for _ in range(8):                                  # no new points: no render
        history.note_step(6)
        clock.now += 0.5
        panel.tick()
    assert panel.renders == renders + 2


class CpuClock:
    """A CPU clock for the renders: each render costs ``cost`` seconds (two readings)."""

    def __init__(self, cost):
        self.cost = cost
        self.readings = 0

    def __call__(self):
        self.readings += 1
        return (self.readings // 2) * self.cost


def test_a_render_is_skipped_while_the_budget_says_so(make_panel, clock):
    # A render costing 50 ms of CPU with a 1 % budget: the next one waits 5 s, not 1 s.
    panel, run = make_panel(plot_interval=1.0, render_budget=0.01, cpu_clock=CpuClock(0.05))
    history = run.history
    history.on_event(events.SummaryWritten(1, {"loss": 1.0}, 0.0))
    clock.now += 1
    panel.tick()
    assert panel.renders == 1 and panel.render_cpu == pytest.approx(0.05)
    for step in range(2, 20):                           # new points every quarter second
        history.on_event(events.SummaryWritten(step, {"loss": 1.0 / step}, 0.0))
        clock.now += 0.25
        panel.tick()
        assert panel.renders == 1, f"rendered {clock.now - 101:.2f} s after the first"
    history.on_event(events.SummaryWritten(20, {"loss": 0.05}, 0.0))
    clock.now += 0.6                                    # 5.1 s after the first render
    panel.tick()
    assert panel.renders == 2
    assert "loss = 0.05" in panel.widgets["plot"].value  # the newest points, none lost


def test_a_cheap_render_is_paced_by_the_plot_interval_alone(make_panel, clock):
    panel, run = make_panel(plot_interval=1.0, render_budget=0.01, cpu_clock=CpuClock(0.002))
    for step in range(1, 13):                           # 3 s of new points
        run.history.on_event(events.SummaryWritten(step, {"loss": 1.0 / step}, 0.0))
        clock.now += 0.25
        panel.tick()
    assert panel.renders == 3


def test_a_png_renderer_still_fills_an_image(make_panel, clock):
    from jupyter_supervisor.view import plots
    panel, run = make_panel(renderer=plots.PlotRenderer())
    run.history.on_event(events.SummaryWritten(1, {"loss": 1.0}, 0.0))
    clock.now += 1
    panel.tick()
    assert bytes(panel.widgets["plot"].value).startswith(b"\x89PNG")


@pytest.mark.parametrize("value", [0, -0.5, True, "1"])
def test_a_bad_render_budget_is_refused(value):
    with pytest.raises(ValueError, match="render_budget"):
        Panel(FakeRun(RunHistory()), render_budget=value)


def test_an_unchanged_run_sends_nothing_and_a_change_one_message(comm_log, make_panel, clock):
    panel, run = make_panel()
    run.history.set_status("stopped")                   # elapsed no longer moves
    clock.now += 1
    panel.tick()
    before = len(comm_log)
    for _ in range(20):
        clock.now += 0.6
        panel.tick()
    assert len(comm_log) == before
    run.history.note_step(42)
    clock.now += 0.6
    panel.tick()
    sent = comm_log[before:]
    assert [(m.comm_id, m.msg_type) for m in sent] == [
        (panel.widgets["header"].comm.comm_id, "comm_msg")]
    assert 'data-step="42"' in sent[0].data["state"]["value"]


def test_many_tags_get_a_selector(make_panel, clock):
    panel, run = make_panel()
    tags = [f"tag{i:02d}" for i in range(10)]
    run.history.on_event(events.SummaryWritten(1, {tag: 1.0 for tag in tags}, 0.0))
    clock.now += 1
    panel.tick()
    selector = panel.widgets["tags"]
    assert selector.layout.display == ""
    assert list(selector.options) == tags
    assert list(selector.value) == tags[:panel_module.MAX_PLOTS]
    plotted = [attrs["data-tag"] for _text, attrs in
               parts(panel.widgets["plot"].value)["jsv-plot-axes"]]
    assert plotted == tags[:panel_module.MAX_PLOTS]
    renders = panel.renders
    selector.value = ("tag07", "tag09")                 # as the frontend would set it
    clock.now += 1
    panel.tick()
    assert panel.renders == renders + 1
    assert [attrs["data-tag"] for _text, attrs in
            parts(panel.widgets["plot"].value)["jsv-plot-axes"]] == ["tag07", "tag09"]


# -- the refresher thread ----------------------------------------------------------------------


def test_only_the_refresher_touches_widgets_while_a_run_trains(comm_log, wait_for, capsys):
    history = RunHistory()
    run = FakeRun(history, max_steps=100_000)
    panel = Panel(run, interval=0.05, plot_interval=0.2)
    try:
        panel.display()
        displayed = len(comm_log)
        assert capsys.readouterr().out.startswith("mnist: starting")   # no frontend: text
        history.set_status("running")
        done = threading.Event()

        def train():
            step = 0
            while not done.is_set():
                step += 1
                history.note_step(step)
                if step % 50 == 0:
                    history.on_event(events.SummaryWritten(step, {"loss": 1.0 / step}, 0.0))

        trainer = threading.Thread(target=train, name="training")
        trainer.start()
        try:
            wait_for(lambda: panel.renders >= 2, timeout=30, what="two plot renders")
            wait_for(lambda: int(attr_of(panel.widgets["header"], "jsv-step", "data-step")
                                 or 0) > 1000, timeout=30, what="the step in the header")
        finally:
            done.set()
            trainer.join(timeout=30)
        sent_by = {m.thread for m in comm_log[displayed:]}
        assert sent_by and all(name.startswith("jupyter_supervisor-panel") for name in sent_by)
    finally:
        panel.close()
    assert panel._thread is not None and not panel._thread.is_alive()


def test_close_wakes_a_sleeping_refresher():
    panel = Panel(FakeRun(RunHistory()), interval=600, idle_interval=600)
    panel.display()
    started = time.monotonic()
    panel.close()
    assert not panel._thread.is_alive()
    assert time.monotonic() - started < 10              # woken, not waiting out the interval


def test_display_refuses_a_background_thread():
    panel = Panel(FakeRun(RunHistory()))
    errors = queue.Queue()

    def display():
        try:
            panel.display()
        except RuntimeError as error:
            errors.put(error)

    thread = threading.Thread(target=display)
    thread.start()
    thread.join(timeout=30)
    assert "main thread" in str(errors.get(timeout=1))
    panel.close()


def test_a_failing_refresh_is_shown_and_the_refresher_goes_on(wait_for):
    class BrokenRun(FakeRun):
        broken = True

        @property
        def can_stop(self):
            if self.broken:
                raise KeyError("can_stop broke")
            return True

        @can_stop.setter
        def can_stop(self, value):
            pass

    run = BrokenRun(RunHistory())
    panel = Panel(run, interval=0.02)                   # shown, not raised
    try:
        assert "can_stop broke" in panel.widgets["message"].value
        panel.display()
        run.broken = False
        wait_for(lambda: not panel.widgets["stop"].disabled, timeout=30,
                 what="the refresher to recover")
        wait_for(lambda: panel.widgets["message"].value == "", timeout=30,
                 what="the failure to be cleared")
        assert panel._thread.is_alive()
        run.broken = True
        wait_for(lambda: "can_stop broke" in panel.widgets["message"].value, timeout=30,
                 what="the refresh failure in the panel")
    finally:
        panel.close()


# -- text --------------------------------------------------------------------------------------


def test_show_without_a_frontend_prints_a_status_line(capsys, clock):
    run = FakeRun(RunHistory(clock=clock), max_steps=2000)
    run.history.set_status("running")
    run.history.note_step(150)
    assert show(run) is None
    out = capsys.readouterr().out
    assert out == "mnist: running at step 150 of 2,000 (0 s)\n"
    assert "Box(" not in out


def test_text_summary_at_the_end_of_a_run(clock):
    history = RunHistory(clock=clock)
    run = FakeRun(history, logdir="/logs/mnist", max_steps=200)
    history.set_status("running")
    clock.now += 65
    history.on_event(events.SummaryWritten(200, {"loss": 0.125, "accuracy": 0.98}, 0.0))
    history.on_event(events.CheckpointSaved(200, "/logs/mnist/model.ckpt-200",
                                            wall_time=1_700_000_000.0, seconds=0.5))
    history.set_status("finished")
    lines = text_summary(run).splitlines()
    assert lines[0] == "mnist: finished at step 200 of 200 (1 min 05 s)"
    assert lines[1].startswith("  checkpoint: step 200 written ")
    assert lines[1].endswith(" in 0.50 s: /logs/mnist/model.ckpt-200")
    assert lines[2] == "  last values: accuracy 0.98 (step 200), loss 0.125 (step 200)"

    history.set_error("Traceback (most recent call last):\nValueError: bad batch\n")
    history.set_status("failed")
    summary = text_summary(run)
    assert "  error:\n    Traceback (most recent call last):\n    ValueError: bad batch" in summary
    no_logdir = FakeRun(RunHistory(clock=clock), logdir=None)
    assert "nothing is saved" in text_summary(no_logdir)


def test_the_panel_text_form_is_its_status_line_not_a_widget_repr(make_panel, clock):
    panel, run = make_panel()
    bundle = panel.widgets["root"]._repr_mimebundle_()
    assert bundle["text/plain"] == text_status(run) == "mnist: starting at step - of 1,000 (0 s)"
    assert "application/vnd.jupyter.widget-view+json" in bundle


# -- imports -----------------------------------------------------------------------------------


# Run first in the isolated Python (helpers.run_isolated): a run with what the panel reads.
ISOLATED_RUN = """
from jupyter_supervisor.view.history import RunHistory
class Run:
    name, logdir, max_steps, role, master = "r", None, None, "local", ""
    can_stop = can_resume = can_save = False
    history = RunHistory()
"""


def test_without_ipywidgets_import_works_and_the_panel_says_what_to_install():
    result = run_isolated(["ipywidgets", "tensorflow"], ISOLATED_RUN, """
        from jupyter_supervisor.view import panel
        print(panel.show(Run()))
        try:
            panel.Panel(Run())
        except ImportError as error:
            print("ImportError:", error)
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("r: starting at step -")
    assert lines[1] == "None"
    assert lines[2].startswith("ImportError: The jupyter_supervisor panel needs ipywidgets: "
                               "pip install 'ipywidgets>=8'")


def test_panel_imports_no_tensorflow_and_no_pyplot():
    result = run_isolated(["tensorflow"], ISOLATED_RUN, """
        from jupyter_supervisor.view import panel
        p = panel.Panel(Run())
        p.tick(force=True)
        print(sorted(m for m in ("tensorflow", "matplotlib.pyplot") if m in sys.modules))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# -- a real kernel -----------------------------------------------------------------------------


def test_show_in_a_kernel_displays_a_widget_whose_text_form_is_readable():
    from jupyter_client.manager import start_new_kernel

    code = textwrap.dedent("""
        from jupyter_supervisor.view.history import RunHistory
        from jupyter_supervisor.view import panel
        class Run:
            name, logdir, max_steps, role, master = "mnist", None, 500, "local", ""
            can_stop, can_resume, can_save = True, False, False
            history = RunHistory()
            def stop(self, wait=False): pass
            def resume(self): pass
            def save_now(self): pass
        run = Run()
        shown = panel.show(run)
        again = panel.show(run)              # %supervise show: the same panel, one more view
        print(type(shown).__name__, again is shown, shown._thread.is_alive())
        panel.close_all()
        print(shown.closed, shown._thread.is_alive())
    """)
    manager, client = start_new_kernel(kernel_name="python3", startup_timeout=60)
    try:
        msg_id = client.execute(code)
        displays, streams, comm_opens, errors = [], [], [], []
        while True:
            msg = client.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "display_data":
                displays.append(content["data"])
            elif kind == "stream":
                streams.append(content["text"])
            elif kind == "comm_open":
                comm_opens.append(content["target_name"])
            elif kind == "error":
                errors.append("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                break
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert not errors, errors[0]
    assert "".join(streams) == "Panel True True\nTrue False\n"
    assert len(displays) == 2
    for data in displays:
        assert "application/vnd.jupyter.widget-view+json" in data
        assert data["text/plain"] == "mnist: starting at step - of 500 (0 s)"
    assert displays[0]["application/vnd.jupyter.widget-view+json"]["model_id"] == \
        displays[1]["application/vnd.jupyter.widget-view+json"]["model_id"]
    assert set(comm_opens) == {"jupyter.widget"}
