"""Panel: the state it derives at each transition of a run, the series as deltas (pushed, and
answered to a view's request), the heartbeat while a run is live, the buttons, the bounded
output, the text forms and the record, the refresher thread that lives with the run, and show()
with its records in a real kernel."""
import re
import textwrap
import threading
import time

import numpy as np
import pytest

from jupyter_supervisor import events
from jupyter_supervisor.view import output_area, panel as panel_module, text
from jupyter_supervisor.view.history import RunHistory
from jupyter_supervisor.view.panel import Panel, show
from jupyter_supervisor.view.text import best_values, text_status, text_summary, timeline
from jupyter_supervisor.view.widget import SeriesFeed

from helpers import FakeClock, run_isolated
from panel_helpers import FakeRun, customs, decode

WALL0 = 1_000_000.0


ACTIVE = {"starting", "running", "stopping"}


def status(history, name):
    history.set_status(name, active=name in ACTIVE, new_session=name == "starting")


@pytest.fixture
def clock():
    return FakeClock(100.0)


def make_history(clock):
    return RunHistory(clock=clock, wall_clock=lambda: WALL0 + clock.now)


@pytest.fixture
def make_panel(clock):
    panels = []

    def make(run=None, **kwargs):
        run = run or FakeRun(make_history(clock), max_steps=1000)
        kwargs.setdefault("wall_clock", lambda: WALL0 + clock.now)
        panel = Panel(run, clock=clock, **kwargs)
        panels.append(panel)
        return panel, run

    yield make
    for panel in panels:
        panel.close()


def feed_training(history, clock, steps, every=10, seconds_per_step=0.125):
    """What a Supervisor reports while training: steps, a summary every ``every`` steps."""
    for step in steps:
        clock.now += seconds_per_step
        history.note_step(step)
        if step % every == 0:
            history.on_event(events.SummaryWritten(step, {"loss": 1.0 / step}, WALL0 + clock.now))


def ready(history, step=0, restored_from=None):
    history.on_event(events.SessionReady(step=step, restored_from=restored_from, is_chief=True,
                                         wall_time=WALL0))


# -- one state at every transition -------------------------------------------------------------


def test_the_state_follows_every_transition_of_a_run(make_panel, clock):
    panel, run = make_panel()
    history = run.history
    state = panel.widgets["view"].state
    assert (state["label"], state["step"], state["step_text"]) == ("starting", None, "")
    assert state["rate"] == state["eta"] == ""
    assert state["checkpoint"] == ["No checkpoint yet"]
    assert state["buttons"] == {"stop": True, "resume": False, "save": False}

    history.set_restoring("/logs/mnist/model.ckpt-20")
    panel.tick(force=True)
    assert panel.widgets["view"].state["label"] == "restoring model.ckpt-20"

    ready(history, step=0)
    status(history, "running")
    feed_training(history, clock, range(1, 101))          # 100 steps in 12.5 s
    history.on_event(events.CheckpointSaved(step=100, path="/logs/mnist/model.ckpt-100",
                                            wall_time=WALL0 + clock.now - 25, seconds=0.42))
    assert panel.tick()
    state = panel.widgets["view"].state
    assert (state["label"], state["step"], state["step_text"]) == ("running", 100, "100")
    assert state["rate"] == "8.0 steps/s"
    assert state["progress"] == {"fraction": 0.1, "text": "10.0% of 1,000"}
    assert state["eta"] == "ETA 1 min 52 s"               # 900 steps at 8/s
    assert state["checkpoint"][0].startswith("Checkpoint: step 100 at ")
    assert "(20 s ago), written in 0.42 s, model.ckpt-100 | initialized" in state["checkpoint"][0]
    assert state["buttons"] == {"stop": True, "resume": False, "save": True}

    status(history, "stopping")
    clock.now += 1
    panel.tick()
    state = panel.widgets["view"].state
    assert state["label"] == "stopping" and state["rate"] == state["eta"] == ""

    history.on_event(events.Stopped(events.REQUESTED, None, 104, WALL0 + clock.now))
    status(history, "stopped")
    clock.now += 1
    panel.tick()
    state = panel.widgets["view"].state
    assert (state["label"], state["step"]) == ("stopped", 104)   # the exact stopped step
    # As it ended, without "(22 s ago)": a saved notebook would say so for good.
    assert state["checkpoint"][0].endswith(
        ", written in 0.42 s, model.ckpt-100 | initialized") and " ago)" not in \
        state["checkpoint"][0]
    assert state["progress"]["text"] == "10.4% of 1,000" and state["eta"] == ""
    assert state["buttons"] == {"stop": False, "resume": True, "save": False}
    assert [text for _when, text in state["timeline"]] == [
        "started at step 0 (initialized)", "stop requested at step 100", "stopped at step 104"]


