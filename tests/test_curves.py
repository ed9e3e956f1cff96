"""Curves a person can watch for days (issue 41, the kernel side): the points the live panel drew
are what the event files hold, so a panel reloaded in a new kernel and TensorBoard's own reader
see the same curve, with a summary at each session's end; the header's numbers agree with each
other; a stop is stamped with the step at which it was asked; a resume says how many steps were
lost; a stall is raised and cleared.

Kernel-level tests drive a real IPython kernel through jupyter_client (``helpers.Kernel``); the
others run a ``TrainingRun`` in this process on a real TensorFlow model. Nothing sleeps to wait:
conditions are waited for, with deadlines; assertions are on steps, never on timing.
"""
import json
import threading

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from jupyter_supervisor import events, names
from jupyter_supervisor.config import RunConfig
from jupyter_supervisor.notebook import run as run_module
from jupyter_supervisor.view import text
from jupyter_supervisor.view.history import RunHistory

import eager_models
from helpers import FakeClock, wait_for

DEADLINE = 90.0   # seconds; generous for a loaded 2-core machine, never reached when passing
SESSIONS = 10
RATE = names.STEP_RATE_TAG

EAGER_SETUP = """
import eager_models
model, opt, train_step = eager_models.custom_loop()
"""
EAGER_CELL = """%%supervise --logdir {logdir}{options}
sv.track(model=model, optimizer=opt)
while not sv.should_stop():
    sv.step(loss=train_step())
    time.sleep(0.001)
"""
GRAPH_CELL = """%%supervise --logdir {logdir}{options}
while not sv.should_stop():
    sess.run(train_op)
    time.sleep(0.001)
"""
# The live history's series, as plain lists, written by the kernel for the test to read.
DUMP = """
snap = get_run({name!r}).history.snapshot()
pathlib.Path({path!r}).write_text(json.dumps({{
    tag: [s.steps.tolist(), s.values.tolist(), s.mins.tolist(), s.maxs.tolist()]
    for tag, s in snap.scalars.items()}}))
"""


def short_sessions(kernel, name, cell, sessions=SESSIONS, steps=20):
    """Runs ``cell``, then stops and resumes the run ``sessions`` times in all, each session
    stopped once it trained ``steps`` steps; returns each session's (first, last) step."""
    kernel.ok(cell)
    spans = []
    for session in range(sessions):
        if session:
            kernel.ok(f"%supervise resume {name}")
        first = spans[-1][1] if spans else 0   # each resumes from the final checkpoint
        kernel.wait_until(f"(get_run({name!r}).global_step or 0) >= {first + steps}", "steps")
        kernel.ok(f"%supervise stop {name}")
        spans.append((first, kernel.value(f"get_run({name!r}).global_step")))
    return spans


def live_series(kernel, name, tmp_path):
    path = str(tmp_path / "live.json")
    kernel.ok(DUMP.format(name=name, path=path))
    with open(path) as f:
        return json.load(f)


def reloaded_series(kernel, name, cell, last_step, tmp_path):
    """Re-runs ``cell`` in the (new) kernel with --max-steps at the last step: the run resumes,
    has nothing to train, and its panel shows what it loaded from the event files."""
    kernel.ok(cell.replace("{options}", f" --max-steps {last_step} --wait"))
    assert kernel.value(f"get_run({name!r}).status") == "finished"
    return live_series(kernel, name, tmp_path)


def assert_same_points(live, reloaded):
    assert sorted(reloaded) == sorted(live)
    for tag in live:
        steps, values, mins, maxs = live[tag]
        assert reloaded[tag][0] == steps, tag
        np.testing.assert_array_equal(reloaded[tag][1], values, err_msg=tag)
        np.testing.assert_array_equal(reloaded[tag][2], mins, err_msg=tag)
        np.testing.assert_array_equal(reloaded[tag][3], maxs, err_msg=tag)


