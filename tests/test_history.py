"""RunHistory: events in, snapshots out; bounded series; event files read as TensorBoard does."""
import threading
import tracemalloc

import numpy as np
import pytest

from jupyter_supervisor import events
from jupyter_supervisor.view.history import RunHistory

from helpers import FakeClock, run_isolated


def summary(step, **scalars):
    return events.SummaryWritten(step=step, scalars=scalars, wall_time=1000.0 + step)


def steps_of(history, tag):
    return history.snapshot().scalars[tag].steps.tolist()


# -- events and setters ------------------------------------------------------------------------


def test_events_fill_the_snapshot():
    clock = FakeClock()
    history = RunHistory(clock=clock)
    history.on_event(events.SessionReady(step=0, restored_from=None, is_chief=True,
                                         wall_time=1000.0))
    history.set_status("running", active=True)
    for step in range(0, 50, 10):
        clock.now += 1
        history.on_event(summary(step, loss=1.0 / (step + 1), accuracy=step / 100))
    history.on_event(events.CheckpointSaved(step=40, path="/logs/model.ckpt-40",
                                            wall_time=1040.0, seconds=0.5))
    history.on_event(events.CheckpointSaved(step=45, path="/logs/model.ckpt-45",
                                            wall_time=1045.0, seconds=0.25,
                                            kept=("/logs/model.ckpt-45", "/logs/model.ckpt-40")))
    # The step counter's record at the session's first step measured the start-up (TensorFlow's
    # writes one as it starts): not plotted.
    history.on_event(events.StepRate(step=0, steps_per_sec=0.0, wall_time=1000.0))

    snap = history.snapshot()
    assert snap.status == "running"
    assert snap.step == 45
    assert snap.steps_per_sec == pytest.approx(10.0)  # the history's estimate: 40 steps in 4 s
    assert snap.kept == ("/logs/model.ckpt-45", "/logs/model.ckpt-40")
    assert sorted(snap.scalars) == ["accuracy", "loss"]
    loss = snap.scalars["loss"]
    assert loss.steps.tolist() == [0, 10, 20, 30, 40]
    np.testing.assert_allclose(loss.values, [1.0, 1 / 11, 1 / 21, 1 / 31, 1 / 41])
    np.testing.assert_array_equal(loss.mins, loss.values)   # one point per bucket: no band
    np.testing.assert_array_equal(loss.maxs, loss.values)
    steps, values, mins, maxs, walls, _generation, counts, merged = loss  # the tuple form
    assert counts.tolist() == [1] * 5 and not merged
    assert not steps.flags.writeable and not values.flags.writeable
    assert walls.tolist() == [1000.0, 1010.0, 1020.0, 1030.0, 1040.0]   # each point's wall time
    assert [c.step for c in snap.checkpoints] == [45, 40]  # newest first
    assert snap.checkpoints[0].path == "/logs/model.ckpt-45"
    assert snap.checkpoints[0].seconds == 0.25
    assert snap.restored_from is None
    assert not snap.waiting_for_chief


def test_version_bumps_on_every_change_and_only_then():
    history = RunHistory(clock=FakeClock())
    seen = [history.version]

    def changed():
        seen.append(history.version)
        return seen[-1] != seen[-2]

    history.set_status("running", active=True)
    assert changed()
    history.set_status("running", active=True)
    assert not changed()
    history.note_step(5)
    assert changed()
    history.note_step(5)
    assert not changed()
    history.append_output("hi\n")
    assert changed()
    history.append_output("")
    assert not changed()
    history.set_error("Traceback ...")
    assert changed()
    history.set_error("Traceback ...")
    assert not changed()
    history.on_event(summary(6, loss=1.0))
    assert changed()
    history.on_event(object())          # not a record this history shows
    assert not changed()
    assert history.snapshot().version == history.version


def test_scalars_version_moves_only_with_points():
    history = RunHistory(clock=FakeClock())
    before = history.snapshot().scalars_version
    history.note_step(3)
    history.append_output("x")
    assert history.snapshot().scalars_version == before
    history.on_event(summary(3, loss=1.0))
    assert history.snapshot().scalars_version > before