def test_a_stall_replaces_the_rate_and_the_eta_until_the_steps_come_again(make_panel, clock):
    panel, run = make_panel()
    history = run.history
    ready(history, step=0)
    status(history, "running")
    feed_training(history, clock, range(1, 101))          # 8 steps/s
    panel.tick(force=True)
    state = panel.widgets["view"].state
    assert (state["rate"], state["eta"]) == ("8.0 steps/s", "ETA 1 min 52 s")
    clock.now += 31                                        # no step for the floor's 30 s
    history.note_step(100)
    panel.tick(force=True)
    state = panel.widgets["view"].state
    assert state["label"].startswith("stalled since ") and state["stalled"]["step"] == 100
    assert state["rate"] == state["eta"] == ""
    assert "steps/s" not in text_status(run)
    feed_training(history, clock, range(101, 121))        # steps again
    panel.tick(force=True)
    state = panel.widgets["view"].state
    assert state["label"] == "running" and state["rate"].endswith("steps/s")
    assert state["eta"].startswith("ETA ")


def test_finished_at_max_steps_is_100_percent_without_an_eta(make_panel, clock):
    panel, run = make_panel(FakeRun(make_history(clock), max_steps=25))
    ready(run.history)
    status(run.history, "running")
    feed_training(run.history, clock, range(1, 20))
    run.history.on_event(events.Stopped(events.REQUESTED, None, 25, WALL0))
    status(run.history, "finished")
    clock.now += 1
    panel.tick()
    state = panel.widgets["view"].state
    assert (state["label"], state["step"]) == ("finished", 25)
    assert state["progress"] == {"fraction": 1.0, "text": "100.0% of 25"}
    assert state["eta"] == state["rate"] == ""
    assert state["timeline"][-1][1] == "finished at step 25 (--max-steps reached)"
    assert text_status(run) == "mnist: finished at step 25 of 25 (2 s)"


def test_a_fit_shows_the_epoch_and_batch_where_it_really_stopped(make_panel, clock):
    panel, run = make_panel(FakeRun(make_history(clock), max_steps=None))
    history = run.history
    ready(history)
    status(history, "running")
    for step, (epoch, batch) in ((100, (0, 100)), (450, (0, 450)), (725, (1, 275))):
        clock.now += 1
        history.on_event(events.Progress(step, epoch, 40, batch, 450, WALL0 + clock.now))
    status(history, "stopped")
    clock.now += 1
    panel.tick()
    state = panel.widgets["view"].state
    assert state["position"] == "epoch 2/40, batch 275/450"
    assert state["step"] == 725
    assert state["progress"]["text"] == "4.0% of 18,000"
    assert "epoch 2/40, batch 275/450" in text_status(run)

    status(history, "starting")                            # resumed: a new session
    history.on_event(events.Progress(18000, 39, 40, 450, 450, WALL0))
    status(history, "finished")
    panel.tick(force=True)
    assert panel.widgets["view"].state["progress"]["text"] == "100.0% of 18,000"


def test_a_failure_is_named_with_its_error_once(make_panel, clock):
    panel, run = make_panel()
    ready(run.history)
    status(run.history, "running")
    run.history.note_step(7)
    run.history.set_error("Traceback (most recent call last):\n  File \"<cell>\", line 3\n"
                          "\x1b[31mZeroDivisionError\x1b[0m: division by zero\n")
    status(run.history, "failed")
    panel.tick(force=True)
    state = panel.widgets["view"].state
    assert state["label"] == "failed" and state["tone"] == "error"
    assert state["error"].endswith("ZeroDivisionError: division by zero\n")   # no escapes
    assert state["timeline"][-1][1] == "failed at step 7: ZeroDivisionError: division by zero"


def test_no_progress_bar_without_a_total(make_panel, clock):
    panel, _run = make_panel(FakeRun(make_history(clock), max_steps=None))
    assert panel.widgets["view"].state["progress"] is None


def test_without_a_logdir_the_panel_warns_that_nothing_is_saved(make_panel, clock):
    panel, _run = make_panel(FakeRun(make_history(clock), logdir=None))
    state = panel.widgets["view"].state
    assert "nothing is saved" in state["warning"] and state["checkpoint"] == []


def test_best_values_and_the_timeline_of_rollbacks(clock):
    history = make_history(clock)
    run = FakeRun(history, max_steps=100)
    ready(history)
    for step, loss, acc in ((10, 0.9, 0.5), (20, 0.2, 0.8), (30, 0.4, 0.7)):
        history.on_event(events.SummaryWritten(step, {"loss": loss, "accuracy": acc,
                                                      "global_step/sec": 5.0}, WALL0 + step))
    snap = history.snapshot()
    assert best_values(snap) == ["accuracy: 0.8 (max) at step 20", "loss: 0.2 (min) at step 20"]
    history.on_event(events.RolledBack(31, 20, "/l/model.ckpt-20", "loss is nan", 1, 3,
                                       WALL0 + 31))
    snap = history.snapshot()   # the points after the restored step are gone, as in TensorBoard
    assert best_values(snap) == ["accuracy: 0.8 (max) at step 20", "loss: 0.2 (min) at step 20"]
    assert [int(s) for s in snap.scalars["loss"].steps] == [10, 20]
    assert timeline(run, snap)[-1][1] == ("rolled back: not finite at step 31 (loss is nan), "
                                          "restored model.ckpt-20")