def assert_tensorboard_sees_each_session(logdir, spans, tag):
    """TensorBoard's own reader (with its purge of orphaned points) has a ``tag`` point at each
    session's last step, and a step rate in each session's steps."""
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    steps = {e.step for e in acc.Scalars(tag)}
    assert all(last in steps for _, last in spans), (spans, sorted(steps))
    rates = [e.step for e in acc.Scalars(RATE)]
    assert all(any(first < step <= last for step in rates) for first, last in spans), (
        spans, rates)


@pytest.mark.kernel
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_ten_short_sessions_reload_in_a_new_kernel_as_the_live_panel_drew_them(
        kernel, tmp_path, mode):
    """A run stopped and resumed ten times in short sessions (a few seconds, shorter than the
    step counter's 10 s): the live panel's curves, the panel's after a kernel restart, and
    TensorBoard's reading of the event files hold the same points, each session's last step
    included (loss and step rate)."""
    name = f"short{mode}"
    logdir = f"runs/{name}"
    if mode == "eager":
        kernel.eager()
        kernel.ok(EAGER_SETUP)
        cell, tag = EAGER_CELL.replace("{logdir}", logdir), "loss"
    else:
        kernel.model()
        cell, tag = GRAPH_CELL.replace("{logdir}", logdir), "loss"
    spans = short_sessions(kernel, name, cell.replace("{options}", ""))
    live = live_series(kernel, name, tmp_path)
    assert {tag, RATE} <= set(live)
    assert all(last in live[tag][0] for _, last in spans)

    kernel.restart()
    if mode == "eager":
        kernel.ok(EAGER_SETUP)
    else:
        kernel.model()
    reloaded = reloaded_series(kernel, name, cell, spans[-1][1], tmp_path)
    assert_same_points(live, reloaded)
    assert_tensorboard_sees_each_session(kernel.workdir / logdir, spans, tag)


# -- in this process: a TrainingRun on a real model ----------------------------------------------

@pytest.fixture
def namespace():
    """A notebook namespace with a small Keras model, its data and a tf.function step; every
    run still live at the end is stopped."""
    model, opt, train_step = eager_models.custom_loop()
    x, y = eager_models.data(n=64)
    yield {"model": model, "opt": opt, "x": x, "y": y, "train_step": train_step,
           "threading": threading}
    late = run_module.stop_all(timeout=DEADLINE)
    assert not late, f"runs did not stop: {late}"


def start(namespace, logdir, body, **options):
    run = run_module.TrainingRun(RunConfig(logdir=str(logdir), **options), body, namespace)
    run.start()
    return run


def state_of(run):
    snap = run.history.snapshot()
    return text.panel_state(run, snap, elapsed=snap.elapsed, wall_now=snap.taken_at)


class PositionRecord(tf.keras.callbacks.Callback):
    """What fit did at each step, as a callback after sv.callback sees it: step -> (epoch,
    batches done in it)."""

    def __init__(self):
        super().__init__()
        self.at = {}
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.at[int(self.model.optimizer.iterations)] = (self.epoch, batch + 1)


@pytest.mark.slow
def test_the_header_shows_fits_position_at_its_own_step(namespace, tmp_path):
    """Ten samples of the panel's state while a fit runs: each time, the epoch and batch in the
    header are where fit was at the step the header shows (a callback's record of every step),
    not a position some steps older."""
    record = PositionRecord()
    namespace["record"] = record
    run = start(namespace, tmp_path, "model.fit(x, y, batch_size=8, epochs=100000, verbose=0, "
                "callbacks=[sv.callback, record])\n")
    seen = []
    for _ in range(10):
        last = seen[-1][0] if seen else 0
        state = wait_for(lambda: (lambda s: s if (s["step"] or 0) > last and s["position"]
                                  else None)(state_of(run)), DEADLINE, what="a newer step")
        seen.append((state["step"], state["position"]))
    run.stop()
    assert run.status == "stopped"
    for step, position in seen:
        epoch, done = record.at[step]
        assert position == f"epoch {epoch + 1}/100000, batch {done}/{eager_models.BATCHES}", (
            step, position, record.at[step])