def test_elapsed_counts_only_active_time():
    clock = FakeClock(100.0)
    history = RunHistory(clock=clock)
    clock.now = 104.0
    history.set_status("running", active=True)
    clock.now = 110.0
    assert history.snapshot().elapsed == 10.0
    history.set_status("stopped", active=False)
    clock.now = 150.0                                   # stopped: the clock runs, elapsed not
    snap = history.snapshot()
    assert snap.elapsed == 10.0 and not snap.active
    assert snap.elapsed_at(500.0) == 10.0
    history.set_status("running", active=True)                       # resumed
    clock.now = 155.0
    snap = history.snapshot()
    assert snap.elapsed == 15.0
    assert snap.elapsed_at(160.0) == 20.0


def test_steps_per_sec_has_one_estimate_and_step_rates_are_plotted_live():
    clock = FakeClock()
    history = RunHistory(clock=clock)
    history.on_event(events.SessionReady(step=0, restored_from=None, is_chief=True,
                                         wall_time=0.0))
    history.set_status("running", active=True)
    assert history.snapshot().steps_per_sec is None   # nothing measured yet: no made-up zero
    history.on_event(events.StepRate(step=0, steps_per_sec=0.0, wall_time=0.0))
    for second in range(1, 6):
        clock.now = float(second)
        history.note_step(200 * second)
    assert history.snapshot().steps_per_sec == pytest.approx(200.0)
    history.on_event(events.StepRate(step=1000, steps_per_sec=180.0, wall_time=0.0))
    snap = history.snapshot()
    assert snap.steps_per_sec == pytest.approx(200.0)  # the record is plotted, not shown
    assert snap.scalars["global_step/sec"].steps.tolist() == [1000]
    assert snap.scalars["global_step/sec"].values.tolist() == [180.0]
    history.set_status("stopped", active=False)
    history.set_status("running", active=True)
    clock.now = 10.0
    history.note_step(1001)      # a new running period starts a new estimate
    assert history.snapshot().steps_per_sec is None


def test_no_rate_is_plotted_that_no_training_measured():
    history = RunHistory(clock=FakeClock())
    history.on_event(events.SessionReady(step=0, restored_from=None, is_chief=True,
                                         wall_time=0.0))
    history.set_status("running", active=True)
    # At step 0 (where the session records from) the first measured no interval, the second
    # the start-up; 0 at 20 is a stall.
    for step, rate in ((0, 0.0), (0, 0.0), (10, 20.0), (20, 0.0), (30, 20.0)):
        history.on_event(events.StepRate(step=step, steps_per_sec=rate, wall_time=step))
    # The step counter's last record, of the steps since its newest one, is plotted while
    # the run stops: it measured training (the counter stops before the final checkpoint).
    history.set_status("stopping", active=True)
    history.on_event(events.StepRate(step=31, steps_per_sec=5.0, wall_time=31.0))
    history.on_event(events.Stopped(events.REQUESTED, None, 31, 32.0))
    rates = history.snapshot().scalars["global_step/sec"]
    assert (rates.steps.tolist(), rates.values.tolist()) == (
        [10, 20, 30, 31], [20.0, 0.0, 20.0, 5.0])
    # A session records from the step after the restored one: a rate there measured the
    # first step (tracing), not training.
    history.on_event(events.SessionReady(step=31, restored_from="/l/model.ckpt-31",
                                         is_chief=True, wall_time=40.0))
    history.on_event(events.StepRate(step=32, steps_per_sec=1.0, wall_time=41.0))
    history.on_event(events.StepRate(step=52, steps_per_sec=20.0, wall_time=42.0))
    rates = history.snapshot().scalars["global_step/sec"]
    assert rates.steps.tolist()[-2:] == [31, 52]