# -- series as deltas --------------------------------------------------------------------------


def test_series_travel_as_deltas_and_a_change_of_shape_resends_from_zero(clock):
    history = RunHistory(max_points=4, clock=clock)
    feed = SeriesFeed()
    runs = lambda: {"r": history.snapshot().scalars}  # noqa: E731
    history.on_event(events.SummaryWritten(1, {"loss": 1.0}, WALL0 + 1))
    parts, buffer = feed.push(runs())
    gen = parts[0]["gen"]
    assert parts == [{"run": "r", "tag": "loss", "gen": gen, "from": 0, "n": 1}]
    _, _, steps, values, walls = decode(parts, buffer)[("r", "loss")]
    assert (steps.tolist(), values.tolist(), walls.tolist()) == ([1], [1.0], [WALL0 + 1])
    assert feed.push(runs()) is None                     # nothing new: nothing sent

    for step in (2, 3):
        history.on_event(events.SummaryWritten(step, {"loss": 1.0 / step}, WALL0 + step))
    parts, buffer = feed.push(runs())
    # Only the new buckets travel (the last one sent did not change).
    assert parts == [{"run": "r", "tag": "loss", "gen": gen, "from": 1, "n": 2}]
    assert decode(parts, buffer)[("r", "loss")][2].tolist() == [2, 3]
    history.on_event(events.SummaryWritten(4, {"loss": 0.25}, WALL0 + 4))
    parts, buffer = feed.push(runs())
    assert parts == [{"run": "r", "tag": "loss", "gen": gen, "from": 3, "n": 1}]

    history.on_event(events.SummaryWritten(5, {"loss": 0.2}, WALL0 + 5))   # merged in pairs
    parts, _ = feed.push(runs())
    assert parts[0]["from"] == 0 and parts[0]["gen"] != gen
    history.on_event(events.SessionReady(step=1, restored_from="/l/model.ckpt-1",
                                         is_chief=True, wall_time=WALL0))    # a restore
    parts, _ = feed.push(runs())
    assert parts == [{"run": "r", "tag": "loss", "gen": 0, "from": 0, "n": 0}]  # all dropped


def test_an_answer_carries_what_the_view_says_it_lacks(clock):
    history = RunHistory(max_points=100, clock=clock)
    for step in range(1, 11):
        history.on_event(events.SummaryWritten(step, {"loss": 1.0 / step, "acc": step / 10},
                                               WALL0 + step))
    runs = {"r": history.snapshot().scalars}
    parts, buffer = SeriesFeed.answer(runs, None)          # a view that holds nothing
    got = decode(parts, buffer)
    assert sorted(got) == [("r", "acc"), ("r", "loss")]
    gen, start, steps, _, walls = got[("r", "loss")]
    assert start == 0 and steps.tolist() == list(range(1, 11))
    holds = {"r": {"loss": [gen, 10, 10.0, walls[-1]],          # all of it
                   "acc": [got[("r", "acc")][0], 6, 6.0, WALL0 + 6],  # six points
                   "gone": [gen, 3, 3.0, WALL0 + 3]}}           # a tag the run no longer has
    parts, buffer = SeriesFeed.answer(runs, holds)
    got = decode(parts, buffer)
    assert got[("r", "acc")][1] == 6 and got[("r", "acc")][2].tolist() == [7, 8, 9, 10]
    assert got[("r", "gone")][1] == 0 and len(got[("r", "gone")][2]) == 0
    assert ("r", "loss") not in got
    # A view whose last point is not the kernel's (the bucket grew) gets that point again.
    holds["r"]["acc"] = [got[("r", "acc")][0], 10, 10.0, WALL0 + 9.5]
    parts, _ = SeriesFeed.answer(runs, holds)
    assert [(p["tag"], p["from"], p["n"]) for p in parts] == [("acc", 9, 1), ("gone", 0, 0)]
    # What does not read as a view's holdings is sent again in full, not an error.
    for garbage in ("x", {"r": [1]}, {"r": {"loss": "?"}}, {"r": {"loss": [1, 2]}}):
        parts, _ = SeriesFeed.answer(runs, garbage)
        assert {(p["tag"], p["from"]) for p in parts} == {("acc", 0), ("loss", 0)}


def test_a_million_steps_travel_in_one_message_under_a_megabyte(clock):
    history = RunHistory(clock=clock)
    for step in range(0, 1_000_000, 10):
        history.on_event(events.SummaryWritten(step, {f"tag{i:02d}": step * 1e-6 + i
                                                      for i in range(12)}, WALL0 + step))
    parts, buffer = SeriesFeed.answer({"r": history.snapshot().scalars}, {})
    assert len(parts) == 12
    assert len(buffer) <= 1_000_000
    steps = decode(parts, buffer)[("r", "tag03")][2]
    assert steps[-1] == 999_990 and np.all(np.diff(steps) > 0)