HELD_LOOP = """
sv.track(model=model, optimizer=opt)
while not sv.should_stop():
    if sv.step(loss=train_step()) == hold_at:
        held.set()
        go.wait(60)
"""


def test_a_stop_is_stamped_with_the_step_at_which_it_was_asked(namespace, tmp_path,
                                                               monkeypatch):
    """The body is held at step 30 when the stop is asked: the timeline says "stop requested
    at step 30", then "stopped at step 30" (the loop looks at should_stop() before its next
    step), though the history heard of no step since the first (its step watcher and the
    Progress records are slowed down here to once an hour)."""
    monkeypatch.setattr(run_module, "WATCH_SECS", 3600)
    monkeypatch.setattr("jupyter_supervisor.eager.reporting.PROGRESS_SECS", 3600, raising=False)
    namespace.update(hold_at=30, held=threading.Event(), go=threading.Event())
    run = start(namespace, tmp_path, HELD_LOOP)
    assert namespace["held"].wait(DEADLINE)
    run.stop(wait=False)
    namespace["go"].set()
    assert run.wait(DEADLINE)
    texts = [t for _, t in text.timeline(run, run.history.snapshot())]
    assert texts[-2:] == ["stop requested at step 30", "stopped at step 30"], texts


LOOP_THAT_FAILS = """
sv.track(model=model, optimizer=opt)
while not sv.should_stop():
    step = sv.step(loss=train_step())
    if step == 40 and not saved:
        saved.append(sv.save_now())
    if step == 100 and fail:
        fail.pop()
        raise RuntimeError("the loader died")
"""


def test_a_resume_says_how_many_steps_were_lost_since_its_checkpoint(namespace, tmp_path):
    """A session saved at step 40 and died at step 100 (no final checkpoint): a resume restores
    step 40 and says that 60 steps were lost, in a new kernel (a new run, which reads it from
    the event files) and in the same one (whose history heard of step 100)."""
    namespace.update(saved=[], fail=[True])
    run = start(namespace, tmp_path, LOOP_THAT_FAILS, save_model_secs=0, name="lost")
    assert run.wait(DEADLINE) and run.status == "failed"
    # The failed session's last step is in its event file (the next session's START purges it
    # from TensorBoard's curves: those steps were lost).
    written = [(e.step, v.tag) for path in tf.io.gfile.glob(f"{tmp_path}/events.out.tfevents.*")
               for e in tf.compat.v1.train.summary_iterator(path) for v in e.summary.value]
    assert (100, "loss") in written and (100, RATE) in written
    resumed = "resumed from model.ckpt-40 (step 40; 60 steps since lost)"

    # As a new kernel would: a new run of the cell, with nothing to train past the checkpoint.
    fresh = start(namespace, tmp_path, LOOP_THAT_FAILS, save_model_secs=0, name="lost-new",
                  max_steps=40)
    assert fresh.wait(DEADLINE) and fresh.status == "finished"
    assert resumed in [t for _, t in text.timeline(fresh, fresh.history.snapshot())]

    run.resume()
    wait_for(lambda: run.status == "running" and run.global_step > 40, DEADLINE,
             what="steps after the resume")
    run.stop()
    texts = [t for _, t in text.timeline(run, run.history.snapshot())]
    assert resumed in texts, texts
    # A clean stop loses nothing: the next resume says no more.
    run.resume()
    wait_for(lambda: run.status == "running", DEADLINE, what="running")
    run.stop()
    last = [t for _, t in text.timeline(run, run.history.snapshot())
            if t.startswith("resumed")][-1]
    assert last.endswith(")") and "lost" not in last, last


# -- stalls ------------------------------------------------------------------------------------