def test_step_moves_forward_except_on_restore():
    history = RunHistory(clock=FakeClock())
    history.note_step(100)
    history.on_event(summary(90, loss=1.0))          # delivered late: older than note_step
    assert history.snapshot().step == 100
    history.on_event(events.SessionReady(step=60, restored_from="/l/model.ckpt-60",
                                         is_chief=True, wall_time=0.0))
    snap = history.snapshot()
    assert snap.step == 60
    assert snap.restored_from == "/l/model.ckpt-60"


def test_waiting_for_chief_until_session_ready():
    history = RunHistory(clock=FakeClock())
    history.on_event(events.WaitingForChief(master="grpc://localhost:2222", wall_time=0.0))
    assert history.snapshot().waiting_for_chief
    history.on_event(events.SessionReady(step=0, restored_from=None, is_chief=False,
                                         wall_time=0.0))
    assert not history.snapshot().waiting_for_chief


def test_stopped_with_an_exception_shows_its_traceback_unless_an_error_is_set():
    history = RunHistory(clock=FakeClock())
    try:
        raise ValueError("loader died")
    except ValueError as error:
        failure = error
    history.on_event(events.Stopped(reason=events.ERROR, exception=failure, step=7,
                                    wall_time=0.0))
    snap = history.snapshot()
    assert "Traceback" in snap.error and "ValueError: loader died" in snap.error
    history.set_error("the run's own traceback, pointing at the cell")
    assert history.snapshot().error == "the run's own traceback, pointing at the cell"
    history.set_error("")
    assert history.snapshot().error == ""


def test_output_keeps_its_tail():
    history = RunHistory(max_output_chars=100, clock=FakeClock())
    written = []
    for i in range(500):
        text = f"line {i}\n" if i % 7 else "x" * 130   # some chunks longer than the limit
        written.append(text)
        history.append_output(text)
        snap = history.snapshot()
        assert snap.output == "".join(written)[-100:]
    assert len(snap.output) == 100


def test_output_limit_zero_keeps_nothing_but_tells_a_change():
    history = RunHistory(max_output_chars=0, clock=FakeClock())
    before = history.version
    history.append_output("hello")
    snap = history.snapshot()
    assert snap.output == "" and snap.version == history.version > before


@pytest.mark.parametrize("call, message", [
    (lambda: RunHistory(max_points=3), "`max_points`"),
    (lambda: RunHistory(max_points=2), "`max_points`"),
    (lambda: RunHistory(max_points="10"), "`max_points`"),
    (lambda: RunHistory(max_output_chars=-1), "`max_output_chars`"),
    (lambda: RunHistory().set_status("", active=True), "Received: status=''"),
    (lambda: RunHistory().note_step(-1), "Received: step=-1"),
    (lambda: RunHistory().load_event_files("", None), "`logdir`"),
    (lambda: RunHistory().load_event_files("/tmp", -5), "Received: upto_step=-5"),
])
def test_bad_arguments_are_refused_with_a_clear_message(call, message):
    with pytest.raises(ValueError, match="Invalid value for argument") as raised:
        call()
    assert message in str(raised.value)


def test_text_arguments_must_be_str():
    history = RunHistory()
    with pytest.raises(TypeError, match="`text`"):
        history.append_output(b"bytes")
    with pytest.raises(TypeError, match="`text`"):
        history.set_error(None)


def test_watchers_hear_each_change_of_status_after_it_and_cannot_undo_it(caplog):
    history = RunHistory(clock=FakeClock())
    heard = []

    def watcher(status):
        heard.append((status, history.snapshot().status))   # outside the lock: no deadlock

    def broken(_status):
        raise RuntimeError("a broken watcher")

    history.watch(broken)
    history.watch(watcher)
    history.set_status("running", active=True)
    history.set_status("running", active=True)               # no change: no call
    history.unwatch(broken)
    history.set_status("stopped", active=False)
    history.unwatch(watcher)
    history.unwatch(watcher)                                 # not watching: ignored
    history.set_status("starting", active=True, new_session=True)
    assert heard == [("running", "running"), ("stopped", "stopped")]
    assert history.snapshot().status == "starting"
    assert "A watcher of the run's status failed at 'running'" in caplog.text