def pull(panel, have=None, seq=None, request_id=1):
    """A view's request, as link.js sends it, handled as the comm thread would."""
    panel._on_view_message(None, {"type": "pull", "id": request_id, "seq": seq,
                                  "have": have or {}}, [])


def test_the_panel_pushes_new_points_answers_a_view_and_beats_while_the_run_lives(
        comm_log, make_panel, clock):
    panel, run = make_panel()
    ready(run.history)
    status(run.history, "running")
    feed_training(run.history, clock, range(1, 31))
    clock.now += 1
    panel.tick()
    series = customs(comm_log, "series")
    assert series and series[-1][0]["parts"][0]["tag"] == "loss"
    before = len(customs(comm_log, "series"))
    clock.now += 0.6
    panel.tick()                                   # no new point: no series message
    assert len(customs(comm_log, "series")) == before

    pull(panel)                                    # a view (re)opened: it holds nothing
    answer, buffers = customs(comm_log, "answer")[-1]
    assert answer["id"] == 1 and answer["state"]["seq"] == panel.widgets["view"].state["seq"]
    assert answer["state"]["step"] == 30
    gen, _, steps, _, walls = decode(answer["parts"], buffers[0])[("mnist", "loss")]
    assert steps.tolist() == [10, 20, 30]
    assert set(answer["state"]["timing"]) == {"pull_ms", "beat_ms", "dead_after_ms"}
    assert answer["state"]["format"] == {"digits": 5}
    assert answer["state"]["palette"][0] == "#1f77b4" and len(answer["state"]["palette"]) == 10
    pull(panel, seq=answer["state"]["seq"], request_id=2,
         have={"mnist": {"loss": [gen, 3, 30.0, walls[-1]]}})
    again, buffers = customs(comm_log, "answer")[-1]
    assert again["id"] == 2 and "state" not in again and again["parts"] == []  # nothing new

    beats = len(customs(comm_log, "beat"))
    for _ in range(6):
        clock.now += 0.5
        panel.tick()
    assert len(customs(comm_log, "beat")) - beats == 3       # one a second


def test_an_ended_run_sends_nothing_unless_a_view_asks(comm_log, make_panel, clock):
    panel, run = make_panel()
    status(run.history, "stopped")
    clock.now += 1
    panel.tick()
    before = len(comm_log)
    for _ in range(20):
        clock.now += 0.6
        panel.tick()
    assert comm_log[before:] == []                           # no heartbeat, nothing
    run.history.note_step(42)
    clock.now += 0.6
    panel.tick()
    updates = [m for m in comm_log if m.data.get("method") == "update"]
    assert updates[-1].data["state"]["state"]["step"] == 42
    pull(panel)
    assert customs(comm_log, "answer")[-1][0]["state"]["step"] == 42


def test_the_views_hear_of_a_cell_only_when_they_asked_lately(comm_log, make_panel, clock):
    panel, _run = make_panel()
    panel.notify_cell("busy")
    assert customs(comm_log, "busy") == []                   # no view asked: none to tell
    pull(panel)
    panel.notify_cell("busy")
    panel.notify_cell("idle")
    assert len(customs(comm_log, "busy")) == len(customs(comm_log, "idle")) == 1
    clock.now += panel.widgets["view"].state["timing"]["dead_after_ms"] / 1000 + 1
    panel.notify_cell("busy")
    assert len(customs(comm_log, "busy")) == 1               # its views are gone


def test_buttons_call_the_run_and_the_answer_shows_a_failure(comm_log, make_panel, clock):
    panel, run = make_panel()
    panel._on_view_message(None, {"type": "button", "name": "stop", "id": 7}, [])
    assert run.calls == [("stop", False)]
    assert customs(comm_log, "answer")[-1][0]["id"] == 7
    run.failures["resume"] = RuntimeError("nothing to resume")
    panel._on_view_message(None, {"type": "button", "name": "resume", "id": 8}, [])
    answer = customs(comm_log, "answer")[-1][0]
    assert answer["id"] == 8 and \
        answer["state"]["message"] == "Resume failed: RuntimeError: nothing to resume"
    panel._on_view_message(None, {"type": "button", "name": "rm -rf"}, [])   # ignored
    assert run.calls == [("stop", False), ("resume",)]