class FakeRun:
    """What text.panel_state reads of a run (text.PanelRun)."""

    class config:  # pylint: disable=invalid-name,too-few-public-methods
        init_fn = None

    def __init__(self, history, name="fit", max_steps=None):
        self.history, self.name, self.max_steps = history, name, max_steps
        self.logdir, self.role, self.role_text = "/l", "local", ""
        self.can_stop = self.can_resume = self.can_save = True


def running_history(clock, stall_secs=30.0, step=0):
    history = RunHistory(clock=clock, wall_clock=lambda: 1_000_000.0 + clock.now,
                         stall_secs=stall_secs)
    history.on_event(events.SessionReady(step, None, True, 1_000_000.0 + clock.now))
    history.set_status(names.RUNNING, active=True)
    return history


def steps_every(history, clock, seconds, first, last):
    for step in range(first, last + 1):
        clock.now += seconds
        history.note_step(step)


def test_a_stall_is_no_step_for_ten_median_step_times_or_the_floor_and_ends_with_a_step():
    clock = FakeClock()
    history = running_history(clock)
    steps_every(history, clock, 5.0, 1, 20)          # 5 s a step: a stall after 50 s
    run = FakeRun(history)
    clock.now += 49.0
    history.note_step(20)
    assert history.snapshot().stalled is None
    clock.now += 1.0
    history.note_step(20)
    snap = history.snapshot()
    assert (snap.stalled.step, snap.stalled.since) == (20, 1_000_000.0 + clock.now - 50.0)
    state = text.panel_state(run, snap, elapsed=0.0, wall_now=1_000_000.0 + clock.now)
    since = text.stalled_text(snap.stalled)
    assert state["label"] == since and since.startswith("stalled since ")
    assert state["stalled"] == {"since": snap.stalled.since, "step": 20, "text": since}
    assert state["timeline"][-1][1] == f"{since}, at step 20"
    [alert] = state["alerts"]
    assert (alert["kind"], alert["wall_time"]) == ("stalled", 1_000_000.0 + clock.now)
    assert text.text_status(run, snap).startswith(f"fit: {since} at step 20 (")
    assert text.stall_line(run, snap, 1_000_000.0 + clock.now + 70) == (
        f"Run 'fit' is {since}: no step since step 20 (2 min 00 s).")

    clock.now += 600.0
    history.note_step(20)                           # raised once
    clock.now += 1.0
    history.note_step(21)                           # steps again
    snap = history.snapshot()
    assert snap.stalled is None
    state = text.panel_state(run, snap, elapsed=0.0, wall_now=1_000_000.0 + clock.now)
    assert state["label"] == "running" and state["stalled"] is None
    assert state["timeline"][-1][1] == "steps again at step 21, after 10 min 51 s without one"
    assert [a["kind"] for a in state["alerts"]] == ["stalled", "stall-ended"]
    assert len({a["id"] for a in state["alerts"]}) == 2


def test_fast_steps_stall_after_the_floor_and_a_first_step_after_ten_floors():
    clock = FakeClock()
    history = running_history(clock, stall_secs=30.0)
    clock.now += 299.0                               # the first step (tracing): not a stall yet
    history.note_step(0)
    assert history.snapshot().stalled is None
    clock.now += 1.0
    history.note_step(0)
    assert history.snapshot().stalled is not None   # 10 x 30 s without the first step
    steps_every(history, clock, 0.01, 1, 100)       # 10 ms a step: the floor decides
    clock.now += 29.9
    history.note_step(100)
    assert history.snapshot().stalled is None
    clock.now += 0.1
    history.note_step(100)
    assert history.snapshot().stalled.step == 100