def test_a_status_is_the_runs_word_and_its_changes_make_the_timeline():
    clock = FakeClock()
    history = RunHistory(clock=clock, wall_clock=lambda: 1000.0 + clock.now)
    history.set_restoring("/l/model.ckpt-5")
    assert history.snapshot().restoring == "/l/model.ckpt-5"
    history.on_event(events.SessionReady(step=5, restored_from="/l/model.ckpt-5",
                                         is_chief=True, wall_time=1000.0))
    history.set_status("running", active=True)
    clock.now = 3.0
    history.set_status("paused", active=False)
    snap = history.snapshot()
    assert (snap.status, snap.active, snap.restoring) == ("paused", False, None)
    assert snap.elapsed == 3.0
    assert [type(r).__name__ for r in snap.timeline] == ["SessionStarted", "StatusChanged",
                                                         "StatusChanged"]
    assert (snap.timeline[-1].status, snap.timeline[-1].step,
            snap.timeline[-1].wall_time) == ("paused", 5, 1003.0)


# -- restarts: out-of-order steps and restores -------------------------------------------------


def test_a_lower_step_drops_the_points_from_it_on_like_tensorboard():
    history = RunHistory(clock=FakeClock())
    for step in range(0, 100, 10):
        history.on_event(summary(step, loss=float(step), other=1.0))
    history.on_event(summary(50, loss=-1.0))
    assert steps_of(history, "loss") == [0, 10, 20, 30, 40, 50]
    assert history.snapshot().scalars["loss"].values[-1] == -1.0
    assert steps_of(history, "other") == list(range(0, 100, 10))   # per tag, as TensorBoard


def test_equal_steps_are_kept():
    history = RunHistory(clock=FakeClock())
    history.on_event(summary(5, loss=1.0))
    history.on_event(summary(5, loss=2.0))
    assert steps_of(history, "loss") == [5, 5]


def test_a_restore_drops_what_was_recorded_after_its_step():
    # As TensorBoard purges from a START step on, which is the step after the restored one:
    # the restored step's values are of the state the checkpoint holds.
    history = RunHistory(clock=FakeClock())
    for step in range(0, 200, 10):
        history.on_event(summary(step, loss=float(step)))
    history.on_event(events.SessionReady(step=120, restored_from="/l/model.ckpt-120",
                                         is_chief=True, wall_time=0.0))
    assert steps_of(history, "loss")[-1] == 120
    history.on_event(summary(121, loss=0.5))
    assert steps_of(history, "loss")[-2:] == [120, 121]
    assert history.snapshot().scalars["loss"].values[-1] == 0.5


def test_nan_values_count_but_stay_out_of_the_envelope():
    history = RunHistory(max_points=4, clock=FakeClock())
    values = [1.0, float("nan"), 3.0, 2.0, float("nan"), float("nan"), 5.0, 0.5]
    for step, value in enumerate(values):
        history.on_event(summary(step, loss=value))
    series = history.snapshot().scalars["loss"]
    assert len(series.steps) == 4          # 8 points in 4 buckets of 2
    assert series.mins[0] == 1.0 and series.maxs[0] == 1.0
    assert series.mins[1] == 2.0 and series.maxs[1] == 3.0
    assert np.isnan(series.values[2])      # only NaNs: a gap in the plot
    assert np.isnan(series.mins[2]) and np.isnan(series.maxs[2])
    assert series.mins[3] == 0.5 and series.maxs[3] == 5.0


# -- bounded memory ----------------------------------------------------------------------------


def expected_buckets(steps, values, edges):
    """Mean, min and max of the raw points in each bucket (bucket i ends at edges[i])."""
    ends = np.searchsorted(steps, edges, side="right")
    starts = np.concatenate(([0], ends[:-1]))
    return ([values[a:b].mean() for a, b in zip(starts, ends)],
            [values[a:b].min() for a, b in zip(starts, ends)],
            [values[a:b].max() for a, b in zip(starts, ends)],
            ends - starts)