def test_output_goes_to_a_jupyter_output_with_its_tail_bounded(make_panel, clock):
    panel, run = make_panel()
    out = panel.widgets["output"]
    run.history.append_output("\x1b[1mepoch 1\x1b[0m\n 1/10 [==>...]\r10/10 [======]\n")
    clock.now += 1
    panel.tick()
    assert out.outputs == ({"output_type": "stream", "name": "stdout",  # a terminal's line
                            "text": "\x1b[1mepoch 1\x1b[0m\n10/10 [======]\n"},)
    for i in range(2000):
        run.history.append_output(f"line {i}\n")
    clock.now += 1
    panel.tick()
    shown = "".join(o["text"] for o in out.outputs)
    assert len(shown) <= output_area.SHOWN_CHARS + 4
    assert shown.count("\n") <= output_area.SHOWN_LINES + 1
    assert shown.startswith("...\nline ") and shown.endswith("line 1999\n")


# -- text --------------------------------------------------------------------------------------


def test_show_without_a_frontend_prints_a_status_line(capsys, clock):
    run = FakeRun(make_history(clock), max_steps=2000)
    status(run.history, "running")
    run.history.note_step(150)
    assert show(run) is None
    assert capsys.readouterr().out == "mnist: running at step 150 of 2,000 (0 s)\n"


def test_the_best_checkpoint_kept_is_on_the_checkpoint_lines(make_panel, clock):
    """--keep-best: the panel's checkpoint lines and the text summary name the best checkpoint,
    its value and step; a new session shows the best it restored, or none."""
    panel, run = make_panel(FakeRun(make_history(clock), logdir="/logs/fit"))
    history = run.history
    ready(history)
    status(history, "running")
    history.on_event(events.CheckpointSaved(40, "/logs/fit/model.ckpt-40", WALL0, 0.1,
                                            kept=("/logs/fit/model.ckpt-40",
                                                  "/logs/fit/model.ckpt-24")))
    best = events.BestKept("val_loss", "min", 0.000123456, 24, 2, "/logs/fit/model.ckpt-24",
                           WALL0)
    history.on_event(best)
    line = "best val_loss 0.00012346 (min) at step 24, the end of epoch 3: model.ckpt-24"
    panel.tick(force=True)
    assert panel.widgets["view"].state["checkpoint"][1:] == [line, "kept (2): 40, 24"]
    assert f"  {line}" in text_summary(run).splitlines()
    status(history, "starting")
    ready(history, step=40, restored_from="/logs/fit/model.ckpt-40")
    panel.tick(force=True)
    assert line not in panel.widgets["view"].state["checkpoint"]
    history.on_event(best)   # what the restored state names
    panel.tick(force=True)
    assert line in panel.widgets["view"].state["checkpoint"]


def test_text_summary_tells_what_happened(clock):
    history = make_history(clock)
    run = FakeRun(history, logdir="/logs/mnist", max_steps=200)
    ready(history)
    status(history, "running")
    clock.now += 65
    history.on_event(events.SummaryWritten(200, {"loss": 0.125, "accuracy": 0.98}, WALL0))
    history.on_event(events.CheckpointSaved(200, "/logs/mnist/model.ckpt-200",
                                            wall_time=WALL0 + 50, seconds=0.5))
    status(history, "finished")
    lines = text_summary(run).splitlines()
    assert lines[0] == "mnist: finished at step 200 of 200 (1 min 05 s)"
    assert lines[1].startswith("  Checkpoint: step 200 at ")
    assert lines[1].endswith("written in 0.50 s, model.ckpt-200 | initialized")
    assert lines[2] == "  kept (1): 200"
    assert lines[3].endswith("  started at step 0 (initialized)")
    assert lines[4].endswith("  finished at step 200 (--max-steps reached)")
    assert lines[5] == "  best: accuracy: 0.98 (max) at step 200; loss: 0.125 (min) at step 200"
    assert lines[6] == "  last values: accuracy 0.98 (step 200), loss 0.125 (step 200)"
    history.set_error("Traceback (most recent call last):\nValueError: bad batch\n")
    assert "  error:\n    Traceback (most recent call last):\n    ValueError: bad batch" in \
        text_summary(run)


def _stop_and_resume(history, clock, step):
    """A stop at ``step`` and a resume from its checkpoint, as a run records them."""
    status(history, "stopping")
    history.on_event(events.Stopped(events.REQUESTED, None, step, WALL0 + clock.now))
    status(history, "stopped")
    clock.now += 1
    status(history, "starting")
    ready(history, step=step, restored_from=f"/logs/mnist/model.ckpt-{step}")
    status(history, "running")