def test_no_stall_outside_running_or_with_stall_secs_0():
    clock = FakeClock()
    history = running_history(clock)
    steps_every(history, clock, 1.0, 1, 5)
    history.set_status(names.STOPPING, active=True, step=5)
    clock.now += 1000.0
    history.note_step(5)
    assert history.snapshot().stalled is None
    off = running_history(clock, stall_secs=0)
    steps_every(off, clock, 1.0, 1, 5)
    clock.now += 10_000.0
    off.note_step(5)
    assert off.snapshot().stalled is None
    with pytest.raises(ValueError, match="Received: stall_secs=-1"):
        RunHistory(stall_secs=-1)


def test_a_stalled_run_is_raised_in_its_state_and_cleared_when_steps_come_again(
        namespace, tmp_path):
    """A real run whose body hangs at step 50 (as on a dead input pipeline): with --stall-secs 1
    its panel state says "stalled since HH:MM" until the body goes on."""
    namespace.update(hold_at=50, held=threading.Event(), go=threading.Event())
    run = start(namespace, tmp_path, HELD_LOOP, stall_secs=1.0)
    assert namespace["held"].wait(DEADLINE)
    state = wait_for(lambda: (lambda s: s if s["stalled"] else None)(state_of(run)),
                     DEADLINE, what="the stall")
    assert state["stalled"]["step"] == 50 and state["label"].startswith("stalled since ")
    assert any(a["kind"] == "stalled" for a in state["alerts"])
    namespace["go"].set()
    state = wait_for(lambda: (lambda s: s if not s["stalled"] else None)(state_of(run)),
                     DEADLINE, what="the end of the stall")
    assert state["label"] == "running"
    assert any(t.startswith("steps again at step 51, after ") for _, t in state["timeline"])
    run.stop()


def test_the_end_of_a_run_is_an_alert_and_a_model_that_is_not_finite_says_so():
    from jupyter_supervisor.finite import NonFiniteError  # pylint: disable=import-outside-toplevel
    clock = FakeClock()
    history = running_history(clock)
    run = FakeRun(history, max_steps=10)
    steps_every(history, clock, 1.0, 1, 10)
    history.on_event(events.Stopped(events.REQUESTED, None, 10, 2_000.0))
    history.set_status(names.FINISHED, active=False)
    history.set_status(names.STARTING, active=True, new_session=True)
    history.on_event(events.SessionReady(10, "/l/model.ckpt-10", True, 2_001.0))
    history.set_status(names.RUNNING, active=True)
    history.on_event(events.Stopped(events.ERROR, NonFiniteError("loss is NaN"), 12, 2_002.0))
    history.set_status(names.FAILED, active=False)
    snap = history.snapshot()
    alerts = text.panel_state(run, snap, elapsed=0.0, wall_now=0.0)["alerts"]
    assert [(a["kind"], a["text"]) for a in alerts] == [
        ("finished", "finished at step 10 (--max-steps reached)"),
        ("nan", "failed at step 12: jupyter_supervisor.finite.NonFiniteError: loss is NaN")]
    assert alerts[0]["title"] == "fit: finished"


class Terminal:
    """sys.stdout as a terminal: what is printed, and whether a line containing ``awaited``
    was (``seen``)."""

    def __init__(self, awaited):
        self.text, self.awaited, self.seen = "", awaited, threading.Event()

    def write(self, text):
        self.text += text
        if self.awaited in self.text:
            self.seen.set()
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return True