def test_a_million_points_stay_bounded_with_an_exact_envelope():
    history = RunHistory(max_points=2000, clock=FakeClock())
    rng = np.random.default_rng(7)
    n = 1_000_000
    steps = np.arange(n, dtype=np.int64) * 3
    values = np.cumsum(rng.normal(size=n))
    values[123_457] = 1e6       # a spike must survive in the envelope
    on_event = history.on_event
    for step, value in zip(steps.tolist(), values.tolist()):
        on_event(events.SummaryWritten(step, {"loss": value}, 0.0))

    series = history.snapshot().scalars["loss"]
    assert 1000 <= len(series.steps) <= 2000
    assert np.all(np.diff(series.steps) > 0)
    assert series.steps[-1] == steps[-1]
    assert series.maxs.max() == 1e6
    assert series.mins.min() == values.min()
    means, mins, maxs, counts = expected_buckets(steps, values, series.steps)
    assert counts.sum() == n
    # Buckets cover the same number of points (the newest one may still be filling).
    assert len(set(counts[:-1].tolist())) == 1 and counts[-1] <= counts[0]
    np.testing.assert_allclose(series.values, means, rtol=1e-9, atol=1e-6)
    np.testing.assert_array_equal(series.mins, mins)
    np.testing.assert_array_equal(series.maxs, maxs)


def test_memory_stays_flat_as_points_grow():
    def retained(points):
        tracemalloc.start()
        try:
            history = RunHistory(max_points=2000, clock=FakeClock())
            for step in range(points):
                history.on_event(events.SummaryWritten(step, {"a": 1.0, "b": 2.0}, 0.0))
            history.snapshot()
            return tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()

    # 15,000 and 120,000 points both fill 1875 buckets (of 8 and of 64 points).
    small, large = retained(15_000), retained(120_000)
    assert large < 500_000      # two tags: 2000 buckets of 5 numbers + a snapshot's 4 arrays
    assert large < small * 1.1 + 20_000         # eight times the points, the same memory


def test_truncating_a_merged_series_never_keeps_points_past_the_restore():
    history = RunHistory(max_points=8, clock=FakeClock())
    for step in range(100):
        history.on_event(summary(step, loss=float(step)))
    history.on_event(events.SessionReady(step=50, restored_from="x", is_chief=True,
                                         wall_time=0.0))
    series = history.snapshot().scalars["loss"]
    assert series.steps[-1] <= 50 and series.maxs.max() <= 50


# -- threads -----------------------------------------------------------------------------------