@pytest.mark.parametrize("cycles", [10, 40])
def test_the_timeline_keeps_its_first_event_and_counts_what_it_folds(clock, cycles):
    """Ten stop/resume cycles: the first event, "… N earlier events", the newest; forty: more
    than the history keeps, and what it let go of is counted too."""
    history = make_history(clock)
    run = FakeRun(history)
    ready(history)
    status(history, "running")
    for cycle in range(cycles):
        _stop_and_resume(history, clock, 10 * (cycle + 1))
    every = 1 + 3 * cycles     # started, then per cycle: stop requested, stopped, resumed
    snap = history.snapshot()
    held = text.timeline(run, snap)
    assert held[0][1] == "started at step 0 (initialized)"
    assert len(held) + snap.events_dropped == every
    assert (snap.events_dropped > 0) == (cycles == 40)
    shown, count = text.folded(held, snap.events_dropped)
    assert len(shown) == text.TIMELINE_SHOWN and count == every - text.TIMELINE_SHOWN
    assert shown[-1][1] == f"resumed from model.ckpt-{10 * cycles} (step {10 * cycles:,})"
    lines = text_summary(run, snap).splitlines()
    first = next(i for i, line in enumerate(lines) if "started at step 0" in line)
    assert lines[first + 1] == f"  … {count} earlier events"
    state = text.panel_state(run, snap, elapsed=0.0, wall_now=WALL0)
    assert [t for _, t in state["timeline"]] == [t for _, t in held]
    assert (state["timeline_shown"], state["timeline_dropped"]) == (
        text.TIMELINE_SHOWN, snap.events_dropped)


def test_the_record_says_the_outcome_as_text_and_html(clock):
    history = make_history(clock)
    run = FakeRun(history, max_steps=500)
    ready(history)
    status(history, "running")
    history.on_event(events.SummaryWritten(123, {"loss": 123456.0}, WALL0))
    history.set_error("Traceback (most recent call last):\n\x1b[31mValueError\x1b[0m: <b>oom\n")
    status(history, "failed")
    snap = history.snapshot()
    assert text.record_heading(run, snap) == (
        "mnist | failed | step 123 of 500 | 0 s", "ValueError: <b>oom")
    page = text.record_html(run, snap, key="k1", image=b"PNG", image_tags=["loss"])
    assert page.startswith('<div class="jsv-record" data-jsv-key="k1">')
    assert "<strong>mnist | failed | step 123 of 500 | 0 s</strong>" in page
    assert "ValueError: &lt;b&gt;oom" in page and "<b>oom" not in page    # escaped
    assert 'src="data:image/png;base64,UE5H" alt="Curves of loss (x: step)"' in page
    assert "best: loss: 1.2346e+05 (min) at step 123" in page
    assert 'jsv-view[data-jsv-key="k1"]' in page                          # hides itself


def test_the_records_heading_isolates_a_name_that_could_reorder_it(clock):
    history = make_history(clock)
    ready(history, step=150)
    status(history, "running")
    for name, html_name in (("mnist", "mnist"), ("\u202erun", "<bdi>\u202erun</bdi>"),
                            ("خسارة<x>", "<bdi>خسارة&lt;x&gt;</bdi>")):
        page = text.record_html(FakeRun(history, name=name), history.snapshot(), key="k")
        assert f"<strong>{html_name} | running | step 150 | " in page


def test_the_panel_text_form_is_its_status_line_not_a_widget_repr(make_panel, clock):
    panel, run = make_panel()
    bundle = panel.widgets["root"]._repr_mimebundle_()
    assert bundle["text/plain"] == text_status(run) == "mnist: starting (0 s)"
    assert "application/vnd.jupyter.widget-view+json" in bundle


@pytest.mark.parametrize("value", [0, -0.5, True, "1"])
def test_bad_intervals_are_refused(value):
    with pytest.raises(ValueError, match="beat_interval"):
        Panel(FakeRun(RunHistory()), beat_interval=value)


# -- the refresher thread ----------------------------------------------------------------------


def test_only_the_refresher_sends_while_a_run_trains(comm_log, wait_for, capsys):
    history = RunHistory()
    run = FakeRun(history, max_steps=100_000)
    panel = Panel(run, interval=0.05, plot_interval=0.2)
    try:
        panel.display()
        displayed = len(comm_log)
        assert capsys.readouterr().out.startswith("mnist: starting")   # no frontend: text
        status(history, "running")
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
            wait_for(lambda: len(customs(comm_log, "series")) >= 3, timeout=30,
                     what="three series messages")
            wait_for(lambda: (panel.widgets["view"].state["step"] or 0) > 1000, timeout=30,
                     what="the step in the state")
        finally:
            done.set()
            trainer.join(timeout=30)
        sent_by = {m.thread for m in comm_log[displayed:]}
        assert sent_by and all(name.startswith("jupyter_supervisor-panel") for name in sent_by)
        refresher = panel._thread
    finally:
        panel.close()
    assert not refresher.is_alive() and panel._thread is None


def test_the_refresher_lives_with_the_run_and_a_runs_end_waits_for_it_to_show_it(
        comm_log, wait_for):
    history = RunHistory()
    run = FakeRun(history, max_steps=100)
    panel = Panel(run, interval=600, beat_interval=600, plot_interval=600)
    try:
        panel.display()
        thread = panel._thread
        assert thread.is_alive()
        history.on_event(events.SummaryWritten(7, {"loss": 0.5}, 0.0))
        status(history, "finished")        # returns once the refresher showed the end
        assert panel.widgets["view"].state["status"] == "finished"
        assert not thread.is_alive() and panel._thread is None
        pushed = customs(comm_log, "series")[-1][0]["parts"]     # its last points too,
        assert pushed[0]["tag"] == "loss"                        # without their interval
        status(history, "starting")        # resumed: a refresher again
        wait_for(lambda: panel._thread is not None and panel._thread.is_alive(),
                 what="a new refresher")
        status(history, "failed")
        assert panel._thread is None and panel.widgets["view"].state["status"] == "failed"
    finally:
        panel.close()