def test_a_wait_where_no_widget_renders_says_the_stall_and_its_end(ip, namespace, tmp_path,
                                                                    monkeypatch):
    """`%%supervise --wait` in a terminal (no widget): while it waits, a stall is one line with
    the terminal's bell, and then its end; the body goes on once the stall was said."""
    terminal = Terminal("is stalled since")
    monkeypatch.setattr("sys.stdout", terminal)
    namespace.update(hold_at=50, held=threading.Event(), go=threading.Event())
    ip.user_ns.update(namespace)
    releaser = threading.Thread(target=lambda: terminal.seen.wait(DEADLINE)
                                and namespace["go"].set())
    releaser.start()
    ip.run_cell_magic("supervise", f"--logdir {tmp_path} --name waited --wait --stall-secs 1 "
                      "--max-steps 80", HELD_LOOP)
    releaser.join()
    lines = terminal.text.splitlines()
    stalled = [line for line in lines if "is stalled since" in line]
    assert len(stalled) == 1 and stalled[0].startswith("\aRun 'waited' is stalled since ")
    assert stalled[0].endswith(")." ) and "no step since step 50 (" in stalled[0]
    # Said as it comes, or (when the run ended before the next look) in the end's timeline.
    assert "steps again" in terminal.text.split(stalled[0], 1)[1]
    assert run_module.get_run("waited").status == "finished"


def test_the_listing_and_show_where_no_widget_renders_say_a_stall(ip, namespace, tmp_path,
                                                                 monkeypatch):
    """`%supervise` and `%supervise show NAME` in a terminal, while a run is stalled: the
    listing's remark and the summary say it, the summary with the terminal's bell."""
    namespace.update(hold_at=50, held=threading.Event(), go=threading.Event())
    ip.user_ns.update(namespace)
    ip.run_cell_magic("supervise", f"--logdir {tmp_path} --name stuck --stall-secs 1 "
                      "--max-steps 80", HELD_LOOP)
    training = run_module.get_run("stuck")
    try:
        wait_for(lambda: training.history.snapshot().stalled is not None, DEADLINE,
                 what="the stall")
        shown = {}
        for line in ("", "show stuck"):
            terminal = Terminal("")
            monkeypatch.setattr("sys.stdout", terminal)
            ip.run_line_magic("supervise", line)
            monkeypatch.undo()
            shown[line] = terminal.text
    finally:
        namespace["go"].set()
    assert "Run 'stuck' is stalled since " in shown[""]
    assert "no step since step 50 (" in shown[""]
    assert shown["show stuck"].startswith("\a") and "stalled since" in shown["show stuck"]
    assert training.wait(DEADLINE) and training.status == "finished"


# -- how often an eager session takes a point ---------------------------------------------------

def test_an_eager_sessions_points_thin_out_as_it_ages_at_a_bounded_rate():
    """Three hours of boundaries every 0.1 s (a clock the test moves): a point every 0.5 s at
    first, never more than --save-summaries-secs (10 s) apart, 360 in the last hour: the event
    file grows at a bounded rate however long the run and however fast its steps. The
    session's end adds its last step's point and the step rate since the last record."""
    from jupyter_supervisor.eager.reporting import Reporter  # pylint: disable=C0415
    hub = events.EventHub()
    seen = []
    hub.add_listener(seen.append)
    clock = FakeClock()
    reporter = Reporter(hub, summaries_secs=10.0, clock=clock)
    reporter.started(0, None)
    tenth = 3 * 3600 * 10
    for step in range(1, tenth + 1):
        clock.now = step / 10
        reporter.boundary(step, {"loss": 1.0 / step}, None)
    clock.now += 0.05
    reporter.end(tenth, {"loss": 1.0 / tenth}, None)
    assert hub.flush(DEADLINE)
    points = [r.step for r in seen if isinstance(r, events.SummaryWritten)]
    gaps = np.diff(points) / 10    # seconds between points
    assert points[0] == 1 and set(gaps[:100]) == {0.5}
    # Thinning out (the boundaries every 0.1 s round each gap), then the session's end.
    assert gaps.max() == 10.0 and all(np.diff(gaps[:-1]) >= -0.1)
    assert sum(1 for step in points if step > 2 * 36000) == 360 + 1   # and the end's
    assert len(points) < 2200 and points[-1] == tenth
    rates = [r for r in seen if isinstance(r, events.StepRate)]
    assert [r.steps_per_sec for r in rates] == pytest.approx([10.0] * len(rates))
    assert rates[-1].step == tenth and len(rates) == 3 * 360