def test_concurrent_writers_and_a_reader_see_consistent_snapshots():
    history = RunHistory(max_points=100_000)
    per_thread = 5000
    errors = []

    def write(tag):
        for step in range(per_thread):
            history.on_event(events.SummaryWritten(step, {tag: float(step)}, 0.0))
            history.note_step(step)
            if step % 100 == 0:
                history.append_output(f"{tag} {step}\n")

    def read(stop):
        while not stop.is_set():
            snap = history.snapshot()
            for tag, series in snap.scalars.items():
                if not len(series.steps) == len(series.values) == len(series.mins):
                    errors.append(f"{tag}: arrays of different lengths")
                if np.any(np.diff(series.steps) < 0):
                    errors.append(f"{tag}: steps out of order")

    stop = threading.Event()
    reader = threading.Thread(target=read, args=(stop,))
    reader.start()
    writers = [threading.Thread(target=write, args=(f"tag{i}",)) for i in range(4)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(timeout=60)
    stop.set()
    reader.join(timeout=60)
    assert not errors
    snap = history.snapshot()
    assert {tag: len(s.steps) for tag, s in snap.scalars.items()} == {
        f"tag{i}": per_thread for i in range(4)}
    assert snap.output.count("\n") == 4 * per_thread // 100


# -- no TensorFlow at import -------------------------------------------------------------------


def test_history_imports_no_tensorflow():
    result = run_isolated(["tensorflow"], """
from jupyter_supervisor import events
from jupyter_supervisor.view.history import RunHistory
history = RunHistory()
history.on_event(events.SummaryWritten(1, {"loss": 0.5}, 0.0))
print(history.snapshot().scalars["loss"].values[0])
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0.5"


# -- event files (written by a real FileWriter, read back with TensorBoard's reader) -----------


@pytest.fixture(scope="module")
def tf():
    import tensorflow  # a test dependency: imported here so the tests above run without it
    return tensorflow


def write_run(tf, logdir, suffix, start_step, steps, tags=("loss",), session_start=True,
              value=lambda tag, step: step / 10.0):
    """One run as a Supervisor writes it: SessionLog.START at its first step, then summaries.

    ``suffix`` orders the files as their creation time would (two writers opened in the same
    second would otherwise get the same file name).
    """
    with tf.Graph().as_default():
        writer = tf.compat.v1.summary.FileWriter(logdir, filename_suffix=suffix)
        if session_start:
            writer.add_session_log(
                tf.compat.v1.SessionLog(status=tf.compat.v1.SessionLog.START), start_step)
        for step in steps:
            writer.add_summary(tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag=tag, simple_value=value(tag, step))
                for tag in tags]), step)
        writer.close()


def tensorboard_steps(logdir, tag):
    """What TensorBoard itself shows for ``tag`` (every point, no sampling)."""
    from tensorboard.backend.event_processing import event_accumulator
    accumulator = event_accumulator.EventAccumulator(
        logdir, size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    return [(e.step, e.value) for e in accumulator.Scalars(tag)]


def loaded(history, tag):
    series = history.snapshot().scalars[tag]
    return list(zip(series.steps.tolist(), series.values.tolist()))


def test_load_event_files_reads_what_tensorboard_shows(tf, tmp_path):
    logdir = str(tmp_path)
    with tf.Graph().as_default():
        # Summaries computed by a real session from summary ops, as the Supervisor's are.
        step = tf.compat.v1.placeholder(tf.float32, [])
        loss = tf.compat.v1.summary.scalar("loss", 1.0 / (step + 1.0))
        accuracy = tf.compat.v1.summary.scalar("accuracy", step / 100.0)
        merged = tf.compat.v1.summary.merge([loss, accuracy])
        writer = tf.compat.v1.summary.FileWriter(logdir)
        writer.add_session_log(tf.compat.v1.SessionLog(status=tf.compat.v1.SessionLog.START), 0)
        with tf.compat.v1.Session() as sess:
            for i in range(0, 100, 5):
                writer.add_summary(sess.run(merged, {step: float(i)}), i)
        writer.close()

    history = RunHistory(clock=FakeClock())
    history.load_event_files(logdir, upto_step=None)
    for tag in ("loss", "accuracy"):
        expected = tensorboard_steps(logdir, tag)
        assert len(expected) == 20
        assert [s for s, _ in loaded(history, tag)] == [s for s, _ in expected]
        np.testing.assert_allclose([v for _, v in loaded(history, tag)],
                                   [v for _, v in expected], rtol=1e-6)


def test_a_restart_drops_events_past_the_restart_step(tf, tmp_path):
    logdir = str(tmp_path)
    # The first run got to step 150 (its last checkpoint was at 100), then crashed; the
    # second restored step 100 and went on to 200.
    # A tag the second run does not write (yet) loses its orphaned points all the same.
    write_run(tf, logdir, ".1", 0, range(0, 151, 10), tags=("loss", "old_only"))
    write_run(tf, logdir, ".2", 100, range(100, 201, 10), value=lambda tag, step: -step)

    history = RunHistory(clock=FakeClock())
    history.load_event_files(logdir, upto_step=None)
    expected = tensorboard_steps(logdir, "loss")
    assert loaded(history, "loss") == expected
    steps = [s for s, _ in expected]
    assert steps == list(range(0, 100, 10)) + list(range(100, 201, 10))
    assert dict(expected)[100] == -100          # step 100 comes from the second run
    assert loaded(history, "old_only") == tensorboard_steps(logdir, "old_only")
    assert [s for s, _ in loaded(history, "old_only")] == list(range(0, 100, 10))


def test_upto_step_keeps_only_what_the_restored_checkpoint_covers(tf, tmp_path):
    logdir = str(tmp_path)
    write_run(tf, logdir, ".1", 0, range(0, 151, 10))
    history = RunHistory(clock=FakeClock())
    history.load_event_files(logdir, upto_step=100)
    assert [s for s, _ in loaded(history, "loss")] == list(range(0, 101, 10))


def test_a_restart_within_one_file_is_purged_too(tf, tmp_path):
    logdir = str(tmp_path)
    with tf.Graph().as_default():
        writer = tf.compat.v1.summary.FileWriter(logdir)
        start = tf.compat.v1.SessionLog(status=tf.compat.v1.SessionLog.START)
        writer.add_session_log(start, 0)
        for step in range(0, 60, 10):
            writer.add_summary(tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag="loss", simple_value=step)]), step)
        writer.add_session_log(start, 30)
        for step in range(30, 50, 10):
            writer.add_summary(tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag="loss", simple_value=-step)]), step)
        writer.close()
    history = RunHistory(clock=FakeClock())
    history.load_event_files(logdir, upto_step=None)
    assert loaded(history, "loss") == tensorboard_steps(logdir, "loss") == [
        (0, 0.0), (10, 10.0), (20, 20.0), (30, -30.0), (40, -40.0)]


def test_old_files_without_session_logs_use_the_out_of_order_rule(tf, tmp_path):
    # Files older than version 2 carry no START: TensorBoard drops, per tag, what a lower step
    # written later supersedes. Written record by record, with the old version string.
    from tensorboard.compat.proto import event_pb2, summary_pb2
    path = str(tmp_path / "events.out.tfevents.1.old")
    with tf.io.TFRecordWriter(path) as writer:
        def record(**fields):
            writer.write(event_pb2.Event(wall_time=1.0, **fields).SerializeToString())

        record(file_version="brain.Event:1")
        for step in list(range(0, 100, 10)) + list(range(40, 80, 10)):
            tags = ["a", "b"] if step < 60 or step in (90,) else ["a"]
            record(step=step, summary=summary_pb2.Summary(value=[
                summary_pb2.Summary.Value(tag=tag, simple_value=step) for tag in tags]))
    history = RunHistory(clock=FakeClock())
    history.load_event_files(str(tmp_path), upto_step=None)
    for tag in ("a", "b"):
        assert loaded(history, tag) == tensorboard_steps(str(tmp_path), tag)
    assert [s for s, _ in loaded(history, "a")] == [0, 10, 20, 30, 40, 50, 60, 70]


def test_loaded_history_continues_into_live_events_without_doubles(tf, tmp_path):
    logdir = str(tmp_path)
    write_run(tf, logdir, ".1", 0, range(0, 151, 10))
    history = RunHistory(clock=FakeClock())
    history.on_event(events.SessionReady(step=100, restored_from=logdir + "/model.ckpt-100",
                                         is_chief=True, wall_time=0.0))
    # The new session's first summaries may reach the history before the files are read,
    # and may already be in the files too.
    write_run(tf, logdir, ".2", 100, [100, 110])
    for step in (100, 110):
        history.on_event(summary(step, loss=step / 10.0))
    history.load_event_files(logdir, upto_step=100)
    assert [s for s, _ in loaded(history, "loss")] == list(range(0, 111, 10))


def test_loading_keeps_memory_bounded(tf, tmp_path):
    logdir = str(tmp_path)
    write_run(tf, logdir, ".1", 0, range(0, 20_000, 2))      # 10,000 points
    history = RunHistory(max_points=100, clock=FakeClock())
    history.load_event_files(logdir, upto_step=None)
    series = history.snapshot().scalars["loss"]
    assert len(series.steps) <= 100
    assert series.mins.min() == 0.0 and series.maxs.max() == pytest.approx(1999.8)


def test_a_missing_logdir_adds_nothing(tmp_path):
    history = RunHistory(clock=FakeClock())
    version = history.version
    history.load_event_files(str(tmp_path / "not-there"), upto_step=None)
    history.load_event_files(str(tmp_path), upto_step=5)        # exists, but no event files
    assert history.version == version
    assert not history.snapshot().scalars


def test_loaded_step_rates_skip_each_sessions_start_up_record(tf, tmp_path):
    """The step counter's first record after a START measured no interval, and one more at the
    session's first step the start-up (a 0 at the first step of a session that had not trained
    yet): not points of the curve, as live."""
    logdir = str(tmp_path)
    write_run(tf, logdir, ".1", 0, [0] + list(range(0, 51, 10)), tags=("global_step/sec", "loss"),
              value=lambda tag, step: 0.0 if step == 0 else 30.0)
    write_run(tf, logdir, ".2", 50, [50] + list(range(50, 101, 10)), tags=("global_step/sec",),
              value=lambda tag, step: 0.0 if step == 50 else 40.0)
    history = RunHistory(clock=FakeClock())
    history.load_event_files(logdir, upto_step=None)
    assert loaded(history, "global_step/sec") == (
        [(s, 30.0) for s in range(10, 50, 10)] + [(s, 40.0) for s in range(60, 101, 10)])
    assert [s for s, _ in loaded(history, "loss")] == [0] + list(range(0, 50, 10))  # every one


def _write_session(logdir, suffix, start_step=None, stop_why=None):
    """An event file as one session writes it: a START at ``start_step`` (none: a file a new
    session just opened), then a STOP with ``stop_why``. Files of one second sort by
    ``suffix``."""
    from tensorboard.compat.proto import event_pb2  # pylint: disable=import-outside-toplevel
    from tensorboard.summary.writer.event_file_writer import EventFileWriter  # pylint: disable=C0415
    writer = EventFileWriter(str(logdir), filename_suffix=suffix)
    log = event_pb2.SessionLog
    if start_step is not None:
        writer.add_event(event_pb2.Event(step=start_step, session_log=log(status=log.START)))
    if stop_why is not None:
        writer.add_event(event_pb2.Event(step=start_step + 5,
                                         session_log=log(status=log.STOP, msg=stop_why)))
    writer.close()


def test_last_stop_is_the_stop_of_the_newest_session_that_started(tmp_path):
    """``eventfiles.last_stop``: a resume says why the session before it stopped; the file the
    new session just opened (no START yet) does not count."""
    from jupyter_supervisor.view import eventfiles  # pylint: disable=import-outside-toplevel
    assert eventfiles.last_stop(str(tmp_path)) is None
    _write_session(tmp_path, ".a", 0, "stopped by the user")
    assert eventfiles.last_stop(str(tmp_path)) == "stopped by the user"
    _write_session(tmp_path, ".b", 5, "the kernel got SIGTERM")
    assert eventfiles.last_stop(str(tmp_path)) == "the kernel got SIGTERM"
    _write_session(tmp_path, ".c")
    assert sorted(p.name for p in tmp_path.iterdir())[-1].endswith(".c")
    assert eventfiles.last_stop(str(tmp_path)) == "the kernel got SIGTERM"


def test_a_stop_ends_the_line_of_output_it_cut():
    """Keras' progress bar cut by a stop: a resumed session's output starts a line of its
    own, not "1/8 ━━ loss: 0.3Epoch 83/100"."""
    history = RunHistory()
    history.on_event(events.SessionReady(step=0, restored_from=None, is_chief=True,
                                         wall_time=0.0))
    history.append_output("Epoch 83/100\n1/8 ━━ loss: 0.3")
    history.on_event(events.Stopped(events.REQUESTED, None, 657, 1.0))
    history.on_event(events.SessionReady(step=657, restored_from="/l/model.ckpt-657",
                                         is_chief=True, wall_time=2.0))
    history.append_output("Epoch 83/100\n")
    assert history.snapshot().output.splitlines()[-2:] == ["1/8 ━━ loss: 0.3", "Epoch 83/100"]