def test_close_wakes_a_sleeping_refresher():
    panel = Panel(FakeRun(RunHistory()), interval=600, beat_interval=600)
    panel.display()
    refresher = panel._thread
    started = time.monotonic()
    panel.close()
    assert not refresher.is_alive()
    assert time.monotonic() - started < 10              # woken, not waiting out the interval


def test_display_refuses_a_background_thread():
    panel = Panel(FakeRun(RunHistory()))
    errors = []
    thread = threading.Thread(target=lambda: errors.append(
        pytest.raises(RuntimeError, panel.display).value))
    thread.start()
    thread.join(timeout=30)
    assert "main thread" in str(errors[0])
    panel.close()


# -- imports -----------------------------------------------------------------------------------


# Run first in the isolated Python (helpers.run_isolated): a run with what the panel reads.
ISOLATED_RUN = """
from jupyter_supervisor.view.history import RunHistory
class Run:
    name, logdir, max_steps, role, role_text = "r", None, None, "local", ""
    can_stop = can_resume = can_save = False
    history = RunHistory()
    class config:
        init_fn = None
"""


def test_without_anywidget_import_works_and_the_panel_says_what_to_install():
    result = run_isolated(["anywidget", "tensorflow"], ISOLATED_RUN, """
        from jupyter_supervisor.view import panel
        print(panel.show(Run()))
        try:
            panel.Panel(Run())
        except ImportError as error:
            print("ImportError:", error)
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"r: starting \(\d+ s\)", lines[0]), lines[0]
    assert lines[1] == "None"
    assert lines[2].startswith("ImportError: The jupyter_supervisor panel needs ipywidgets and "
                               "anywidget")


def test_panel_imports_no_tensorflow_and_no_pyplot():
    result = run_isolated(["tensorflow"], ISOLATED_RUN, """
        import sys
        from jupyter_supervisor.view import panel
        p = panel.Panel(Run())
        p.tick(force=True)
        print(sorted(m for m in ("tensorflow", "matplotlib.pyplot") if m in sys.modules))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# -- a real kernel -----------------------------------------------------------------------------


@pytest.mark.kernel
def test_in_a_kernel_each_display_is_the_widget_and_a_record_updated_before_the_end_shows():
    from jupyter_client.manager import start_new_kernel

    code = textwrap.dedent("""
        import collections, threading
        from jupyter_supervisor import events
        from jupyter_supervisor.view.history import RunHistory
        from jupyter_supervisor.view import panel
        class Run:
            name, logdir, max_steps, role, role_text = "mnist", "/tmp/x", 500, "local", ""
            config = collections.namedtuple("Config", "init_fn")(None)
            can_stop, can_resume, can_save = True, False, False
            history = RunHistory()
            def stop(self, wait=False): pass
            def resume(self): pass
            def save_now(self): pass
        run = Run()
        shown = panel.show(run)
        again = panel.show(run)              # %supervise show: the same panel, one more view
        print(type(shown).__name__, again is shown, shown._thread.is_alive())
        run.history.on_event(events.SummaryWritten(500, {"loss": 0.5}, 1.0))
        # The end, from another thread (as the training thread's): set_status returns once
        # the panel showed it.
        ender = threading.Thread(target=run.history.set_status, args=("finished",),
                                 kwargs={"active": False})
        ender.start()
        ender.join()
        print(shown.widgets["view"].state["status"], shown._thread)
        panel.close_all()
        print(shown.closed)
    """)
    manager, client = start_new_kernel(kernel_name="python3", startup_timeout=60)
    try:
        msg_id = client.execute(code)
        seen, streams, errors = [], [], []
        while True:
            msg = client.get_iopub_msg(timeout=60)
            kind, content = msg["msg_type"], msg["content"]
            if kind in ("display_data", "update_display_data", "comm_open", "comm_msg"):
                seen.append((kind, content))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if kind == "stream":
                streams.append(content["text"])
            elif kind == "error":
                errors.append("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                break
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert not errors, errors[0]
    assert "".join(streams) == "Panel True True\nfinished None\nTrue\n"
    displays = [content for kind, content in seen if kind == "display_data"]
    assert len(displays) == 4                         # two displays: the widget, its record
    widgets, records = displays[0::2], displays[1::2]
    for content in widgets:
        assert "application/vnd.jupyter.widget-view+json" in content["data"]
        assert content["data"]["text/plain"] == ""    # the record below says it
        assert "display_id" not in content.get("transient", {})   # never updated
    for content in records:
        assert re.fullmatch(r"mnist \| saved while starting \(\d{4}-\d\d-\d\d \d\d:\d\d\) \| \d+ s",
                            content["data"]["text/plain"])
        assert content["data"]["text/html"].startswith('<div class="jsv-record"')
        assert "application/vnd.jupyter.widget-view+json" not in content["data"]
    ids = {content["transient"]["display_id"] for content in records}
    assert len(ids) == 2
    updates = [(i, content) for i, (kind, content) in enumerate(seen)
               if kind == "update_display_data"]
    assert {content["transient"]["display_id"] for _, content in updates} == ids
    final = [(i, content) for i, content in updates
             if content["data"]["text/plain"].startswith("mnist: finished at step 500 of 500")]
    assert len(final) == 2
    for _, content in final:
        assert content["data"]["image/png"]
        assert "<strong>mnist | finished | step 500 of 500" in content["data"]["text/html"]
    # The records of the end went out before any state that says the run finished.
    finished = [i for i, (kind, content) in enumerate(seen) if kind == "comm_msg"
                and content["data"].get("state", {}).get("state", {}).get("status") == "finished"]
    assert finished and max(i for i, _ in final) < min(finished)


def test_a_live_runs_record_says_when_it_was_true_and_follows_each_checkpoint(make_panel, clock):
    """A record made while the run is live says "saved while running, at step N (date time)",
    never "running" alone, nor how long ago a checkpoint was (read later, that is false); it is
    made again at each checkpoint, and at the end says the end."""
    panel, run = make_panel()
    history = run.history
    ready(history)
    status(history, "running")
    feed_training(history, clock, range(1, 301))
    panel.tick(force=True)
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(WALL0 + clock.now))
    key, bundle = panel._record                      # pylint: disable=protected-access
    heading = f"mnist | saved while running, at step 300 of 1,000 ({when})"
    assert bundle["text/plain"].startswith(heading)
    assert f"<strong>{heading} | " in bundle["text/html"]
    assert "No new checkpoint yet" in bundle["text/html"]
    history.on_event(events.CheckpointSaved(step=300, path="/logs/mnist/model.ckpt-300",
                                            wall_time=WALL0 + clock.now, seconds=0.5))
    clock.now += 20
    panel.tick(force=True)
    key_after, bundle = panel._record                # pylint: disable=protected-access
    assert key_after != key and "Checkpoint: step 300 at " in bundle["text/html"]
    assert " ago)" not in bundle["text/html"] and "(20 s ago)" in panel.widgets[
        "view"].state["checkpoint"][0]                  # the live view says it, the record not
    feed_training(history, clock, range(301, 311))
    panel.tick(force=True)
    assert panel._record[0] == key_after             # pylint: disable=protected-access
    history.on_event(events.Stopped(events.REQUESTED, None, 310, WALL0 + clock.now))
    status(history, "finished")
    panel.tick(force=True)
    _, bundle = panel._record                        # pylint: disable=protected-access
    assert "<strong>mnist | finished | step 310 of 1,000 | " in bundle["text/html"]
    assert "saved while" not in bundle["text/html"]


def test_a_failure_raised_into_the_cell_is_not_repeated_in_the_panel(make_panel, clock):
    panel, run = make_panel()
    run.history.set_error("Traceback (most recent call last):\nValueError: boom\n")
    status(run.history, "failed")
    panel.tick(force=True)
    assert "ValueError: boom" in panel.widgets["view"].state["error"]
    panel.finish(error_in_cell=True)          # --wait raises it into its cell
    state = panel.widgets["view"].state
    assert state["error"] == "" and state["timeline"][-1][1] == "failed at step -: ValueError: boom"
    run.history.set_error("Traceback (most recent call last):\nKeyError: 'x'\n")  # a new one
    panel.tick(force=True)
    assert "KeyError" in panel.widgets["view"].state["error"]


def test_a_comparison_sends_each_runs_series_under_its_name(comm_log, clock):
    runs = []
    for name, scale in (("lr-0.1", 1.0), ("lr-0.01", 2.0)):
        history = make_history(clock)
        history.on_event(events.SummaryWritten(10, {"loss": scale}, WALL0 + 10))
        runs.append(FakeRun(history, name=name))
    comparison = panel_module.Comparison(runs, clock=clock)
    try:
        assert comparison.widgets["view"].compare is True
        assert comparison.widgets["view"].runs == ["lr-0.1", "lr-0.01"]
        comparison.tick(force=True)
        (content, buffers), = customs(comm_log, "series")
        sent = {run: got[3].tolist() for (run, _tag), got in
                decode(content["parts"], buffers[0]).items()}
        assert sent == {"lr-0.1": [1.0], "lr-0.01": [2.0]}
    finally:
        comparison.close()
    with pytest.raises(ValueError, match="Expected at least one run"):
        panel_module.Comparison([])
